package models_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"atoll/models"
)

// TestONNXExportsMatchONNXRuntime imports small models exported by
// PyTorch's two ONNX exporters (tools/onnx/export.py: a CNN with batch
// norm, a residual, depthwise convolution and ReLU6; Hugging Face BERT with
// its pooler and DistilBERT, random weights) and checks the CPU reference
// of the imported graph against onnxruntime's outputs for the same inputs,
// stored beside each file: a reference nobody here wrote.
func TestONNXExportsMatchONNXRuntime(t *testing.T) {
	files, err := filepath.Glob("testdata/onnx/*/*.onnx")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(f, ".onnx")
		t.Run(strings.TrimPrefix(name, "testdata/onnx/"), func(t *testing.T) {
			m, err := models.Get(f)
			if err != nil {
				t.Fatal(err)
			}
			ref := readBundle(t, name+".ref.safetensors")
			io := m.ONNXIO()
			in, ok := ref.Get("input." + io.Input)
			if !ok {
				t.Fatalf("no input %q in the reference", io.Input)
			}
			want, ok := ref.Get("output." + io.Output)
			if !ok {
				t.Fatalf("no output %q in the reference", io.Output)
			}
			g, err := m.Graph(in.Shape[0])
			if err != nil {
				t.Fatal(err)
			}
			inputs, err := io.GraphInput(g, in.Values())
			if err != nil {
				t.Fatal(err)
			}
			acts, err := models.Reference(g, m.Weights(), inputs)
			if err != nil {
				t.Fatal(err)
			}
			got := acts[g.Output]
			if len(got) != len(want.Values()) {
				t.Fatalf("%d outputs, onnxruntime %d", len(got), len(want.Values()))
			}
			e := models.RelErr(got, want.Values())
			t.Logf("%s: relative error against onnxruntime %.2e (%s)", m.Description(), e, strings.Join(io.Notes, "; "))
			if e > onnxTol {
				t.Errorf("relative error against onnxruntime %.3g, want ≤ %g", e, onnxTol)
			}
		})
	}
}

// onnxTol: atoll runs bf16 activations and weights where onnxruntime runs
// float32: the tiny exports' whole-network relative errors are 0.4–0.5 %.
const onnxTol = 2e-2

func readBundle(t *testing.T, path string) *models.Bundle {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := models.ReadSafetensors(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
