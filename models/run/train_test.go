package run_test

import (
	"context"
	"errors"
	"testing"

	"atoll/kernels"
	"atoll/models"
	"atoll/models/run"
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
	w := models.InitWeights(g, 1)
	inputs := models.InitInputs(g, 2)
	emulate(t, dev, in)
	ref, err := models.Reference(g, w, inputs)
	if err != nil {
		t.Fatal(err)
	}
	compare := func(step string, ref models.Activations) {
		t.Helper()
		for _, tt := range g.Tensors {
			if tt.Kind != models.KindWeight && tt.Kind != models.KindState && tt.Name != g.Output {
				continue
			}
			got, err := in.Read(tt.Name)
			if err != nil {
				t.Fatal(err)
			}
			if e := models.RelErr(got, ref[tt.Name]); e > 1e-6 {
				t.Errorf("%s: %s: relative error %.3g between the emulated device and the CPU reference", step, tt.Name, e)
			}
		}
	}
	compare("step 1", ref)

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
	compare("step 2", ref2)
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
		if _, err := run.New(dev, kernels.New(dev), g, models.InitWeights(g, 1), bad); !errors.Is(err, models.ErrLabels) {
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
