package models_test

import (
	"errors"
	"strings"
	"testing"

	"atoll/kernels"
	"atoll/models"
)

// Every zoo model's dataflow is complete: Graph checks that each name is
// declared and each activation written before it is read; here, in
// addition, that the op sequence is Ops', that every kernel operand has a
// tensor of the right size, and that training steps update every weight
// from its gradient.
func TestGraphDataflow(t *testing.T) {
	for _, name := range models.Names() {
		t.Run(name, func(t *testing.T) {
			m, _ := models.Get(name)
			g, err := m.Graph(2)
			if err != nil {
				t.Fatal(err)
			}
			ops := mustOps(t, name, 2)
			if len(ops) != len(g.Layers) {
				t.Fatalf("Graph has %d layers, Ops %d", len(g.Layers), len(ops))
			}
			params := 0
			for _, w := range g.Weights() {
				params += w.Elems()
			}
			if want := models.Params(ops); params != want {
				t.Errorf("weights hold %d values, Params says %d", params, want)
			}
			for i, l := range g.Layers {
				if l.Op.Shape() != ops[i].Op.Shape() || l.Name != ops[i].Name {
					t.Fatalf("layer %d differs from Ops", i)
				}
				specs, err := kernels.Tensors(l.Op)
				if err != nil || l.Glue != "" {
					continue // no kernel (cost-only op) or glue: checked by the executors
				}
				bound, _, err := models.Operands(g, l)
				if err != nil {
					t.Errorf("layer %d (%s): %v", i, l.Name, err)
					continue
				}
				for j, s := range specs {
					if s.Role == kernels.Scratch {
						if bound[j] != "" {
							t.Errorf("layer %d (%s): scratch %s bound to tensor %q", i, l.Name, s.Name, bound[j])
						}
						continue
					}
					tt, _ := g.Tensor(bound[j])
					if tt.Elems() != s.Elems {
						t.Errorf("layer %d (%s) operand %s: tensor %v has %d elements, kernel wants %d", i, l.Name, s.Name, tt, tt.Elems(), s.Elems)
					}
				}
			}
			if m.Phase() == models.PhaseTraining {
				// The optimizer: the layers that write weights (one
				// multi-tensor launch, or one per weight).
				var opt models.Layer
				updated := map[string]bool{}
				for _, l := range g.Layers {
					for _, o := range l.Out {
						if tt, _ := g.Tensor(o); tt.Kind == models.KindWeight {
							updated[o] = true
							opt.In = append(opt.In, l.In...)
						}
					}
				}
				if len(updated) != len(g.Weights()) {
					t.Errorf("optimizer updates %d weights of %d", len(updated), len(g.Weights()))
				}
				grads := 0
				for _, in := range opt.In {
					if strings.HasPrefix(in, "grad:") {
						grads++
					}
				}
				if grads == 0 {
					t.Errorf("optimizer reads no gradients")
				}
			}
		})
	}
}

func TestNewConfigErrors(t *testing.T) {
	for name, err := range map[string]error{
		"resnet blocks": errOf(models.NewResNet("x", models.ResNetConfig{Blocks: [4]int{1, 0, 1, 1}, Image: 32, Width: 8, Classes: 10})),
		"resnet image":  errOf(models.NewResNet("x", models.ResNetConfig{Blocks: [4]int{1, 1, 1, 1}, Image: 16, Width: 8, Classes: 10})),
		"bert heads":    errOf(models.NewBERT("x", models.BERTConfig{Layers: 1, Hidden: 30, Heads: 4, FFN: 8, Vocab: 10, Positions: 8, Seq: 8})),
		"bert seq":      errOf(models.NewBERT("x", models.BERTConfig{Layers: 1, Hidden: 32, Heads: 4, FFN: 8, Vocab: 10, Positions: 8, Seq: 9})),
	} {
		if !errors.Is(err, models.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

func errOf(_ models.Model, err error) error { return err }
