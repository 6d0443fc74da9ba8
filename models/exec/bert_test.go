package exec_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
)

// addressOnly is the simulator with copies that check their addresses but
// store nothing: full-size models bind without holding gigabytes of
// activations in the test's memory.
type addressOnly struct{ gpu.Device }

func (d addressOnly) CopyToDevice(dst gpu.Ptr, src []byte) error { return nil }

// The zoo's BERTs bind every layer to a library kernel at batch 1 and 8 —
// attention and pooler glue to the strided GEMM, tanh to its elementwise
// kernel — with the embedding add the only substitution.
func TestBERTZooRunnable(t *testing.T) {
	if testing.Short() {
		t.Skip("full-size weights")
	}
	for _, name := range []string{"bert-base", "bert-base-384", "distilbert"} {
		m, err := models.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		var w *models.Bundle
		for _, batch := range []int{1, 8} {
			g, err := m.Graph(batch)
			if err != nil {
				t.Fatal(err)
			}
			if w == nil {
				w = models.InitWeights(g, 1) // the same tensors at every batch
			}
			dev := addressOnly{newSim(t)}
			in, err := exec.NewWith(dev, kernels.New(dev), g, w, models.InitInputs(g, 2), exec.Options{Substitute: true})
			if err != nil {
				t.Fatal(err)
			}
			if in.Runnable() != len(g.Layers) {
				t.Errorf("%s bs%d: runnable %d of %d: %v", name, batch, in.Runnable(), len(g.Layers), in.Err(in.Runnable()))
			}
			if subs := in.Substitutions(); len(subs) != 1 || !strings.HasPrefix(subs[0], "embeddings.add:") {
				t.Errorf("%s bs%d: substitutions %v, want the embedding add only", name, batch, subs)
			}
			var cfg models.BERTConfig
			if _, js := m.Arch(); json.Unmarshal([]byte(js), &cfg) != nil {
				t.Fatalf("%s: config %s", name, js)
			}
			glue := 0
			for i, l := range g.Layers {
				if l.Glue == "" {
					continue
				}
				glue++
				op, ok := in.Op(i).(kernels.StridedGEMM)
				if !ok {
					t.Fatalf("%s bs%d %s: launches %T", name, batch, l.Name, in.Op(i))
				}
				want := map[string]int{models.GlueAttnScores: batch * cfg.Heads, models.GlueAttnContext: batch * cfg.Heads, models.GlueCLSRows: 1}[l.Glue]
				if op.Outer*op.Inner != want && !(want == 1 && op.Outer == 0 && op.Inner == 0) {
					t.Errorf("%s bs%d %s: batch %dx%d, want %d", name, batch, l.Name, op.Outer, op.Inner, want)
				}
				// The launch has the GEMM's grid (what the profiles record).
				if og, gg := op.Geometry().Grid, l.Op.Geometry().Grid; og != gg {
					t.Errorf("%s bs%d %s: grid %v, the model's GEMM has %v", name, batch, l.Name, og, gg)
				}
			}
			if wantGlue := 2*cfg.Layers + map[bool]int{true: 1}[cfg.Pooler]; glue != wantGlue {
				t.Errorf("%s bs%d: %d glue layers, want %d", name, batch, glue, wantGlue)
			}
			if err := in.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Reduced BERTs on the simulator, each layer computed by its kernel's CPU
// reference from the device buffers it is bound to (emulate), reproduce
// models.Reference: the output and every attention, context and pooler
// tensor. Sequences of 8, 20 and 72 tokens (72: more than one 64-row tile
// per head); 1 to 4 heads; with and without pooler and token types.
func TestEmulatedBERT(t *testing.T) {
	for _, c := range []struct {
		cfg   models.BERTConfig
		batch int
	}{
		{models.BERTConfig{Layers: 1, Hidden: 32, Heads: 4, FFN: 64, Vocab: 50, Positions: 16, Types: 2, Seq: 8, Pooler: true}, 1},
		{models.BERTConfig{Layers: 2, Hidden: 48, Heads: 2, FFN: 96, Vocab: 60, Positions: 24, Seq: 20}, 3},
		{models.BERTConfig{Layers: 1, Hidden: 48, Heads: 3, FFN: 64, Vocab: 40, Positions: 72, Types: 2, Seq: 72, Pooler: true}, 2},
		{models.BERTConfig{Layers: 1, Hidden: 16, Heads: 1, FFN: 32, Vocab: 30, Positions: 8, Types: 1, Seq: 5, Pooler: true}, 8},
	} {
		name := fmt.Sprintf("L%d-h%d-heads%d-S%d-bs%d", c.cfg.Layers, c.cfg.Hidden, c.cfg.Heads, c.cfg.Seq, c.batch)
		t.Run(name, func(t *testing.T) {
			dev := newSim(t)
			m, err := models.NewBERT("tiny-bert", c.cfg)
			in := instanceWith(t, dev, kernels.New(dev), m, err, c.batch, exec.Options{Substitute: true})
			g := in.Graph()
			if in.Runnable() != len(g.Layers) {
				t.Fatalf("runnable %d of %d: %v", in.Runnable(), len(g.Layers), in.Err(in.Runnable()))
			}
			emulate(t, dev, in)
			ref, err := models.Reference(g, models.InitWeights(g, 1), models.InitInputs(g, 2))
			if err != nil {
				t.Fatal(err)
			}
			checked := 0
			worst := 0.0
			for _, l := range g.Layers {
				if l.Glue == "" && !strings.HasSuffix(l.Name, ".tanh") && l.Out[0] != g.Output {
					continue
				}
				got, err := in.Read(l.Out[0])
				if err != nil {
					t.Fatal(err)
				}
				e := models.RelErr(got, ref[l.Out[0]])
				worst = max(worst, e)
				if e > 1e-6 {
					t.Errorf("%s: relative error %.3g between the emulated device and models.Reference", l.Name, e)
				}
				checked++
			}
			if want := 2*c.cfg.Layers + 2*b2i(c.cfg.Pooler) + 1 - b2i(c.cfg.Pooler); checked != want {
				t.Errorf("checked %d tensors, want %d", checked, want)
			}
			t.Logf("%s: %d layers, %d glue/pooler/output tensors checked, worst relative error %.3g", name, len(g.Layers), checked, worst)
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A graph whose attention or pooler GEMM disagrees with its tensors is not
// bound: the layer is unrunnable with an error that names the mismatch.
func TestBERTGlueBadShapes(t *testing.T) {
	m, err := models.NewBERT("tiny-bert", tinyBERT)
	if err != nil {
		t.Fatal(err)
	}
	g0, err := m.Graph(2)
	if err != nil {
		t.Fatal(err)
	}
	find := func(g *models.Graph, suffix string) int {
		return slices.IndexFunc(g.Layers, func(l models.Layer) bool { return strings.HasSuffix(l.Name, suffix) })
	}
	for name, c := range map[string]struct {
		layer string
		edit  func(*kernels.GEMM)
		want  string
	}{
		"heads do not divide the batch": {".attention.scores", func(g *kernels.GEMM) { g.Batch = 7 }, "not heads x 2 sequences"},
		"head size off":                 {".attention.scores", func(g *kernels.GEMM) { g.K = 5 }, "head size 8"},
		"scores not square":             {".attention.scores", func(g *kernels.GEMM) { g.N = 4 }, "S x S"},
		"sequence does not divide":      {".attention.context", func(g *kernels.GEMM) { g.M = 5 }, "not whole sequences of 5"},
		"context keys off":              {".attention.context", func(g *kernels.GEMM) { g.K = 4 }, "over 8 keys"},
		"heads do not split hidden":     {".attention.context", func(g *kernels.GEMM) { g.Batch = 6; g.N = 10 }, "does not split into 3 heads"},
		"attention with a bias":         {".attention.context", func(g *kernels.GEMM) { g.Bias = true }, "no bias or activation"},
		"pooler rows off":               {"pooler.dense", func(g *kernels.GEMM) { g.M = 3 }, "one row of each of 3 sequences"},
	} {
		t.Run(name, func(t *testing.T) {
			g := *g0
			g.Layers = slices.Clone(g0.Layers)
			i := find(&g, c.layer)
			op := g.Layers[i].Op.(kernels.GEMM)
			c.edit(&op)
			g.Layers[i].Op = op
			dev := newSim(t)
			in, err := exec.NewWith(dev, kernels.New(dev), &g, models.InitWeights(g0, 1), models.InitInputs(g0, 2), exec.Options{Substitute: true})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			e := in.Err(i)
			if !errors.Is(e, exec.ErrNotRunnable) || !errors.Is(e, kernels.ErrShape) || !strings.Contains(e.Error(), c.want) {
				t.Errorf("layer %s: err = %v, want ErrNotRunnable and kernels.ErrShape mentioning %q", g.Layers[i].Name, e, c.want)
			}
			if in.Runnable() != i {
				t.Errorf("runnable %d, want %d (up to the bad layer)", in.Runnable(), i)
			}
		})
	}
}
