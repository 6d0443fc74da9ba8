package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/kernels"
	"atoll/profiles"
	"atoll/sched"
)

func newProbeSim(t testing.TB) *sim.Device {
	t.Helper()
	d, err := sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// smallProbe is a probe small enough for unit tests: 4 HP kernels, 2 BE
// kernels of 200 µs blocks, a handful of requests.
func smallProbe() ProbeConfig {
	c := DefaultProbeConfig()
	c.BlockUs = []float64{200}
	c.Requests, c.Warmup = 8, 2
	c.HPKernels, c.BEKernels = 4, 2
	return c
}

func TestTileGEMMHasExactTiles(t *testing.T) {
	for tiles := 132; tiles <= 9000; tiles += 7 {
		g := tileGEMM(tiles, 256)
		geo := g.Geometry()
		if geo.Grid.Count() != tiles {
			t.Fatalf("tileGEMM(%d) has grid %v = %d blocks", tiles, geo.Grid, geo.Grid.Count())
		}
		if geo.Block.Count() != 256 || g.Kernel() != "gemm_bf16_128x128" {
			t.Fatalf("tileGEMM(%d) is %s with %d threads, want the 128x128 tile", tiles, g.Kernel(), geo.Block.Count())
		}
	}
	for _, k := range []float64{-5, 0, 63, 64, 95, 97, 1000} {
		if r := roundK(k); r < 64 || r%64 != 0 {
			t.Errorf("roundK(%v) = %d, want a positive multiple of 64", k, r)
		}
	}
}

func TestCalibrateHitsTargets(t *testing.T) {
	c := DefaultProbeConfig()
	spec := gpu.H100SXM
	s, err := Calibrate(context.Background(), spec, EstimateTimer{Spec: spec}, c)
	if err != nil {
		t.Fatal(err)
	}
	hk := s.HPProfile.Kernels
	if len(hk) != c.HPKernels || hk[0].Grid[0]*hk[0].Grid[1] != 132 || hk[0].Block[0] != 256 {
		t.Fatalf("HP profile: %d kernels, grid %v, block %v; want %d kernels of 132 x 256", len(hk), hk[0].Grid, hk[0].Block, c.HPKernels)
	}
	if d := hk[0].DurationUs; math.Abs(d-c.HPKernelUs) > 0.1*c.HPKernelUs {
		t.Errorf("HP kernel %.1f µs, aimed at %.1f", d, c.HPKernelUs)
	}
	if len(s.BE) != len(c.BlockUs) {
		t.Fatalf("%d BE jobs for %d block lengths", len(s.BE), len(c.BlockUs))
	}
	for _, b := range s.BE {
		if math.Abs(b.BlockUs-b.TargetBlockUs) > 0.1*b.TargetBlockUs {
			t.Errorf("BE block %.1f µs, aimed at %.0f (K=%d, %d waves)", b.BlockUs, b.TargetBlockUs, b.Op.K, b.Waves)
		}
		k := b.Profile.Kernels[0]
		if got, want := k.Grid[0]*k.Grid[1], b.Waves*264; got != want {
			t.Errorf("BE %.0f µs: %d blocks, want %d waves x 264 slots = %d", b.TargetBlockUs, got, b.Waves, want)
		}
		if len(b.Profile.Kernels) != c.BEKernels || b.Profile.Source != profiles.SourceEstimated {
			t.Errorf("BE profile: %d kernels from %q", len(b.Profile.Kernels), b.Profile.Source)
		}
		if err := b.Profile.Validate(); err != nil {
			t.Errorf("BE profile invalid: %v", err)
		}
	}
	if err := s.HPProfile.Validate(); err != nil {
		t.Errorf("HP profile invalid: %v", err)
	}
}

// flatTimer grows with K but never reaches anything: the search must say
// it cannot aim rather than loop or return nonsense.
type flatTimer struct{}

func (flatTimer) Source() string { return profiles.SourceMeasured }
func (flatTimer) Kernel(_ context.Context, name, _ string, op kernels.GEMM) (profiles.Kernel, error) {
	return measuredKernel(gpu.H100SXM, name, op, 0, 10), nil
}

func TestCalibrateRefusesAFlatTimer(t *testing.T) {
	_, err := Calibrate(context.Background(), gpu.H100SXM, flatTimer{}, smallProbe())
	if !errors.Is(err, ErrProbe) || !strings.Contains(err.Error(), "does not grow with K") {
		t.Fatalf("got %v, want ErrProbe saying the duration does not grow", err)
	}
}

func TestDeviceTimerOnSim(t *testing.T) {
	dev := newProbeSim(t)
	lib := kernels.New(dev)
	pool := NewBufferPool(dev, true, 1)
	defer pool.Close()
	tm := DeviceTimer{Lib: lib, Pool: pool, Reps: 3}
	small, err := tm.Kernel(context.Background(), "a", "x", tileGEMM(264, 512))
	if err != nil {
		t.Fatal(err)
	}
	big, err := tm.Kernel(context.Background(), "b", "x", tileGEMM(264, 4096))
	if err != nil {
		t.Fatal(err)
	}
	if !(small.DurationUs > 0 && big.DurationUs > 2*small.DurationUs) {
		t.Errorf("K=512: %.2f µs, K=4096: %.2f µs; want positive and growing with K", small.DurationUs, big.DurationUs)
	}
	if big.SMsNeeded != 132 || big.Class == "" || big.ComputePct <= 0 {
		t.Errorf("profile fields not filled: %+v", big)
	}
	for _, f := range []gpu.Form{gpu.Reset, gpu.Resumable} {
		us, err := tm.FormUs(context.Background(), "x", tileGEMM(264*4, 512), f, f == gpu.Reset)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !(us > 0) {
			t.Errorf("%s alone: %v µs", f, us)
		}
	}
}

func TestBufferPoolGrowsAndShares(t *testing.T) {
	dev := newProbeSim(t)
	pool := NewBufferPool(dev, true, 7)
	a, err := pool.Get("be", tileGEMM(264, 256))
	if err != nil {
		t.Fatal(err)
	}
	b, err := pool.Get("be", tileGEMM(264, 128)) // smaller: same memory
	if err != nil {
		t.Fatal(err)
	}
	if a.T[0].Ptr != b.T[0].Ptr {
		t.Errorf("a smaller op of the same slot got new memory")
	}
	raw := make([]byte, 64)
	if err := dev.CopyFromDevice(raw, a.T[0].Ptr); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(raw, make([]byte, 64)) {
		t.Errorf("input A was not filled")
	}
	c, err := pool.Get("be", tileGEMM(264, 4096)) // larger: regrown
	if err != nil {
		t.Fatal(err)
	}
	if g := tileGEMM(264, 4096); c.T[0].Elems != g.M*g.K || c.T[0].Ptr == a.T[0].Ptr {
		t.Errorf("grown A: %d elements at %#x (was %#x), want %d in new memory", c.T[0].Elems, c.T[0].Ptr, a.T[0].Ptr, g.M*g.K)
	}
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
}

// probeBinder binds one HP client (n kernels of hp) and one BE client.
func probeBinder(t *testing.T, dev gpu.Device, hp, be kernels.GEMM) (*ProbeBinder, *profiles.Profile, *profiles.Profile) {
	t.Helper()
	spec := dev.Info().Spec
	hk := measuredKernel(spec, "hp", hp, 0, 50)
	bk := measuredKernel(spec, "be", be, 0, 400)
	hpP := probeProfile(spec, "probe-hp", profiles.PhaseInference, profiles.SourceMeasured, hk, 3, "hp")
	beP := probeProfile(spec, "probe-be", profiles.PhaseTraining, profiles.SourceMeasured, bk, 2, "be")
	pool := NewBufferPool(dev, false, 1)
	t.Cleanup(func() { pool.Close() })
	b, err := NewProbeBinder(kernels.New(dev), pool,
		[]BinderClient{{Ops: []kernels.Op{hp, hp, hp}, Profile: hpP, Slot: "hp"}},
		[]BinderClient{{Ops: []kernels.Op{be, be}, Profile: beP, Slot: "be"}})
	if err != nil {
		t.Fatal(err)
	}
	return b, hpP, beP
}

func TestProbeBinderForms(t *testing.T) {
	dev := newProbeSim(t)
	hp, be := tileGEMM(132, 1024), tileGEMM(528, 2048)
	b, hpP, beP := probeBinder(t, dev, hp, be)
	if b.ProgressBytes() != kernels.CounterBytes {
		t.Errorf("ProgressBytes() = %d, want kernels.CounterBytes", b.ProgressBytes())
	}
	words, err := dev.NewHostWords(4)
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := dev.Alloc(kernels.CounterBytes)
	if err != nil {
		t.Fatal(err)
	}
	ctl := sched.Control{Flag: words[0], Counter: ctr, Done: words[1]}
	ref := kernels.New(dev)
	refBufs, err := NewBufferPool(dev, false, 1).Get("be", be)
	if err != nil {
		t.Fatal(err)
	}
	for _, form := range []gpu.Form{gpu.Plain, gpu.Reset, gpu.Resumable} {
		// The first bind goes through Library.Launch, later ones through
		// the template: both must be what Library.Launch makes.
		for i := range 3 {
			c := ctl
			if i == 2 {
				c.Done = words[2]
			}
			l, err := b.Bind(sched.BindRequest{Client: sched.BEClientID(0), Kernel: 1, Form: form, Ctl: c})
			if err != nil {
				t.Fatalf("%s bind %d: %v", form, i, err)
			}
			kc := kernels.Control{Flag: c.Flag, Counter: c.Counter, Done: c.Done}
			if form == gpu.Plain {
				kc = kernels.Control{}
			}
			want, err := ref.Launch(be, form, refBufs, kc)
			if err != nil {
				t.Fatal(err)
			}
			if l.Form != form || l.Grid != want.Grid || l.Logical != want.Logical || l.Flag != want.Flag || l.Counter != want.Counter || l.Done != want.Done {
				t.Errorf("%s bind %d: launch %+v, want %+v", form, i, l, want)
			}
			if !reflect.DeepEqual(l.Cost, beP.Kernels[1].Cost()) {
				t.Errorf("%s bind %d: cost %+v, want the profile's %+v", form, i, l.Cost, beP.Kernels[1].Cost())
			}
			got, exp := l.Args.Bytes(), want.Args.Bytes()
			// Buffers differ (two pools); the Ctl must match but its epoch.
			if len(got) != len(exp) || !bytes.Equal(got[:40], exp[:40]) || !bytes.Equal(got[44:48], exp[44:48]) {
				t.Errorf("%s bind %d: Ctl bytes\n got %x\nwant %x", form, i, got[:48], exp[:48])
			}
			if form == gpu.Resumable && i > 0 && binary.LittleEndian.Uint32(got[40:]) == 0 {
				t.Errorf("%s bind %d: epoch 0", form, i)
			}
		}
	}
	// Two resumable binds in a row get different epochs (the flag relay
	// trusts only its own launch's reads).
	l1, _ := b.Bind(sched.BindRequest{Client: sched.BEClientID(0), Kernel: 0, Form: gpu.Resumable, Ctl: ctl})
	l2, _ := b.Bind(sched.BindRequest{Client: sched.BEClientID(0), Kernel: 0, Form: gpu.Resumable, Ctl: ctl})
	if e1, e2 := binary.LittleEndian.Uint32(l1.Args.Bytes()[40:]), binary.LittleEndian.Uint32(l2.Args.Bytes()[40:]); e1 == e2 {
		t.Errorf("consecutive resumable launches share epoch %d", e1)
	}
	// Padded: the simulator gets the pad description; a real GPU the
	// flattened grid.
	pr := sched.BindRequest{Client: sched.HPClientID(0), Kernel: 2, Form: gpu.Padded,
		Pad: &sched.PadRequest{Client: sched.BEClientID(0), Kernel: 0, Blocks: 66, Ctl: ctl}}
	l, err := b.Bind(pr)
	if err != nil {
		t.Fatal(err)
	}
	if l.Pad == nil || l.Pad.Grid.Count() != 66 || l.Grid.Count() != 132 || !reflect.DeepEqual(l.Cost, hpP.Kernels[2].Cost()) || !reflect.DeepEqual(l.Pad.Cost, beP.Kernels[0].Cost()) {
		t.Errorf("padded launch: grid %v, pad %+v, cost %+v", l.Grid, l.Pad, l.Cost)
	}
	b.flatten = true
	l, err = b.Bind(pr)
	if err != nil {
		t.Fatal(err)
	}
	if l.Pad != nil || l.Grid.Count() != 132+66 || l.Form != gpu.Padded {
		t.Errorf("flattened padded launch: grid %v, pad %v, form %s", l.Grid, l.Pad, l.Form)
	}
}

func TestProbeBinderBadInput(t *testing.T) {
	dev := newProbeSim(t)
	hp, be := tileGEMM(132, 1024), tileGEMM(528, 2048)
	b, hpP, _ := probeBinder(t, dev, hp, be)
	for name, r := range map[string]sched.BindRequest{
		"unknown kernel": {Client: sched.HPClientID(0), Kernel: 3},
		"unknown client": {Client: sched.BEClientID(1)},
		"negative":       {Client: sched.HPClientID(0), Kernel: -1},
		"pad missing":    {Client: sched.HPClientID(0), Form: gpu.Padded},
		"bad pad":        {Client: sched.HPClientID(0), Form: gpu.Padded, Pad: &sched.PadRequest{Client: sched.BEClientID(0), Kernel: 9}},
		"reset no flag":  {Client: sched.BEClientID(0), Form: gpu.Reset},
		"unknown form":   {Client: sched.BEClientID(0), Form: gpu.Form(9)},
	} {
		if _, err := b.Bind(r); !errors.Is(err, ErrProbe) {
			t.Errorf("%s: got %v, want ErrProbe", name, err)
		}
	}
	pool := NewBufferPool(dev, false, 1)
	lib := kernels.New(dev)
	if _, err := NewProbeBinder(lib, pool, []BinderClient{{Ops: []kernels.Op{hp}, Profile: hpP}}, nil); !errors.Is(err, ErrProbe) || !strings.Contains(err.Error(), "1 ops for 3 profile kernels") {
		t.Errorf("short op list: %v", err)
	}
	if _, err := NewProbeBinder(lib, pool, []BinderClient{{Ops: []kernels.Op{hp, be, hp}, Profile: hpP}}, nil); err != nil {
		t.Errorf("same kernel family at another shape is a valid binding: %v", err)
	}
	other := kernels.GEMM{M: 64, N: 64, K: 64, In: kernels.BF16, Out: kernels.BF16} // 64x64 tile family
	if _, err := NewProbeBinder(lib, pool, []BinderClient{{Ops: []kernels.Op{hp, other, hp}, Profile: hpP}}, nil); !errors.Is(err, ErrProbe) || !strings.Contains(err.Error(), "profile says") {
		t.Errorf("op of another kernel family: %v", err)
	}
	if _, err := NewProbeBinder(lib, pool, []BinderClient{{Ops: nil, Profile: nil}}, nil); !errors.Is(err, ErrProbe) {
		t.Errorf("nil profile: %v", err)
	}
}

func TestProbeConfigErrors(t *testing.T) {
	for name, mut := range map[string]func(*ProbeConfig){
		"no blocks":        func(c *ProbeConfig) { c.BlockUs = nil },
		"negative block":   func(c *ProbeConfig) { c.BlockUs = []float64{-1} },
		"no requests":      func(c *ProbeConfig) { c.Requests = 0 },
		"negative warm-up": func(c *ProbeConfig) { c.Warmup = -1 },
		"no gap":           func(c *ProbeConfig) { c.Gap = 0 },
		"unknown policy":   func(c *ProbeConfig) { c.Policies = []string{"tgs"} },
		"no HP kernels":    func(c *ProbeConfig) { c.HPKernels = 0 },
		"no HP length":     func(c *ProbeConfig) { c.HPKernelUs = 0 },
	} {
		c := smallProbe()
		mut(&c)
		if _, err := Calibrate(context.Background(), gpu.H100SXM, EstimateTimer{Spec: gpu.H100SXM}, c); !errors.Is(err, ErrProbe) {
			t.Errorf("%s: got %v, want ErrProbe", name, err)
		}
	}
	if _, err := ProbePolicy("atoll-ptb"); err != nil {
		t.Error(err)
	}
	if p, _ := ProbePolicy("reef-nopad"); p == nil || p.Name() != "reef" {
		t.Errorf("reef-nopad is REEF without padding, got %v", p)
	}
}

// TestRunProbeOnSim runs every mechanism through the scheduler with the
// binder on the simulator and checks what the mechanisms must show.
func TestRunProbeOnSim(t *testing.T) {
	dev := newProbeSim(t)
	c := smallProbe()
	spec := dev.Info().Spec
	setup, err := Calibrate(context.Background(), spec, EstimateTimer{Spec: spec}, c)
	if err != nil {
		t.Fatal(err)
	}
	lib := kernels.New(dev)
	pool := NewBufferPool(dev, false, 1)
	defer pool.Close()
	t0 := dev.Now()
	res, err := RunProbe(context.Background(), lib, pool, setup, c)
	if err != nil {
		t.Fatal(err)
	}
	// Each cell's arrivals are relative to its own start: a cell must not
	// wait out the device's age (a regression that made the GPU probe's
	// cells double in length one after another).
	perCell := time.Duration(c.Warmup+c.Requests)*c.Gap + time.Second
	if span := dev.Now() - t0; span > time.Duration(len(c.Policies)*len(setup.BE))*perCell {
		t.Errorf("the probe took %v of device time for %d cells, want at most %v each", span, len(c.Policies)*len(setup.BE), perCell)
	}
	if len(res.Cells) != len(c.Policies) {
		t.Fatalf("%d cells for %d mechanisms", len(res.Cells), len(c.Policies))
	}
	solo := setup.HPProfile.Total()
	if d := time.Duration(res.DirectHPUs * float64(time.Microsecond)); d < solo || d > solo*11/10 {
		t.Errorf("HP launched directly took %v, profile says %v", d, solo)
	}
	cells := map[string]ProbeCell{}
	for _, cell := range res.Cells {
		if cell.Error != "" {
			t.Fatalf("%s: %s", cell.Policy, cell.Error)
		}
		if cell.HP.Count != c.Requests || len(cell.LatenciesUs) != c.Requests {
			t.Errorf("%s: %d requests measured, want %d", cell.Policy, cell.HP.Count, c.Requests)
		}
		if lag := time.Duration(cell.FirstLaunchLag.P50 * float64(time.Microsecond)); lag < 0 || lag > 100*time.Millisecond {
			t.Errorf("%s: first launch %v after its arrival (p50), want within [0, 100ms]", cell.Policy, lag)
		}
		cells[cell.Policy] = cell
	}
	if d := cells["dedicated"]; d.HP.P50 < float64(solo)/1e3 || len(d.BEForms) != 0 {
		t.Errorf("dedicated: p50 %.0f µs (HP alone is %v), BE launches %v", d.HP.P50, solo, d.BEForms)
	}
	if s, p := cells["streams"], cells["priority"]; s.HP.P99 <= p.HP.P99 {
		t.Errorf("plain streams p99 %.0f µs not above priorities' %.0f", s.HP.P99, p.HP.P99)
	}
	forms := map[string]string{"streams": "plain", "priority": "plain", "reef": "reset", "reef-nopad": "reset", "atoll-ptb": "resumable"}
	for pol, f := range forms {
		cell := cells[pol]
		if cell.BEForms[f] == 0 || len(cell.BEForms) != 1 {
			t.Errorf("%s launched BE as %v, want %s only", pol, cell.BEForms, f)
		}
	}
	for _, pol := range []string{"reef", "atoll", "atoll-ptb"} {
		if cells[pol].Preemptions == 0 {
			t.Errorf("%s preempted nothing", pol)
		}
	}
	if cells["atoll-ptb"].Padded != 0 || cells["reef-nopad"].Padded != 0 {
		t.Errorf("padding off but padded launches made")
	}
	var buf bytes.Buffer
	if err := WriteProbe(&buf, res); err != nil {
		t.Fatal(err)
	}
	back, err := ReadProbe(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if back.Setup.BE[0].Op != setup.BE[0].Op || back.DirectHPUs != res.DirectHPUs || len(back.Cells) != len(res.Cells) {
		t.Errorf("round trip changed the result")
	}
	bad := *res
	badSetup := *res.Setup
	badSetup.HPOp = kernels.GEMM{M: 64, N: 64, K: 64, In: kernels.BF16, Out: kernels.BF16}
	bad.Setup = &badSetup
	buf.Reset()
	if err := WriteProbe(&buf, &bad); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadProbe(&buf); !errors.Is(err, ErrProbe) || !strings.Contains(err.Error(), "its op is gemm_bf16_64x64") {
		t.Errorf("a result whose HP op does not match its profile: %v", err)
	}
	var tab bytes.Buffer
	if err := ProbeTable(&tab, res); err != nil {
		t.Fatal(err)
	}
	for _, pol := range c.Policies {
		if !strings.Contains(tab.String(), pol) {
			t.Errorf("table has no row for %s:\n%s", pol, tab.String())
		}
	}
	tab.Reset()
	if err := ProbeSummary(&tab, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tab.String(), "200 µs blocks") || !strings.Contains(tab.String(), "atoll-ptb") || !strings.Contains(tab.String(), "(1.00x)") {
		t.Errorf("summary lacks the row, a column or dedicated's ratio:\n%s", tab.String())
	}
	if !strings.Contains(DescribeProbe(res), "launched directly") {
		t.Errorf("description lacks the direct HP reference")
	}
}

func TestReadProbeErrors(t *testing.T) {
	for name, in := range map[string]string{
		"not json":      "{",
		"wrong version": `{"apiVersion":"atoll/probe/v0","setup":{}}`,
		"no setup":      `{"apiVersion":"atoll/probe/v1"}`,
		"empty setup":   `{"apiVersion":"atoll/probe/v1","setup":{"hpProfile":{"kernels":[]},"be":[{}]}}`,
	} {
		if _, err := ReadProbe(strings.NewReader(in)); !errors.Is(err, ErrProbe) {
			t.Errorf("%s: got %v, want ErrProbe", name, err)
		}
	}
}

func TestSpinDeviceCapsWaits(t *testing.T) {
	dev := newProbeSim(t)
	s := spinDevice{Device: dev, slice: 20 * time.Microsecond}
	start := dev.Now()
	if err := s.Wait(context.Background(), start+10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := dev.Now() - start; got != 20*time.Microsecond {
		t.Errorf("a capped wait advanced the (idle, simulated) clock by %v, want the 20µs slice", got)
	}
	start = dev.Now()
	if err := s.Wait(context.Background(), start+5*time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if got := dev.Now() - start; got != 5*time.Microsecond {
		t.Errorf("a wait shorter than the slice took %v, want 5µs", got)
	}
}

func TestProbeBinderResetRelay(t *testing.T) {
	dev := newProbeSim(t)
	b, _, _ := probeBinder(t, dev, tileGEMM(132, 1024), tileGEMM(528, 2048))
	words, err := dev.NewHostWords(1)
	if err != nil {
		t.Fatal(err)
	}
	req := sched.BindRequest{Client: sched.BEClientID(0), Kernel: 0, Form: gpu.Reset, Ctl: sched.Control{Flag: words[0]}}
	l, err := b.Bind(req)
	if err != nil {
		t.Fatal(err)
	}
	if l.Counter != 0 || binary.LittleEndian.Uint64(l.Args.Bytes()[8:]) != 0 {
		t.Errorf("without the relay a reset launch has counter %#x", l.Counter)
	}
	b.ResetRelay = true
	var ctrs []gpu.Ptr
	for range 3 {
		l, err := b.Bind(req)
		if err != nil {
			t.Fatal(err)
		}
		p := gpu.Ptr(binary.LittleEndian.Uint64(l.Args.Bytes()[8:]))
		if p == 0 || p != l.Counter {
			t.Fatalf("relay launch: Ctl.counter %#x, launch Counter %#x", p, l.Counter)
		}
		ctrs = append(ctrs, p)
	}
	if ctrs[0] != ctrs[1] || ctrs[1] != ctrs[2] {
		t.Errorf("one client's relay block moved: %v", ctrs)
	}
	raw := make([]byte, kernels.CounterBytes)
	if err := dev.CopyFromDevice(raw, ctrs[0]); err != nil || !bytes.Equal(raw, make([]byte, kernels.CounterBytes)) {
		t.Errorf("relay block not zeroed: %x (%v)", raw, err)
	}
}
