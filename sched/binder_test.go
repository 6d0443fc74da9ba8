package sched_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/policies"
	"atoll/profiles"
	"atoll/sched"
)

// recordingBinder checks, for every request the driver makes, that the
// preemption state the kernel will need is there — on a real GPU the
// binder packs it into the kernel's arguments, so a missing field is a
// kernel reading garbage.
type recordingBinder struct {
	*sched.ProfileBinder
	t     *testing.T
	forms map[gpu.Form]int
}

func (b *recordingBinder) ProgressBytes() int { return 32 }

func (b *recordingBinder) Bind(r sched.BindRequest) (*gpu.Launch, error) {
	b.forms[r.Form]++
	switch r.Form {
	case gpu.Reset:
		if !r.Ctl.Flag.Valid() || r.Ctl.Counter == 0 {
			b.t.Errorf("reset launch of %s k%d without a flag or a flag-relay block: %+v", r.Client, r.Kernel, r.Ctl)
		}
	case gpu.Resumable:
		if !r.Ctl.Flag.Valid() || r.Ctl.Counter == 0 || !r.Ctl.Done.Valid() {
			b.t.Errorf("resumable launch of %s k%d with incomplete control %+v", r.Client, r.Kernel, r.Ctl)
		}
	case gpu.Padded:
		if r.Pad == nil || r.Pad.Blocks <= 0 || r.Pad.Ctl.Counter == 0 || !r.Pad.Ctl.Done.Valid() || r.Pad.Client.Class != sched.BE {
			b.t.Errorf("padded launch of %s k%d with bad pad %+v", r.Client, r.Kernel, r.Pad)
		}
	}
	return b.ProfileBinder.Bind(r)
}

func TestBinderReceivesPreemptionState(t *testing.T) {
	// atoll pads only with a shallow HP window: with its default one a
	// request's kernels are all launched on arrival, while BE drains.
	for _, name := range []string{"reef", "atoll:hp-window=4,padding=true,preempt=true"} {
		t.Run(name, func(t *testing.T) {
			dev := newSim(t)
			w := smallWorkload(t, 2*time.Millisecond, 20*time.Millisecond)
			pb, err := sched.NewProfileBinder(dev, w)
			if err != nil {
				t.Fatal(err)
			}
			rb := &recordingBinder{ProfileBinder: pb, t: t, forms: map[gpu.Form]int{}}
			p, err := policies.ByName(name)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := sched.Run(context.Background(), dev, w, sched.Options{Policy: p, Duration: 20 * time.Millisecond, Binder: rb})
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Requests) == 0 {
				t.Fatal("no request completed")
			}
			want := gpu.Reset
			if name != "reef" {
				want = gpu.Resumable
			}
			if rb.forms[want] == 0 || rb.forms[gpu.Padded] == 0 {
				t.Errorf("%s made no %s or padded launches: %v", name, want, rb.forms)
			}
		})
	}
}

// notReadyBinder answers ErrNotReady for the first n padded requests, as
// the kernel library does while a pair kernel compiles in the background.
type notReadyBinder struct {
	*sched.ProfileBinder
	n     int
	plain int // HP requests re-bound Plain after a refusal
	last  bool
}

func (b *notReadyBinder) Bind(r sched.BindRequest) (*gpu.Launch, error) {
	if r.Form == gpu.Padded && b.n > 0 {
		b.n--
		b.last = true
		return nil, fmt.Errorf("pair compiling: %w", sched.ErrNotReady)
	}
	if b.last {
		if r.Form != gpu.Plain || r.Pad != nil || r.Client.Class != sched.HP {
			return nil, fmt.Errorf("after a refused padded launch the driver asked for %s of %s (pad %v), want the HP kernel Plain", r.Form, r.Client, r.Pad)
		}
		b.plain++
	}
	b.last = false
	return b.ProfileBinder.Bind(r)
}

// TestPaddedNotReadyRunsHPAlone: while a pair kernel is not ready the
// driver launches the HP kernel alone; HP requests all complete, the BE
// client still progresses, and the trace counts those launches apart.
func TestPaddedNotReadyRunsHPAlone(t *testing.T) {
	dev := newSim(t)
	w := smallWorkload(t, 2*time.Millisecond, 20*time.Millisecond)
	pb, err := sched.NewProfileBinder(dev, w)
	if err != nil {
		t.Fatal(err)
	}
	b := &notReadyBinder{ProfileBinder: pb, n: 5}
	p, err := policies.ByName("atoll:hp-window=4,padding=true,preempt=true")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := sched.Run(context.Background(), dev, w, sched.Options{Policy: p, Duration: 20 * time.Millisecond, Binder: b})
	if err != nil {
		t.Fatal(err)
	}
	if b.n != 0 || b.plain != 5 || tr.UnpaddedLaunches != 5 {
		t.Errorf("refusals left %d, HP re-bound plain %d times, trace counts %d unpadded; want 0, 5, 5", b.n, b.plain, tr.UnpaddedLaunches)
	}
	if tr.PaddedLaunches == 0 {
		t.Errorf("no padded launch once the pair was ready")
	}
	if len(tr.Requests) < len(w.HP[0].Arrivals)-1 || tr.BEWork == 0 {
		t.Errorf("%d of %d requests done, BE work %v", len(tr.Requests), len(w.HP[0].Arrivals), tr.BEWork)
	}
}

