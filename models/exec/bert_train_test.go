package exec_test

import (
	"testing"

	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
)

// tinyBERTTrain is a reduced BERT fine-tuning step (two layers, hidden 32,
// four heads, sequence 8, three labels) that the CPU reference runs in
// milliseconds.
func tinyBERTTrain(t *testing.T) models.Model {
	t.Helper()
	cfg := tinyBERT
	cfg.Labels = 3
	m, err := models.NewBERT("tiny-bert-train", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A BERT fine-tuning step binds every layer to a library kernel (the
// forward attention and pooler through the strided-GEMM glue, everything
// else as described: no substitution), and its device buffers, as bound,
// compute the step the CPU reference computes — the loss and every updated
// weight and optimizer state — after one step and after a second one on
// other inputs.
func TestEmulatedBERTTrainingStep(t *testing.T) {
	dev := newSim(t)
	m := tinyBERTTrain(t)
	in := instance(t, dev, kernels.New(dev), m, nil, 2)
	g := in.Graph()
	if in.Runnable() != len(g.Layers) {
		t.Fatalf("runnable %d of %d layers: %v", in.Runnable(), len(g.Layers), in.Err(in.Runnable()))
	}
	if s := in.Substitutions(); len(s) != 0 {
		t.Errorf("substitutions %v, want none", s)
	}
	kinds := map[string]bool{}
	for i := range g.Layers {
		kinds[in.Op(i).Kernel()] = true
	}
	for _, want := range []string{"embed_add_bf16", "gelu_bwd_bf16", "tanh_bwd_bf16", "softmax_bwd_bf16", "layernorm_bwd_bf16", "ln_grad_partial_bf16",
		"bn_finalize_grad", "embed_bwd_bf16", "transpose_bf16", "concat3_bf16", "adam_bf16", "adam_f32", "sgemm_bf16_nt", "sgemm_bf16_nn",
		"xent_bf16", "xent_bwd_bf16", "col_partial_bf16", "splitsum_bf16", "splitsum_f32"} {
		if !kinds[want] {
			t.Errorf("no %s layer in the step", want)
		}
	}
	w, _, ref := emulatedStep(t, dev, in)
	compare := func(step string, ref models.Activations) {
		t.Helper()
		if n := checkEmulatedStep(t, in, step, ref); n < 3*len(w.Tensors()) {
			t.Errorf("%s: compared %d tensors, want the weights, their states and the loss", step, n)
		}
	}
	compare("step 1", ref)

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

// The zoo's bert-base-train binds every layer at batch 8 without
// substitutions (addresses only: no activations are stored).
func TestBERTTrainZooRunnable(t *testing.T) {
	if testing.Short() {
		t.Skip("full-size weights")
	}
	m, err := models.Get("bert-base-train")
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Graph(8)
	if err != nil {
		t.Fatal(err)
	}
	dev := addressOnly{newSim(t)}
	in, err := exec.New(dev, kernels.New(dev), g, models.InitWeights(g, 1), models.InitInputs(g, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if in.Runnable() != len(g.Layers) {
		t.Errorf("runnable %d of %d: %v", in.Runnable(), len(g.Layers), in.Err(in.Runnable()))
	}
	if s := in.Substitutions(); len(s) != 0 {
		t.Errorf("substitutions %v, want none", s)
	}
}
