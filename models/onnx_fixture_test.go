package models_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"atoll/models"
	"atoll/models/onnx"
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

// TestONNXEncoderRefusals: what an encoder import cannot run is refused
// with an ErrONNX error naming the node (or the graph's inputs/outputs) and
// what to do — an operator it does not map, a Softmax over another axis,
// a second output, an attention_mask input.
func TestONNXEncoderRefusals(t *testing.T) {
	first := func(om *onnx.Model, op string) *onnx.Node {
		for i := range om.Graph.Nodes {
			if om.Graph.Nodes[i].OpType == op {
				return &om.Graph.Nodes[i]
			}
		}
		t.Fatalf("no %s node", op)
		return nil
	}
	for _, c := range []struct {
		name   string
		mutate func(*onnx.Model)
		want   string
	}{
		{"unmapped operator", func(om *onnx.Model) { first(om, "Erf").OpType = "Sin" }, "operator Sin is not mapped"},
		{"softmax axis", func(om *onnx.Model) {
			n := first(om, "Softmax")
			n.Attrs["axis"] = onnx.Attr{Name: "axis", Type: 2, I: 1}
		}, "Softmax over attention scores' last axis only"},
		{"two outputs", func(om *onnx.Model) {
			om.Graph.Outputs = append(om.Graph.Outputs, om.Graph.Outputs[0])
		}, "export a module that returns one tensor"},
		{"attention mask input", func(om *onnx.Model) {
			om.Graph.Inputs = append(om.Graph.Inputs, onnx.ValueInfo{Name: "attention_mask", ElemType: onnx.Int64, Shape: om.Graph.Inputs[0].Shape})
		}, "export without attention_mask"},
	} {
		t.Run(c.name, func(t *testing.T) {
			om, err := onnx.DecodeFile("testdata/onnx/legacy/tiny-bert.onnx")
			if err != nil {
				t.Fatal(err)
			}
			c.mutate(om)
			_, _, err = models.FromONNX("tiny-bert", om)
			if !errors.Is(err, models.ErrONNX) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want ErrONNX saying %q", err, c.want)
			}
		})
	}
}

// TestONNXEncoderOneInputAdd: an Add with one input inside an encoder is
// refused by name, not a panic (found reading the code).
func TestONNXEncoderOneInputAdd(t *testing.T) {
	om, err := onnx.DecodeFile("testdata/onnx/legacy/tiny-bert.onnx")
	if err != nil {
		t.Fatal(err)
	}
	for i := range om.Graph.Nodes {
		n := &om.Graph.Nodes[i]
		if n.OpType == "Add" && len(n.Inputs) == 2 && strings.Contains(n.Name, "encoder") {
			n.Inputs = n.Inputs[1:] // keep the computed one
			break
		}
	}
	_, _, err = models.FromONNX("tiny-bert", om)
	if !errors.Is(err, models.ErrONNX) {
		t.Fatalf("got %v, want ErrONNX", err)
	}
}
