package models_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"atoll/kernels"
	"atoll/models"
)

// tinyBERTTrain is a reduced BERT fine-tuning step (two layers, hidden 32,
// three labels) with a learning rate large enough for one step to show.
func tinyBERTTrain(t *testing.T, lr float32) *models.Graph {
	t.Helper()
	cfg := tinyBERT
	cfg.Labels, cfg.LR = 3, lr
	m, err := models.NewBERT("tiny-bert-train", cfg)
	return graphOf(t, m, err, 2)
}

func meanOf(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// withWeights is the reference's loss with every weight w replaced by
// f(w, its values).
func lossWith(t *testing.T, g *models.Graph, w, in *models.Bundle, f func(name string, v []float64) []float64) float64 {
	t.Helper()
	b := &models.Bundle{Metadata: w.Metadata}
	for _, d := range w.Tensors() {
		b.Add(models.NewData(d.Name, d.DType, d.Shape, f(d.Name, d.Values())))
	}
	vals, err := models.Reference(g, b, in)
	if err != nil {
		t.Fatal(err)
	}
	return meanOf(vals[g.Output])
}

// The BERT fine-tuning step runs on the CPU reference with every layer a
// kernel of the library (no glue beyond the forward attention and
// pooler); every weight's gradient is the loss's — moving the weight
// along it changes the loss by |g|² per unit step, checked by central
// differences per tensor — and one Adam step (every weight moves, the bf16 ones
// through their fp32 masters) lowers the loss.
func TestReferenceBERTTraining(t *testing.T) {
	g := tinyBERTTrain(t, 1e-3)
	for _, l := range g.Layers {
		if l.Glue != "" && l.Glue != models.GlueAttnScores && l.Glue != models.GlueAttnContext && l.Glue != models.GlueCLSRows {
			t.Errorf("layer %s needs glue %q", l.Name, l.Glue)
		}
		if _, ok := l.Op.(kernels.Elementwise); ok && strings.Contains(l.Op.Kernel(), "bwd") {
			t.Errorf("layer %s is a cost-only elementwise %s", l.Name, l.Op.Kernel())
		}
	}
	w, in := models.InitWeights(g, 1), models.InitInputs(g, 2)
	vals, err := models.Reference(g, w, in)
	if err != nil {
		t.Fatal(err)
	}
	loss1 := meanOf(vals[g.Output])
	if math.IsNaN(loss1) || math.IsInf(loss1, 0) || loss1 <= 0 {
		t.Fatalf("loss %v", loss1)
	}
	// Per weight tensor, the directional derivative along its gradient:
	// a step e with a predicted loss change 2e·|g|² = 0.1, far above the
	// bf16 rounding of the perturbed weights and activations.
	// The fused QKV weights [h, 3h] also per part (columns [part·h,
	// (part+1)·h)): at initialisation the attention is nearly uniform and
	// the Q and K gradients are a small share of the whole.
	type check struct {
		name string
		in   func(i int) bool // elements perturbed
	}
	var checks []check
	h := tinyBERT.Hidden
	for _, d := range w.Tensors() {
		checks = append(checks, check{d.Name, func(int) bool { return true }})
		if strings.HasSuffix(d.Name, ".attention.qkv.weight") {
			for part, what := range []string{"Q", "K", "V"} {
				checks = append(checks, check{d.Name + "[" + what + "]", func(i int) bool { return (i%(3*h))/h == part }})
			}
		}
	}
	for _, c := range checks {
		name, _, _ := strings.Cut(c.name, "[")
		gr, ok := vals[models.GradName(name)]
		if !ok {
			t.Fatalf("no gradient for %s", name)
		}
		g2 := 0.0
		for i, x := range gr {
			if c.in(i) {
				g2 += x * x
			}
		}
		if g2 == 0 {
			t.Errorf("%s: zero gradient", c.name)
			continue
		}
		e := 0.05 / g2
		at := func(sign float64) float64 {
			return lossWith(t, g, w, in, func(n string, v []float64) []float64 {
				if n != name {
					return v
				}
				out := slices.Clone(v)
				for i := range v {
					if c.in(i) {
						out[i] += sign * e * gr[i]
					}
				}
				return out
			})
		}
		if r := (at(1) - at(-1)) / (2 * e) / g2; math.Abs(r-1) > 0.15 {
			t.Errorf("%s: central difference along the gradient / |g|² = %.3f, want 1", c.name, r)
		}
	}
	// One Adam step: every master weight moves and the loss drops.
	w2 := &models.Bundle{Metadata: w.Metadata}
	for _, d := range w.Tensors() {
		master := vals[d.Name]
		if r, ok := vals["adam.r:"+d.Name]; ok {
			master = append([]float64(nil), master...)
			for i := range master {
				master[i] += r[i]
			}
		}
		if models.RelErr(master, d.Values()) == 0 {
			t.Errorf("weight %s did not change", d.Name)
		}
		w2.Add(models.NewData(d.Name, d.DType, d.Shape, vals[d.Name]))
	}
	after, err := models.Reference(g, w2, in)
	if err != nil {
		t.Fatal(err)
	}
	if loss2 := meanOf(after[g.Output]); !(loss2 < loss1) {
		t.Errorf("loss after one Adam step %.5f, before %.5f: want lower", loss2, loss1)
	}
}

// A negative learning rate is refused.
func TestBERTTrainingConfig(t *testing.T) {
	cfg := tinyBERT
	cfg.Labels, cfg.LR = 2, -1
	if _, err := models.NewBERT("bad", cfg); !errors.Is(err, models.ErrConfig) {
		t.Errorf("NewBERT with learning rate -1: %v, want ErrConfig", err)
	}
}