// TestInPlaceKernelsRunOnce: an optimizer update (tagged in-place) is never
// launched in Reset form nor behind an in-flight Reset launch, so however
// often HP cuts the BE client, each iteration launches it exactly once —
// under reef, which asks for Reset everywhere, and atoll.
func TestInPlaceKernelsRunOnce(t *testing.T) {
	for _, name := range []string{"reef", "atoll"} {
		t.Run(name, func(t *testing.T) {
			dev := newSim(t)
			w := smallWorkload(t, 1500*time.Microsecond, 60*time.Millisecond)
			w.BE = w.BE[:1]
			w.BE[0].Profile = mustProfile(t, "train", `
fwd dur=400us grid=4224 block=256 class=compute
bwd dur=300us grid=132 block=256 class=compute
sgd dur=120us grid=132 block=256 class=memory tags=in-place
tail dur=200us grid=132 block=256 class=compute
`)
			pb, err := sched.NewProfileBinder(dev, w)
			if err != nil {
				t.Fatal(err)
			}
			p, err := policies.ByName(name)
			if err != nil {
				t.Fatal(err)
			}
			launches, resets := 0, 0
			opt := sched.Options{Policy: p, Duration: 60 * time.Millisecond, Binder: pb,
				OnDecision: func(d sched.Decision) {
					if d.Kind != sched.DecLaunch || d.Launch.Client.Class != sched.BE {
						return
					}
					if d.Launch.Form == gpu.Reset {
						resets++
					}
					if d.Launch.Kernel == 2 {
						launches++
						if d.Launch.Form == gpu.Reset {
							t.Errorf("in-place kernel launched in Reset form")
						}
					}
				}}
			tr, err := sched.Run(context.Background(), dev, w, opt)
			if err != nil {
				t.Fatal(err)
			}
			st := tr.Stats
			t.Logf("%s: %d BE reset launches, %d cuts, %d iterations, in-place kernel launched %d times", name, resets, st.Cuts, st.Iterations, launches)
			if name == "reef" && (resets == 0 || st.Cuts == 0) {
				t.Fatalf("reef made %d reset launches, %d cuts: the scenario does not exercise cuts", resets, st.Cuts)
			}
			// Each started iteration launches the update once (the last may
			// be cut off by the end of the run before reaching it).
			if it := st.Iterations; launches < it || launches > it+1 {
				t.Errorf("in-place kernel launched %d times over %d completed iterations: a cut re-ran it", launches, it)
			}
		})
	}
}

