package exec_test

import (
	"flag"
	"strings"
	"testing"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
)

var (
	bertModel = flag.String("bert.model", "bert-base-train", "TestGPUBERTTrainStep: the zoo BERT training step to run at full size (\"\" for none)")
	bertBatch = flag.Int("bert.batch", 8, "TestGPUBERTTrainStep: its batch")
	bertRuns  = flag.Int("bert.runs", 10, "TestGPUBERTTrainStep: timed steps (median reported)")
)

// tinyGPUBERT is the reduced BERT fine-tuning step TestGPUBERTTrainStep
// checks in full: head size 32 and sequence 64 (several 64-wide tiles of
// the strided GEMM), 300 tokens' worth of word ids over a 96-row table.
var tinyGPUBERT = models.BERTConfig{Layers: 2, Hidden: 128, Heads: 4, FFN: 256, Vocab: 96, Positions: 80, Types: 2, Seq: 64, Pooler: true, Labels: 2}

// TestGPUBERTTrainStep runs BERT fine-tuning steps wholly on GPU 0 through
// the kernel library, as TestGPUTrainStep does for ResNet:
//
//   - a reduced step (tinyGPUBERT, batch 4) run layer by layer, every
//     layer's outputs against its kernel's CPU reference from the layer's
//     device inputs (tolTrainSpot), then the whole step (the loss and the
//     Adam first moments, 0.1 x the gradients) against models.Reference,
//     within tolTrainSpread times what moving every bf16 weight one ulp
//     does to the CPU reference;
//   - the zoo step (-bert.model, -bert.batch): a first step (loss finite),
//     a second one layer by layer with every layer whose CPU reference is
//     affordable at full size checked in full (the new training kernels,
//     attention GEMMs, layernorm, softmax, loss, Adam) and the linear
//     layers' convolution passes on sampled elements, then -bert.runs
//     timed steps.
//
// It prints the worst layers and writes the summary to $OUT/bert_train_gpu.txt.
// Skipped without a GPU.
func TestGPUBERTTrainStep(t *testing.T) {
	gpuStepTest(t, "bert_train_gpu.txt", "tiny BERT step", tinyBERTCheck, *bertModel, gpuZooBERT)
}

// tinyBERTCheck runs the reduced BERT step on dev layer by layer through
// step(in)(i) and checks it (tinyStepCheck: Adam's first moments, the
// weights moved for the spread: the inputs are token ids).
func tinyBERTCheck(dev gpu.Device, lib *kernels.Library, b *strings.Builder, step func(*exec.Instance) func(int) error) error {
	m, err := models.NewBERT("tiny-bert-train", tinyGPUBERT)
	if err != nil {
		return err
	}
	return tinyStepCheck(dev, lib, b, step, tinyStep{model: m, batch: 4, state: "adam.m:", compared: " (Adam m = 0.1 x gradients)",
		moved: weightsMoved, movedWhat: "weights", verdict: "gradient"})
}

// bertSpotRef is how the full-size check recomputes op: spotRef's choice
// (convolutions sampled, the cheap training kernels in full), the BERT
// training kernels and the attention GEMMs in full; the forward linear
// GEMMs, GELU and the gradient adds run unchecked (the tiny step checks
// them in full).
func bertSpotRef(op kernels.Op) refFn {
	switch op.(type) {
	case kernels.ActBackward, kernels.SoftmaxBackward, kernels.LayerNormBackward, kernels.LNGradPartial, kernels.EmbeddingBackward,
		kernels.ColumnPartial, kernels.Transpose, kernels.Concat3, kernels.EmbedAdd, kernels.Adam, kernels.StridedGEMM, kernels.LayerNorm:
		return fullRef
	}
	return spotRef(op)
}

func gpuZooBERT(dev gpu.Device, lib *kernels.Library, b *strings.Builder) error {
	return gpuZooStep(dev, lib, b, *bertModel, *bertBatch, *bertRuns, bertSpotRef)
}

// The reduced BERT check passes on the simulator with every layer computed
// by its kernel's CPU reference (emulated layer by layer): the whole-step
// comparison and its one-ulp spread are wired as on the GPU.
func TestTinyBERTCheckEmulated(t *testing.T) {
	if testing.Short() {
		t.Skip("several CPU reference steps")
	}
	dev := newSim(t)
	var b strings.Builder
	err := tinyBERTCheck(dev, kernels.New(dev), &b, func(in *exec.Instance) func(int) error {
		return func(i int) error { emulateLayer(t, dev, in, i); return nil }
	})
	if err != nil {
		t.Errorf("emulated: %v\n%s", err, b.String())
	}
	if !strings.Contains(b.String(), "whole step vs CPU reference") {
		t.Errorf("summary lacks the whole-step comparison:\n%s", b.String())
	}
}
