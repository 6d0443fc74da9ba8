package exec_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
	"atoll/policies"
	"atoll/profiler"
	"atoll/profiles"
	"atoll/sched"
)

var (
	tinyResNet = models.ResNetConfig{Blocks: [4]int{2, 1, 1, 1}, Image: 32, Width: 8, Classes: 10}
	tinyVGG    = models.VGGConfig{Image: 32, WidthDiv: 16, Hidden: 64, Classes: 10}
	tinyBERT   = models.BERTConfig{Layers: 1, Hidden: 32, Heads: 4, FFN: 64, Vocab: 50, Positions: 16, Types: 2, Seq: 8, Pooler: true}
)

func newSim(t *testing.T) gpu.Device {
	t.Helper()
	dev, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

func instance(t *testing.T, dev gpu.Device, lib *kernels.Library, m models.Model, err error, batch int) *exec.Instance {
	t.Helper()
	return instanceWith(t, dev, lib, m, err, batch, exec.Options{})
}

func instanceWith(t *testing.T, dev gpu.Device, lib *kernels.Library, m models.Model, err error, batch int, opt exec.Options) *exec.Instance {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Graph(batch)
	if err != nil {
		t.Fatal(err)
	}
	in, err := exec.NewWith(dev, lib, g, models.InitWeights(g, 1), models.InitInputs(g, 2), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := in.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return in
}

// hasPtr reports whether p is packed in the launch's arguments after the
// control block (each operand pointer appears as an aligned 8-byte value).
func hasPtr(l *gpu.Launch, p gpu.Ptr) bool {
	b := l.Args.Bytes()
	for off := kernels.CtlBytes; off+8 <= len(b); off += 8 {
		if binary.LittleEndian.Uint64(b[off:]) == uint64(p) {
			return true
		}
	}
	return false
}

// Each runnable layer's operands are the buffers of the tensors its
// dataflow names, packed into its launch; residual and downsample
// branches meet where the architecture says; the layers the kernel library
// cannot run are named with the missing piece.
func TestInstanceWiring(t *testing.T) {
	dev := newSim(t)
	lib := kernels.New(dev)
	m, err := models.NewResNet("tiny-resnet", tinyResNet)
	in := instance(t, dev, lib, m, err, 2)
	g := in.Graph()
	avg := slices.IndexFunc(g.Layers, func(l models.Layer) bool { return l.Name == "avgpool" })
	if in.Runnable() != avg {
		t.Fatalf("Runnable() = %d, want %d (the average pool needs glue)", in.Runnable(), avg)
	}
	if err := in.Err(avg); !errors.Is(err, exec.ErrNotRunnable) || !strings.Contains(err.Error(), "nhwc_mean") {
		t.Errorf("Err(avgpool) = %v", err)
	}
	if err := in.Err(avg + 1); err != nil {
		t.Errorf("fc should be runnable: %v", err)
	}
	for i, l := range g.Layers {
		if in.Err(i) != nil {
			continue
		}
		bufs, err := in.Buffers(i)
		if err != nil {
			t.Fatal(err)
		}
		names, _, err := models.Operands(g, l)
		if err != nil {
			t.Fatal(err)
		}
		launch, err := in.Launch(i, gpu.Plain, kernels.Control{})
		if err != nil {
			t.Fatalf("layer %d (%s): %v", i, l.Name, err)
		}
		geo := l.Op.Geometry()
		if launch.Grid != geo.Grid || launch.Block != geo.Block || launch.SharedMem != geo.SharedMem {
			t.Errorf("layer %s: launch %v x %v smem %d, op says %v x %v smem %d", l.Name, launch.Grid, launch.Block, launch.SharedMem, geo.Grid, geo.Block, geo.SharedMem)
		}
		for j, tb := range bufs.T {
			if tb.Role == kernels.Scratch {
				// the layer's own memory: allocated, zeroed, in the launch
				if tb.Ptr == 0 || !hasPtr(launch, tb.Ptr) {
					t.Errorf("layer %s: scratch %s at %#x, not in the launch", l.Name, tb.Name, tb.Ptr)
				}
				continue
			}
			p, _ := in.Ptr(names[j])
			if tb.Ptr != p || p == 0 {
				t.Errorf("layer %s operand %s: %#x, tensor %s is at %#x", l.Name, tb.Name, tb.Ptr, names[j], p)
			}
			if !hasPtr(launch, p) {
				t.Errorf("layer %s: operand %s (%s at %#x) not in the launch arguments", l.Name, tb.Name, names[j], p)
			}
		}
	}
	operand := func(layer, operand string) gpu.Ptr {
		i := slices.IndexFunc(g.Layers, func(l models.Layer) bool { return l.Name == layer })
		b, err := in.Buffers(i)
		if err != nil {
			t.Fatal(err)
		}
		tt, ok := b.Get(operand)
		if !ok {
			t.Fatalf("%s has no operand %s", layer, operand)
		}
		return tt.Ptr
	}
	ptr := func(name string) gpu.Ptr { p, _ := in.Ptr(name); return p }
	for _, c := range []struct{ layer, operand, tensor string }{
		{"layer1.0.conv1", "X", "maxpool"},
		{"layer1.0.conv3", "resid", "layer1.0.downsample"}, // first block: projection shortcut
		{"layer1.1.conv3", "resid", "layer1.0.conv3"},      // identity shortcut
		{"layer1.1.conv1", "X", "layer1.0.conv3"},
		{"layer2.0.downsample", "X", "layer1.1.conv3"},
		{"fc", "A", "avgpool"},
		{"fc", "B", "fc.weight"},
		{"fc", "bias", "fc.bias"},
	} {
		if got, want := operand(c.layer, c.operand), ptr(c.tensor); got != want {
			t.Errorf("%s.%s at %#x, want %s at %#x", c.layer, c.operand, got, c.tensor, want)
		}
	}
	// A whole pass is refused up front; the runnable prefix runs.
	ctx := context.Background()
	if err := in.Run(ctx); !errors.Is(err, exec.ErrNotRunnable) {
		t.Errorf("Run = %v, want ErrNotRunnable", err)
	}
	if err := in.RunLayers(ctx, 0, in.Runnable()); err != nil {
		t.Fatal(err)
	}
	if in.LastRun() <= 0 {
		t.Errorf("LastRun = %v after running %d layers", in.LastRun(), in.Runnable())
	}
	// Weights and inputs are on the device as uploaded; the simulator
	// computes nothing, so activations keep their NaN poison.
	w, _ := in.Read("fc.weight")
	want := models.InitWeights(g, 1)
	d, _ := want.Get("fc.weight")
	if !slices.Equal(w, d.Values()) {
		t.Errorf("fc.weight on the device differs from the weights uploaded")
	}
	if out, err := in.Output(); err != nil || !math.IsNaN(out[0]) {
		t.Errorf("Output on the simulator = %v, %v; want NaN (never computed)", out[:1], err)
	}
	if _, err := in.Read("nope"); !errors.Is(err, exec.ErrInstance) {
		t.Errorf("Read(nope) = %v", err)
	}
}

// A fully runnable model runs end to end; the model output is where the
// graph says; BERT's layers name what the library lacks: only the embedding
// add (bound with Options.Substitute); its attention, pooler and tanh
// layers launch library kernels.
func TestInstanceRunAndGaps(t *testing.T) {
	dev := newSim(t)
	lib := kernels.New(dev)
	m, err := models.NewVGG("tiny-vgg", tinyVGG)
	vgg := instance(t, dev, lib, m, err, 2)
	if vgg.Runnable() != len(vgg.Graph().Layers) {
		t.Fatalf("tiny VGG: runnable %d of %d: %v", vgg.Runnable(), len(vgg.Graph().Layers), vgg.Err(vgg.Runnable()))
	}
	if err := vgg.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	mb, err := models.NewBERT("tiny-bert", tinyBERT)
	bert := instance(t, dev, lib, mb, err, 2)
	missing := map[string]bool{}
	for i, l := range bert.Graph().Layers {
		if e := bert.Err(i); e != nil {
			if !errors.Is(e, exec.ErrNotRunnable) {
				t.Errorf("%s: %v does not wrap ErrNotRunnable", l.Name, e)
			}
			missing[l.Name[strings.LastIndexByte(l.Name, '.')+1:]] = true
		}
	}
	if !missing["add"] || len(missing) != 1 {
		t.Errorf("BERT layers reported unrunnable: %v, want only the embedding add", missing)
	}
	for i, l := range bert.Graph().Layers {
		want := ""
		switch {
		case l.Glue != "":
			want = "sgemm_"
		case strings.HasSuffix(l.Name, ".tanh"):
			want = "ew_tanh_"
		}
		if want != "" && (bert.Err(i) != nil || !strings.HasPrefix(bert.Op(i).Kernel(), want)) {
			t.Errorf("%s (glue %q) launches %s (err %v), want %s*", l.Name, l.Glue, bert.Op(i).Kernel(), bert.Err(i), want)
		}
	}
}

// Depthwise convolutions drop their folded bias only when it is zero.
func TestDepthwiseBias(t *testing.T) {
	m, _ := models.Get("mobilenetv2")
	g, err := m.Graph(1)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := sim.New(sim.Config{Memory: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	w := models.InitWeights(g, 1)
	d, _ := w.Get("features.2.depthwise.bias")
	v := d.Values()
	v[3] = 0.5
	w.Add(models.NewData(d.Name, d.DType, d.Shape, v))
	in, err := exec.New(dev, kernels.New(dev), g, w, models.InitInputs(g, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for i, l := range g.Layers {
		e := in.Err(i)
		switch {
		case l.Name == "features.2.depthwise":
			if !errors.Is(e, exec.ErrNotRunnable) || !strings.Contains(e.Error(), "features.2.depthwise.bias") {
				t.Errorf("nonzero depthwise bias: %v", e)
			}
		case strings.HasSuffix(l.Name, ".depthwise") && e != nil:
			t.Errorf("%s (zero bias): %v", l.Name, e)
		}
	}
}

// The InstanceBinder serves every form with the request's preemption state in the
// arguments, pairs HP and BE layers for padding, and refuses what it
// cannot bind.
func TestBinderForms(t *testing.T) {
	dev := newSim(t)
	lib := kernels.New(dev)
	m, err := models.NewVGG("tiny-vgg", tinyVGG)
	hp := instance(t, dev, lib, m, err, 1)
	mr, err := models.NewResNet("tiny-resnet", tinyResNet)
	be := instance(t, dev, lib, mr, err, 4)
	b, err := exec.NewInstanceBinder(lib, []*exec.Instance{hp}, []*exec.Instance{be})
	if err != nil {
		t.Fatal(err)
	}
	if b.ProgressBytes() != kernels.CounterBytes {
		t.Errorf("ProgressBytes = %d", b.ProgressBytes())
	}
	words, err := dev.NewHostWords(2)
	if err != nil {
		t.Fatal(err)
	}
	counter, err := dev.Alloc(kernels.CounterBytes)
	if err != nil {
		t.Fatal(err)
	}
	ctl := sched.Control{Flag: words[0], Counter: counter, Done: words[1]}
	hp0 := sched.ClientID{Class: sched.HP, Index: 0}
	be0 := sched.ClientID{Class: sched.BE, Index: 0}
	beOp := be.Graph().Layers[2].Op // layer1.0.conv1

	l, err := b.Bind(sched.BindRequest{Client: be0, Kernel: 2, Form: gpu.Reset, Ctl: ctl})
	if err != nil {
		t.Fatal(err)
	}
	if l.Form != gpu.Reset || l.Flag != words[0] || !bytes.Contains(l.Args.Bytes()[:kernels.CtlBytes], binary.LittleEndian.AppendUint64(nil, uint64(words[0].Dev))) {
		t.Errorf("reset launch: form %s flag %v; the flag's address must lead the arguments", l.Form, l.Flag)
	}
	l, err = b.Bind(sched.BindRequest{Client: be0, Kernel: 2, Form: gpu.Resumable, Ctl: ctl})
	if err != nil {
		t.Fatal(err)
	}
	if l.Form != gpu.Resumable || l.Logical != beOp.Geometry().Grid.Count() || l.Grid.Count() > l.Logical || l.Counter != counter || l.Done != words[1] {
		t.Errorf("resumable launch: form %s grid %v logical %d counter %#x", l.Form, l.Grid, l.Logical, l.Counter)
	}
	l, err = b.Bind(sched.BindRequest{Client: hp0, Kernel: 0, Form: gpu.Padded,
		Pad: &sched.PadRequest{Client: be0, Kernel: 2, Blocks: 8, Ctl: ctl}})
	if err != nil {
		t.Fatal(err)
	}
	if l.Form != gpu.Padded || l.Pad == nil || l.Pad.Logical != beOp.Geometry().Grid.Count() || l.Grid.Count() != hp.Graph().Layers[0].Op.Geometry().Grid.Count() {
		t.Errorf("padded launch: form %s grid %v pad %+v", l.Form, l.Grid, l.Pad)
	}
	for name, r := range map[string]sched.BindRequest{
		"no client":    {Client: sched.ClientID{Class: sched.HP, Index: 3}},
		"no kernel":    {Client: hp0, Kernel: 999},
		"pad missing":  {Client: hp0, Form: gpu.Padded},
		"glue layer":   {Client: be0, Kernel: slices.IndexFunc(be.Graph().Layers, func(l models.Layer) bool { return l.Name == "avgpool" })},
		"pad its glue": {Client: hp0, Form: gpu.Padded, Pad: &sched.PadRequest{Client: be0, Kernel: be.Runnable(), Blocks: 4, Ctl: ctl}},
	} {
		if _, err := b.Bind(r); err == nil {
			t.Errorf("%s: Bind succeeded", name)
		}
	}
	if _, err := hp.Launch(0, gpu.Padded, kernels.Control{}); !errors.Is(err, exec.ErrInstance) {
		t.Errorf("Instance.Launch(Padded) = %v, want a pointer to the InstanceBinder", err)
	}

	// With substitution the average pool binds, in every form, as a pool.
	sub := instanceWith(t, dev, lib, mr, nil, 4, exec.Options{Substitute: true})
	sb, err := exec.NewInstanceBinder(lib, []*exec.Instance{hp}, []*exec.Instance{sub})
	if err != nil {
		t.Fatal(err)
	}
	avg := slices.IndexFunc(sub.Graph().Layers, func(l models.Layer) bool { return l.Name == "avgpool" })
	for _, f := range []gpu.Form{gpu.Plain, gpu.Reset, gpu.Resumable} {
		l, err := sb.Bind(sched.BindRequest{Client: be0, Kernel: avg, Form: f, Ctl: ctl})
		if err != nil || !strings.HasPrefix(l.Name, "avgpool_bf16/") {
			t.Errorf("substituted avgpool, %s: %v %v", f, l, err)
		}
	}
	if l, err := sb.Bind(sched.BindRequest{Client: hp0, Kernel: 1, Form: gpu.Padded, Pad: &sched.PadRequest{Client: be0, Kernel: avg, Blocks: 2, Ctl: ctl}}); err != nil || l.Pad == nil {
		t.Errorf("padding with the substituted avgpool: %v", err)
	}
}

// The scheduler runs two model instances end to end on the simulator
// through the InstanceBinder (the atoll policy uses resumable and padded forms),
// with profile costs checked against the instances.
func TestBinderUnderScheduler(t *testing.T) {
	dev := newSim(t)
	lib := kernels.New(dev)
	spec := dev.Info().Spec
	m, err := models.NewVGG("tiny-vgg", tinyVGG)
	hp := instance(t, dev, lib, m, err, 1)
	be := instance(t, dev, lib, m, err, 8)
	prof := func(in *exec.Instance) *profiles.Profile {
		p, err := profiler.Estimate(spec, in.Graph().Model, in.Graph().Batch, in.Graph().Layers)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	hpP, beP := prof(hp), prof(be)
	if err := hp.UseProfile(beP); !errors.Is(err, profiles.ErrMismatch) {
		t.Errorf("UseProfile of the batch-8 profile on the batch-1 instance = %v, want ErrMismatch", err)
	}
	if err := hp.UseProfile(hpP); err != nil {
		t.Fatal(err)
	}
	if err := be.UseProfile(beP); err != nil {
		t.Fatal(err)
	}
	b, err := exec.NewInstanceBinder(lib, []*exec.Instance{hp}, []*exec.Instance{be})
	if err != nil {
		t.Fatal(err)
	}
	var arrivals []time.Duration
	for a := time.Millisecond; a < 20*time.Millisecond; a += 2 * time.Millisecond {
		arrivals = append(arrivals, a)
	}
	w := sched.Workload{
		HP: []sched.HPWorkload{{Name: "hp", Profile: hpP, Arrivals: arrivals}},
		BE: []sched.BEWorkload{{Name: "be", Profile: beP}},
	}
	pol, err := policies.ByName("atoll")
	if err != nil {
		t.Fatal(err)
	}
	forms := map[gpu.Form]int{}
	tr, err := sched.Run(context.Background(), dev, w, sched.Options{Policy: pol, Duration: 20 * time.Millisecond, Binder: countingBinder{b, forms}})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Requests) == 0 {
		t.Fatal("no HP request completed")
	}
	if forms[gpu.Plain]+forms[gpu.Resumable]+forms[gpu.Padded] == 0 {
		t.Errorf("no launches bound: %v", forms)
	}
	t.Logf("%d HP requests, launches by form %v", len(tr.Requests), forms)
}

type countingBinder struct {
	*exec.InstanceBinder
	forms map[gpu.Form]int
}

func (c countingBinder) Bind(r sched.BindRequest) (*gpu.Launch, error) {
	c.forms[r.Form]++
	return c.InstanceBinder.Bind(r)
}

// A measured profile whose kernels ran on the device's BLAS is refused for
// an instance that runs them on the library's own kernels, saying what to
// do; the same profile is taken where the device has the BLAS, and an
// estimated profile is taken either way.
func TestUseProfileRefusesABLASProfileWithoutTheBLAS(t *testing.T) {
	m, err := models.NewVGG("tiny-vgg", tinyVGG)
	if err != nil {
		t.Fatal(err)
	}
	profileFor := func(in *exec.Instance, spec gpu.Spec) *profiles.Profile {
		p, err := profiler.Estimate(spec, in.Graph().Model, in.Graph().Batch, in.Graph().Layers)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tag := func(p *profiles.Profile) *profiles.Profile {
		q := *p
		q.Source = profiles.SourceMeasured
		q.Kernels = slices.Clone(p.Kernels)
		for i := range q.Kernels {
			if strings.HasPrefix(q.Kernels[i].Kernel, "gemm_") {
				q.Kernels[i].Tags = append(slices.Clone(q.Kernels[i].Tags), profiles.TagBLAS)
			}
		}
		return &q
	}
	plain := newSim(t)
	in := instance(t, plain, kernels.New(plain), m, nil, 1)
	est := profileFor(in, plain.Info().Spec)
	err = in.UseProfile(tag(est))
	if !errors.Is(err, profiles.ErrMismatch) || !strings.Contains(err.Error(), "atoll profile --model tiny-vgg --batch 1") || !strings.Contains(err.Error(), "ATOLL_CUBLASLT") {
		t.Errorf("a cuBLASLt profile without a BLAS: %v", err)
	}
	t.Log(err)
	if err := in.UseProfile(est); err != nil {
		t.Errorf("an estimated profile: %v", err)
	}
	withBLAS, err := sim.New(sim.Config{BLAS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { withBLAS.Close() })
	in2 := instance(t, withBLAS, kernels.New(withBLAS), m, nil, 1)
	if err := in2.UseProfile(tag(est)); err != nil {
		t.Errorf("a cuBLASLt profile on a device with the BLAS: %v", err)
	}
}

// TestBindingMakesTheBLASPlans: binding instances settles, for every layer
// a whole Plain launch may run on the device's BLAS, the product's plan
// (on a GPU: cuBLASLt's descriptors and algorithm), so that a BE job's
// first iteration does not make them on the launch path while HP requests
// wait behind it (docs/daemon.md: 36–61 ms of HP latency on an H100).
func TestBindingMakesTheBLASPlans(t *testing.T) {
	dev, err := sim.New(sim.Config{BLAS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	lib := kernels.New(dev)
	m, err := models.NewVGG("tiny-vgg", tinyVGG)
	hp := instance(t, dev, lib, m, err, 1)
	mr, err := models.NewResNet("tiny-resnet", tinyResNet)
	be := instance(t, dev, lib, mr, err, 4)
	if n, _ := lib.BLASOps(); n != 0 {
		t.Fatalf("%d products planned before binding", n)
	}
	b, err := exec.NewInstanceBinder(lib, []*exec.Instance{hp}, []*exec.Instance{be})
	if err != nil {
		t.Fatal(err)
	}
	n, refused := lib.BLASOps()
	if n == 0 {
		t.Fatalf("no product planned at binding (refusal: %v)", refused)
	}
	bound := 0
	for _, c := range []sched.ClientID{{Class: sched.HP}, {Class: sched.BE}} {
		in := hp
		if c.Class == sched.BE {
			in = be
		}
		for k := range in.Graph().Layers {
			if _, err := b.Bind(sched.BindRequest{Client: c, Kernel: k, Form: gpu.Plain}); err == nil {
				bound++
			}
		}
	}
	if after, _ := lib.BLASOps(); bound == 0 || after != n {
		t.Errorf("%d products planned at binding, %d after %d Plain launches bound: the launch path planned some", n, after, bound)
	}
}

// A pass of several requests: one request's inputs land in its slot of
// the batched instance's inputs and nowhere else, and ReadAt reads that
// slot back; a bundle of the wrong size, or a slot out of range, is
// refused.
func TestInstanceSlots(t *testing.T) {
	dev, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m, err := models.NewVGG("tiny-vgg", models.VGGConfig{Image: 32, WidthDiv: 16, Hidden: 64, Classes: 10})
	if err != nil {
		t.Fatal(err)
	}
	g1, err := m.Graph(1)
	if err != nil {
		t.Fatal(err)
	}
	g4, err := m.Graph(4)
	if err != nil {
		t.Fatal(err)
	}
	in, err := exec.New(dev, kernels.New(dev), g4, models.InitWeights(g4, 1), models.InitInputs(g4, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	name := g4.Inputs[0]
	before, err := in.Read(name)
	if err != nil {
		t.Fatal(err)
	}
	req := models.InitInputs(g1, 7)
	if err := in.SetInputsAt(2, 4, req); err != nil {
		t.Fatal(err)
	}
	d, _ := req.Get(name)
	t1, _ := g1.Tensor(name)
	want := kernels.Decode(t1.DType, d.Raw)
	n := len(want)
	for slot := range 4 {
		got, err := in.ReadAt(name, slot, 4)
		if err != nil {
			t.Fatal(err)
		}
		exp := before[slot*n : (slot+1)*n]
		if slot == 2 {
			exp = want
		}
		if !slices.Equal(got, exp) {
			t.Errorf("slot %d: not what was uploaded there", slot)
		}
	}
	if err := in.SetInputsAt(1, 2, req); !errors.Is(err, exec.ErrInstance) {
		t.Errorf("one request's inputs as a slice of 2: %v, want ErrInstance", err)
	}
	if _, err := in.ReadAt(name, 4, 4); !errors.Is(err, exec.ErrInstance) {
		t.Errorf("slot 4 of 4: %v, want ErrInstance", err)
	}
}

// NewForProfile builds the profiled model with the profile's costs; a
// profile that does not match is refused naming the mismatch, and leaves
// nothing allocated: a device with room for one instance still fits the
// model after the refusal.
func TestNewForProfile(t *testing.T) {
	p, err := profiles.Lookup(gpu.H100SXM.Name, "mobilenetv2", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	build := func(dev gpu.Device, p *profiles.Profile) (*exec.Instance, error) {
		return exec.NewForProfile(dev, kernels.New(dev), p, 1)
	}
	dev, err := sim.New(sim.Config{BLAS: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := build(dev, p)
	if err != nil {
		t.Fatal(err)
	}
	size := in.Bytes()
	l, err := in.Launch(0, gpu.Plain, kernels.Control{})
	if err != nil || l.Cost.Duration != p.Kernels[0].Duration() {
		t.Errorf("launch 0: %v, cost %v; want the profile's %v", err, l.Cost.Duration, p.Kernels[0].Duration())
	}
	in.Close()
	dev.Close()

	short := *p
	short.Kernels = p.Kernels[:3]
	dev, err = sim.New(sim.Config{BLAS: true, Memory: size + size/2})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, err := build(dev, &short); !errors.Is(err, profiles.ErrMismatch) || !strings.Contains(err.Error(), "kernels") {
		t.Fatalf("a 3-kernel profile of mobilenetv2: %v, want profiles.ErrMismatch naming the kernels", err)
	}
	in, err = build(dev, p)
	if err != nil {
		t.Fatalf("after the refusal the model no longer fits: %v", err)
	}
	in.Close()
	unknown := *p
	unknown.Model = "nope"
	if _, err := build(dev, &unknown); err == nil || !strings.Contains(err.Error(), `unknown model "nope"`) {
		t.Errorf("an unknown model: %v", err)
	}
}