// A vendor kernel measured on SM partitions runs its Plain launches as one
// wave over the SMs it was measured to need (its profile grid is atoll's
// own kernel's, which its Resumable form keeps), so on the simulator two
// streams of it share the GPU as they do on the GPU: a request that needs
// every SM takes about twice as long beside another, one that needs a
// quarter of them does not slow down.
func TestProfileBinderVendorKernelGrid(t *testing.T) {
	run := func(partitionSMs int) (alone, together time.Duration) {
		p := mustProfile(t, "v", "gemm dur=200us grid=32 block=256 regs=64 class=compute")
		k := &p.Kernels[0]
		k.Tags = []string{profiles.TagBLAS}
		k.Partition = []profiles.Point{{SMs: 32, DurationUs: 800}, {SMs: 64, DurationUs: 400}, {SMs: 132, DurationUs: 200}}
		if partitionSMs == 32 {
			k.Partition = []profiles.Point{{SMs: 32, DurationUs: 205}, {SMs: 132, DurationUs: 200}}
		}
		w := sched.Workload{HP: []sched.HPWorkload{
			{Name: "a", Profile: p, Arrivals: []time.Duration{0, 2 * time.Millisecond}},
			{Name: "b", Profile: p, Arrivals: []time.Duration{0}},
		}}
		dev := newSim(t)
		pb, err := sched.NewProfileBinder(dev, w)
		if err != nil {
			t.Fatal(err)
		}
		l, err := pb.Bind(sched.BindRequest{Client: sched.HPClientID(0), Form: gpu.Plain})
		if err != nil {
			t.Fatal(err)
		}
		perSM := sched.BlocksPerSM(gpu.H100SXM, k)
		if want := k.PartitionSMs() * perSM; l.Grid.Count() != want {
			t.Errorf("plain grid %d blocks, want %d SMs × %d", l.Grid.Count(), k.PartitionSMs(), perSM)
		}
		if r, err := pb.Bind(sched.BindRequest{Client: sched.HPClientID(0), Form: gpu.Resumable}); err != nil || r.Logical != 32 {
			t.Errorf("resumable form: logical blocks %v (err %v), want the profile's 32", r, err)
		}
		pol, _ := policies.ByName("priority")
		tr, err := sched.Run(context.Background(), dev, w, sched.Options{Policy: pol, Duration: 3 * time.Millisecond, NoHPGraphs: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range tr.Requests {
			if r.Arrival > 0 {
				alone = r.Service()
			} else {
				together = max(together, r.Service())
			}
		}
		return alone, together
	}
	// atoll's own kernel keeps its grid, partition points or not.
	own := mustProfile(t, "v", "gemm dur=200us grid=32 block=256 regs=64 class=compute")
	own.Kernels[0].Partition = []profiles.Point{{SMs: 32, DurationUs: 800}, {SMs: 132, DurationUs: 200}}
	pb, err := sched.NewProfileBinder(newSim(t), sched.Workload{HP: []sched.HPWorkload{{Name: "own", Profile: own}}})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := pb.Bind(sched.BindRequest{Client: sched.HPClientID(0), Form: gpu.Plain}); err != nil || l.Grid.Count() != 32 {
		t.Errorf("an own kernel with partition points: %v (err %v), want its grid of 32 blocks", l, err)
	}
	if alone, together := run(132); together < 18*alone/10 {
		t.Errorf("a kernel needing every SM: %v alone, %v beside another; want about twice", alone, together)
	}
	if alone, together := run(32); together > 11*alone/10 {
		t.Errorf("a kernel needing 32 SMs: %v alone, %v beside another; want the same", alone, together)
	}
}

// A vendor-library kernel's Plain launch is a vendor function on the
// simulator (a product, or a convolution where the profile tags it one), so that its
// host cost is a vendor call's; its other forms and atoll's own kernels
// launch the profile's own function.
func TestProfileBinderVendorFuncs(t *testing.T) {
	p := mustProfile(t, "v", "bn dur=10us grid=132 block=256\nfc dur=20us grid=32 block=256 tags=blas\nconv dur=30us grid=64 block=256 tags=blas,blas-conv\npw dur=30us grid=64 block=256 tags=blas")
	// A pointwise convolution's BLAS form is one product: no blas-conv tag.
	p.Kernels[1].Kernel, p.Kernels[2].Kernel, p.Kernels[3].Kernel = "gemm_bf16", "conv2d_bf16_64x64", "conv2d_bf16_64x64"
	dev := newSim(t)
	pb, err := sched.NewProfileBinder(dev, sched.Workload{BE: []sched.BEWorkload{{Name: "v", Profile: p}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kernel int
		form   gpu.Form
		want   string
	}{
		{0, gpu.Plain, "bn"},
		{1, gpu.Plain, gpu.VendorMatmulPrefix + "fc"},
		{2, gpu.Plain, gpu.VendorConvPrefix + "conv"},
		{2, gpu.Resumable, "conv"},
		{3, gpu.Plain, gpu.VendorMatmulPrefix + "pw"},
		{1, gpu.Reset, "fc"},
	} {
		l, err := pb.Bind(sched.BindRequest{Client: sched.BEClientID(0), Kernel: c.kernel, Form: c.form})
		if err != nil {
			t.Fatal(err)
		}
		if got := dev.FuncName(l.Func); got != c.want {
			t.Errorf("kernel %d %s: function %q, want %q", c.kernel, c.form, got, c.want)
		}
	}
}

// A vendor kernel's recorded launches ride on its Plain launch (the
// simulator runs them in its place) and on no other form, which runs
// atoll's own kernel.
func TestProfileBinderVendorLaunches(t *testing.T) {
	p := mustProfile(t, "v", "gemm dur=200us grid=32 block=256 regs=64 class=compute")
	k := &p.Kernels[0]
	k.Tags = []string{profiles.TagBLAS}
	k.Launches = []profiles.Launch{
		{Function: "atoll_im2col8", Grid: 600, Block: 256, Registers: 32, Share: 0.3, MemoryPct: 70},
		{Function: "nvjet_sm90", Grid: 132, Block: 384, Registers: 168, SharedMem: 200 << 10, Share: 0.7, ComputePct: 60},
	}
	pb, err := sched.NewProfileBinder(newSim(t), sched.Workload{HP: []sched.HPWorkload{{Name: "v", Profile: p}}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := pb.Bind(sched.BindRequest{Client: sched.HPClientID(0), Form: gpu.Plain})
	if err != nil {
		t.Fatal(err)
	}
	want := []gpu.VendorLaunch{
		{Name: "atoll_im2col8", Grid: 600, Block: 256, Registers: 32, Share: 0.3, MemoryFrac: 0.7},
		{Name: "nvjet_sm90", Grid: 132, Block: 384, Registers: 168, SharedMem: 200 << 10, Share: 0.7, ComputeFrac: 0.6},
	}
	if !reflect.DeepEqual(l.Vendor, want) {
		t.Errorf("plain launch's vendor launches %+v, want %+v", l.Vendor, want)
	}
	for _, f := range []gpu.Form{gpu.Reset, gpu.Resumable} {
		r, err := pb.Bind(sched.BindRequest{Client: sched.HPClientID(0), Form: f, Ctl: sched.Control{Flag: gpu.HostWord{Dev: 1}, Counter: 4, Done: gpu.HostWord{Dev: 2}}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Vendor != nil {
			t.Errorf("%s launch carries vendor launches %+v: it runs atoll's own kernel", f, r.Vendor)
		}
	}
}
