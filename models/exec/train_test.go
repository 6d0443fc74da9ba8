package exec_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
)

// tinyTrain is a reduced ResNet training step (a stage of two blocks, a
// downsample in every stage, a 32x32 image) that the CPU reference runs
// in well under a second.
func tinyTrain(t *testing.T) models.Model {
	t.Helper()
	cfg := tinyResNet
	cfg.Train = true
	m, err := models.NewResNet("tiny-resnet-train", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A ResNet training step binds every layer to a library kernel (no glue,
// no substitution), and its device buffers, as bound, compute the step
// the CPU reference computes: the loss and every updated weight and
// momentum, after one step and after a second one on other inputs.
func TestEmulatedTrainingStep(t *testing.T) {
	dev := newSim(t)
	m := tinyTrain(t)
	in := instance(t, dev, kernels.New(dev), m, nil, 4)
	g := in.Graph()
	if in.Runnable() != len(g.Layers) {
		t.Fatalf("runnable %d of %d layers: %v", in.Runnable(), len(g.Layers), in.Err(in.Runnable()))
	}
	if s := in.Substitutions(); len(s) != 0 {
		t.Errorf("substitutions %v, want none", s)
	}
	// Every op kind of the step is a kernel of the library.
	kinds := map[string]bool{}
	split := 0
	for i := range g.Layers {
		kinds[in.Op(i).Kernel()] = true
		if c, ok := in.Op(i).(kernels.Conv2D); ok && c.Split > 1 {
			split++
		}
	}
	if split == 0 {
		t.Errorf("no wgrad split over the images at batch 4")
	}
	for _, want := range []string{"bn_stats_bf16", "bn_finalize", "bn_apply_bf16", "bn_bwd_stats_bf16", "bn_finalize_grad", "bn_bwd_bf16",
		"xent_bf16", "xent_bwd_bf16", "colsum_bf16", "maxpool_bwd_bf16", "avgpool_bwd_bf16", "sgd_bf16", "sgd_f32",
		"conv2d_wgrad_split_bf16_64x64", "splitsum_bf16"} {
		if !kinds[want] {
			t.Errorf("no %s layer in the step", want)
		}
	}
	w, _, ref := emulatedStep(t, dev, in)
	checkEmulatedStep(t, in, "step 1", ref)

	// A second step on other inputs continues from the updated weights and
	// momentum on both sides.
	w2 := &models.Bundle{Metadata: w.Metadata}
	for _, d := range w.Tensors() {
		w2.Add(models.NewData(d.Name, d.DType, d.Shape, ref[d.Name]))
	}
	inputs2 := models.InitInputs(g, 9)
	if err := in.SetInputs(inputs2); err != nil {
		t.Fatal(err)
	}
	emulate(t, dev, in)
	ref2, err := trainStepFrom(g, w2, inputs2, ref)
	if err != nil {
		t.Fatal(err)
	}
	checkEmulatedStep(t, in, "step 2", ref2)
}

// A training step whose convolutions are cut into launches over slices of
// the images (Layer.Part: forward, data and filter gradients) binds each
// part to its slices: the emulated device computes what the CPU reference
// computes for the cut graph, and that is the uncut step's result (the
// filter gradients' partial sums only grouped differently).
func TestEmulatedTrainingStepInParts(t *testing.T) {
	dev := newSim(t)
	cfg := tinyResNet
	cfg.Train, cfg.MaxPatchBytes = true, 16<<10
	m, err := models.NewResNet("tiny-resnet-train-parts", cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := instance(t, dev, kernels.New(dev), m, nil, 4)
	g := in.Graph()
	if in.Runnable() != len(g.Layers) {
		t.Fatalf("runnable %d of %d layers: %v", in.Runnable(), len(g.Layers), in.Err(in.Runnable()))
	}
	parts := map[string]int{}
	for _, l := range g.Layers {
		if l.Part.Of <= 1 {
			continue
		}
		switch c := l.Op.(kernels.Conv2D); {
		case c.BackwardData:
			parts["dgrad"]++
		case c.BackwardFilter:
			parts["wgrad"]++
		default:
			parts["forward"]++
		}
	}
	if parts["forward"] == 0 || parts["dgrad"] == 0 || parts["wgrad"] == 0 {
		t.Fatalf("parts %v: want forward, dgrad and wgrad passes cut", parts)
	}
	w, inputs, ref := emulatedStep(t, dev, in)
	wg, err := tinyTrain(t).Graph(4)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := models.Reference(wg, w, inputs)
	if err != nil {
		t.Fatal(err)
	}
	checkEmulatedStep(t, in, "in parts", ref)
	for _, tt := range stepTensors(g) {
		if e := models.RelErr(ref[tt], whole[tt]); e > 1e-3 || math.IsNaN(e) {
			t.Errorf("%s: relative error %.3g between the step in parts and whole", tt, e)
		}
	}
}

// emulatedStep runs in's step on the emulated device (emulate) from the
// seeded weights and inputs Instance made it with, and returns those and
// the CPU reference's values of the step.
func emulatedStep(t *testing.T, dev gpu.Device, in *exec.Instance) (w, inputs *models.Bundle, ref models.Activations) {
	t.Helper()
	g := in.Graph()
	w, inputs = models.InitWeights(g, 1), models.InitInputs(g, 2)
	emulate(t, dev, in)
	ref, err := models.Reference(g, w, inputs)
	if err != nil {
		t.Fatal(err)
	}
	return w, inputs, ref
}

// stepTensors are what a training step of g updates: its weights, the
// optimizer state and the loss (the output).
func stepTensors(g *models.Graph) []string {
	var names []string
	for _, tt := range g.Tensors {
		if tt.Kind == models.KindWeight || tt.Kind == models.KindState || tt.Name == g.Output {
			names = append(names, tt.Name)
		}
	}
	return names
}

// checkEmulatedStep checks every tensor a step updates (stepTensors) on the
// emulated device against the CPU reference's values, and returns how many
// it compared.
func checkEmulatedStep(t *testing.T, in *exec.Instance, step string, ref models.Activations) int {
	t.Helper()
	names := stepTensors(in.Graph())
	for _, n := range names {
		got, err := in.Read(n)
		if err != nil {
			t.Fatal(err)
		}
		if e := models.RelErr(got, ref[n]); e > 1e-6 {
			t.Errorf("%s: %s: relative error %.3g between the emulated device and the CPU reference", step, n, e)
		}
	}
	return len(names)
}

// trainStepFrom runs the reference step from weights w and the optimizer
// state of a previous step's values.
func trainStepFrom(g *models.Graph, w, inputs *models.Bundle, prev models.Activations) (models.Activations, error) {
	vals := models.Activations{}
	for _, d := range w.Tensors() {
		vals[d.Name] = d.Values()
	}
	for _, d := range inputs.Tensors() {
		vals[d.Name] = d.Values()
	}
	for _, tt := range g.Tensors {
		if tt.Kind == models.KindState {
			vals[tt.Name] = prev[tt.Name]
		}
	}
	for _, l := range g.Layers {
		outs, err := models.ReferenceLayer(g, l, vals)
		if err != nil {
			return nil, err
		}
		for j, n := range l.Out {
			vals[n] = outs[j]
		}
	}
	return vals, nil
}

// Labels outside [0, classes) are refused before anything is uploaded
// (the loss kernel would write NaN).
func TestTrainingBadLabels(t *testing.T) {
	dev := newSim(t)
	m := tinyTrain(t)
	g, err := m.Graph(2)
	if err != nil {
		t.Fatal(err)
	}
	good := models.InitInputs(g, 2)
	for _, label := range []float64{-1, 10} {
		bad := &models.Bundle{}
		for _, d := range good.Tensors() {
			if d.Name == "labels" {
				d = models.NewData(d.Name, d.DType, d.Shape, []float64{0, label})
			}
			bad.Add(d)
		}
		if _, err := exec.New(dev, kernels.New(dev), g, models.InitWeights(g, 1), bad); !errors.Is(err, models.ErrLabels) {
			t.Errorf("New with label %v: %v, want models.ErrLabels", label, err)
		}
		in := instance(t, dev, kernels.New(dev), m, nil, 2)
		if err := in.SetInputs(bad); !errors.Is(err, models.ErrLabels) {
			t.Errorf("SetInputs with label %v: %v, want models.ErrLabels", label, err)
		}
	}
}

// The training step runs on the simulator end to end through Run (its
// kernels compute nothing there; this checks the launches are accepted).
func TestTrainingStepRuns(t *testing.T) {
	dev := newSim(t)
	in := instance(t, dev, kernels.New(dev), tinyTrain(t), nil, 2)
	if err := in.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if in.LastRun() <= 0 {
		t.Errorf("LastRun %v", in.LastRun())
	}
}

// The per-layer check of TestGPUTrainStep (checkedStep) finds nothing on a
// step whose layers compute exactly their CPU references (the simulator,
// each layer emulated from its device inputs; the only difference is the
// rounding of bf16 outputs, at most half an ulp, 2⁻⁹ relative) — the
// sampled convolutions included (forward, data and weight gradients), which
// validates their layouts against kernels.Reference — and names exactly the layers whose outputs were
// corrupted: a split weight gradient missing one split's images, an SGD
// update with one wrong element, BN statistics (the first in the second
// half of the step: a backward one) off in one channel.
func TestCheckedTrainingStep(t *testing.T) {
	dev := newSim(t)
	m := tinyTrain(t)
	g, err := m.Graph(4)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := map[string]func(v []float64){}
	for i, l := range g.Layers {
		switch o := l.Op.(type) {
		case kernels.Conv2D:
			if _, ok := corrupt["split"]; !ok && o.Split > 1 {
				per := o.R * o.S * o.C * o.OutC
				corrupt[l.Name] = func(v []float64) { clear(v[per : 2*per]) }
				corrupt["split"] = nil
			}
		case kernels.SGD:
			if _, ok := corrupt["sgd"]; !ok && o.Elems > 100 {
				corrupt[l.Name] = func(v []float64) { v[len(v)/2] += 10 * (math.Abs(v[len(v)/2]) + 1) }
				corrupt["sgd"] = nil
			}
		case kernels.BNStats:
			if _, ok := corrupt["bn"]; !ok && i > len(g.Layers)/2 {
				corrupt[l.Name] = func(v []float64) {
					for j := 0; j < len(v); j += o.C {
						v[j] *= 1.5
					}
				}
				corrupt["bn"] = nil
			}
		}
	}
	if len(corrupt) != 6 {
		t.Fatalf("found %d of the layers to corrupt", len(corrupt)/2)
	}
	pick := func(i int) refFn {
		if _, ok := g.Layers[i].Op.(kernels.Conv2D); ok {
			return sampledConv(64)
		}
		return fullRef
	}
	for _, bad := range []bool{false, true} {
		in := instance(t, dev, kernels.New(dev), m, nil, 4)
		step := func(i int) error {
			emulateLayer(t, dev, in, i)
			f := corrupt[g.Layers[i].Name]
			if !bad || f == nil {
				return nil
			}
			bufs, err := in.Buffers(i)
			if err != nil {
				return err
			}
			o := bufs.Outputs()[0]
			v, _, err := kernels.Read(dev, o)
			if err != nil {
				return err
			}
			f(v)
			return dev.CopyToDevice(o.Ptr, kernels.Encode(o.DType, v))
		}
		errs, err := checkedStep(dev, in, step, pick)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(errs); n < len(g.Layers) {
			t.Errorf("%d outputs checked for %d layers", n, len(g.Layers))
		}
		_, over := worstLayers(errs, 5, 4e-3)
		var names []string
		for _, e := range over {
			names = append(names, e.layer)
		}
		slices.Sort(names)
		var want []string
		if bad {
			for n, f := range corrupt {
				if f != nil {
					want = append(want, n)
				}
			}
			slices.Sort(want)
		}
		if !slices.Equal(names, want) {
			t.Errorf("corrupted %v: layers above 4e-3 %v, want %v", bad, over[:min(len(over), 10)], want)
		}
	}
}

// perturbUlp moves every nonzero bf16 input by exactly one bf16 ulp (and
// leaves zeros and integer inputs alone), and the tiny GPU step's
// reference measurably moves with it (ulpSpread, which TestGPUTrainStep
// bounds the device by); compareStep of the reference with itself is 0.
func TestTrainingULPSpread(t *testing.T) {
	m, err := models.NewResNet("tiny-resnet-train", tinyGPUTrain)
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Graph(8)
	if err != nil {
		t.Fatal(err)
	}
	w, inputs := models.InitWeights(g, 1), models.InitInputs(g, 2)
	p := perturbUlp(inputs, 1)
	for _, d := range inputs.Tensors() {
		e, _ := p.Get(d.Name)
		a, b := d.Values(), e.Values()
		for i := range a {
			if d.DType != kernels.BF16 || a[i] == 0 {
				if a[i] != b[i] {
					t.Fatalf("%s[%d]: %v moved to %v", d.Name, i, a[i], b[i])
				}
				continue
			}
			ba, bb := int(kernels.F32ToBF16(float32(a[i]))), int(kernels.F32ToBF16(float32(b[i])))
			if ba-bb != 1 && bb-ba != 1 {
				t.Fatalf("%s[%d]: %v (%#04x) moved to %v (%#04x), not one ulp", d.Name, i, a[i], ba, b[i], bb)
			}
		}
	}
	ref, err := models.Reference(g, w, inputs)
	if err != nil {
		t.Fatal(err)
	}
	self, err := compareStep(g, ref, func(n string) ([]float64, error) { return ref[n], nil }, "")
	if err != nil {
		t.Fatal(err)
	}
	if self.loss != 0 || self.worst != 0 {
		t.Errorf("reference vs itself: %v", self)
	}
	s, err := ulpSpread(g, ref, spreadRuns, "", inputsMoved(w, inputs))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s batch %d, inputs moved one bf16 ulp: %v", g.Model, g.Batch, s)
	if !(s.loss > 0 && s.median > 0 && s.worst >= s.median) || math.IsInf(s.worst, 0) {
		t.Errorf("spread %v: want finite, nonzero, worst ≥ median", s)
	}
}

// TestGPUTrainStep's check of the reduced step passes on a step computed
// by the kernels' CPU references (the simulator, emulated layer by layer),
// and fails on one whose split weight gradient lost an image.
func TestTinyTrainCheckEmulated(t *testing.T) {
	dev := newSim(t)
	var b strings.Builder
	emu := func(in *exec.Instance) func(int) error {
		return func(i int) error { emulateLayer(t, dev, in, i); return nil }
	}
	if err := tinyTrainCheck(dev, kernels.New(dev), &b, emu); err != nil {
		t.Errorf("emulated: %v", err)
	}
	t.Logf("\n%s", b.String())
	lost := func(in *exec.Instance) func(int) error {
		return func(i int) error {
			emulateLayer(t, dev, in, i)
			c, ok := in.Op(i).(kernels.Conv2D)
			if !ok || c.Split < 2 {
				return nil
			}
			bufs, _ := in.Buffers(i)
			o := bufs.Outputs()[0]
			v, _, err := kernels.Read(dev, o)
			if err != nil {
				return err
			}
			clear(v[len(v)-len(v)/c.N:]) // the last image's share... of the last split
			return dev.CopyToDevice(o.Ptr, kernels.Encode(o.DType, v))
		}
	}
	b.Reset()
	err := tinyTrainCheck(dev, kernels.New(dev), &b, lost)
	if err == nil || !strings.Contains(err.Error(), "wgrad") {
		t.Errorf("split weight gradients without their last split: %v, want the wgrad layers named\n%s", err, b.String())
	}
}
