package models_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"atoll/kernels"
	"atoll/models"
)

// Published figures. Parameter counts are torchvision's and Hugging Face's
// (trainable parameters, BN scale and shift included, running statistics
// not). Inference models fold BN into a per-channel conv bias, which drops
// one of BN's two per-channel parameters: the tolerance covers that (the
// training model keeps BN and must match exactly).
func TestParams(t *testing.T) {
	for _, tc := range []struct {
		model string
		want  int
		tol   float64 // relative
	}{
		{"resnet50", 25_557_032, 0.002},
		{"resnet50-train", 25_557_032, 0},
		{"resnet152", 60_192_808, 0.002},
		{"vgg19", 143_667_240, 0},
		{"mobilenetv2", 3_504_872, 0.006},
		{"bert-base", 109_482_240, 0},
		{"bert-base-384", 109_482_240, 0},
		{"bert-base-train", 109_482_240 + 768*2 + 2, 0}, // + the 2-label classifier
		{"distilbert", 66_362_880, 0},
	} {
		t.Run(tc.model, func(t *testing.T) {
			l := mustOps(t, tc.model, 1)
			got := models.Params(l)
			if rel := math.Abs(float64(got-tc.want)) / float64(tc.want); rel > tc.tol {
				t.Errorf("params = %d, want %d (±%.1f%%)", got, tc.want, 100*tc.tol)
			}
		})
	}
}

// Params must follow from the op shapes: every layer that owns parameters
// is a forward conv, linear, depthwise or layernorm whose shape gives
// exactly that count (the position and token-type tables fused into the
// embedding add, and BN's scale and shift on the apply kernel, are checked by
// the totals in TestParams).
func TestParamsFromShapes(t *testing.T) {
	for _, name := range models.Names() {
		for i, l := range mustOps(t, name, 2) {
			var want int
			switch op := l.Op.(type) {
			case kernels.Conv2D:
				if !op.BackwardData && !op.BackwardFilter {
					want = models.ConvParams(op)
				}
			case kernels.GEMM:
				if op.Batch <= 1 && l.Params > 0 {
					want = models.LinearParams(op)
				}
			case kernels.Depthwise:
				want = models.DepthwiseParams(op)
			case kernels.LayerNorm:
				want = models.LayerNormParams(op)
			case kernels.Gather:
				want = models.EmbeddingParams(op)
			default:
				want = l.Params // fused position/type embeddings and BN apply: checked by TestParams
			}
			if l.Params != want {
				t.Errorf("%s: layer %d (%s %s): params %d, shape says %d", name, i, l.Name, l.Op.Shape(), l.Params, want)
			}
			if l.Params < 0 {
				t.Errorf("%s: layer %d (%s): negative params", name, i, l.Name)
			}
		}
	}
}

// Weight layers (convs incl. depthwise and downsample, linears) against the
// architectures' definitions.
func TestLayerCounts(t *testing.T) {
	for _, tc := range []struct {
		model         string
		convs, linear int
	}{
		{"resnet50", 53, 1},        // 49 + 4 downsample, fc
		{"resnet152", 155, 1},      // 151 + 4 downsample, fc
		{"vgg19", 16, 3},           // 16 conv + 3 fc = 19
		{"mobilenetv2", 52, 1},     // stem, 17 blocks (dw+project, +expand for 16), last 1x1
		{"bert-base", 0, 12*4 + 1}, // per layer: fused QKV, output, 2 FFN; pooler
		{"distilbert", 0, 6 * 4},
	} {
		t.Run(tc.model, func(t *testing.T) {
			convs, linear := 0, 0
			for _, l := range mustOps(t, tc.model, 1) {
				switch op := l.Op.(type) {
				case kernels.Conv2D, kernels.Depthwise:
					convs++
				case kernels.GEMM:
					if op.Batch <= 1 {
						linear++
					}
				}
			}
			if convs != tc.convs || linear != tc.linear {
				t.Errorf("convs %d linear %d, want %d and %d", convs, linear, tc.convs, tc.linear)
			}
		})
	}
}

// Multiply-accumulates of the convs and GEMMs at batch 1 against published
// figures (torchvision's "GFLOPS", which count MACs) and, for BERT, the
// analytic count 2·(4h²+2h·ffn)·L·seq + attention 2·seq²·h·L.
func TestMACs(t *testing.T) {
	bert := func(layers, seq int) float64 {
		h, f := 768.0, 3072.0
		return float64(layers)*float64(seq)*(4*h*h+2*h*f) + float64(layers)*2*float64(seq*seq)*h + h*h // + pooler
	}
	for _, tc := range []struct {
		model string
		want  float64
		tol   float64
	}{
		{"resnet50", 4.09e9, 0.01},
		{"resnet152", 11.51e9, 0.01},
		{"vgg19", 19.63e9, 0.01},
		{"mobilenetv2", 0.30e9, 0.03},
		{"bert-base", bert(12, 128), 0.001},
		{"bert-base-384", bert(12, 384), 0.001},
		{"distilbert", bert(6, 128) - 768*768, 0.001},
	} {
		t.Run(tc.model, func(t *testing.T) {
			got := macs(mustOps(t, tc.model, 1))
			if rel := math.Abs(got-tc.want) / tc.want; rel > tc.tol {
				t.Errorf("MACs = %.4g, want %.4g ±%.1f%%", got, tc.want, 100*tc.tol)
			}
		})
	}
}

// A training step costs about three forward passes (forward, dgrad,
// wgrad); the optimizer touches every parameter once.
func TestTraining(t *testing.T) {
	for _, tc := range []struct{ train, infer, opt string }{
		{"resnet50-train", "resnet50", "sgd"},
		{"bert-base-train", "bert-base", "adam"},
	} {
		t.Run(tc.train, func(t *testing.T) {
			m, err := models.Get(tc.train)
			if err != nil {
				t.Fatal(err)
			}
			if m.Phase() != models.PhaseTraining {
				t.Errorf("phase %q", m.Phase())
			}
			tr := mustOps(t, tc.train, 4)
			inf := mustOps(t, tc.infer, 4)
			ratio := macs(tr) / macs(inf)
			if ratio < 2.9 || ratio > 3.2 {
				t.Errorf("training MACs / inference MACs = %.3f, want about 3", ratio)
			}
			var dgrad, wgrad, opt, optElems int
			for _, l := range tr {
				switch {
				case strings.HasSuffix(l.Name, ".dgrad"):
					dgrad++
				case strings.HasSuffix(l.Name, ".wgrad"):
					wgrad++
				}
				if e, ok := l.Op.(kernels.Elementwise); ok && e.Name == tc.opt {
					opt++
					optElems += e.Elems
				}
				if e, ok := l.Op.(kernels.SGD); ok && tc.opt == "sgd" { // one update per weight
					opt++
					optElems += e.Elems
				}
				if e, ok := l.Op.(kernels.Adam); ok && tc.opt == "adam" {
					opt++
					optElems += e.Elems
				}
			}
			if optElems != models.Params(tr) {
				t.Errorf("optimizer updates %d elements, model has %d params", optElems, models.Params(tr))
			}
			if opt == 0 || dgrad == 0 || wgrad == 0 {
				t.Errorf("optimizer ops %d, dgrad %d, wgrad %d", opt, dgrad, wgrad)
			}
			last := tr[len(tr)-1]
			if !strings.HasPrefix(last.Name, "optimizer.") {
				t.Errorf("last op %q, want the optimizer", last.Name)
			}
		})
	}
}

// Work scales linearly with the batch; the launch count does not change.
func TestBatchScaling(t *testing.T) {
	for _, name := range models.Names() {
		one, four := mustOps(t, name, 1), mustOps(t, name, 4)
		if len(one) != len(four) {
			t.Errorf("%s: %d kernels at batch 1, %d at batch 4", name, len(one), len(four))
		}
		if r := macs(four) / macs(one); math.Abs(r-4) > 1e-9 {
			t.Errorf("%s: MACs ratio batch 4 / batch 1 = %v", name, r)
		}
		for i, l := range four {
			g := l.Op.Geometry()
			if g.Grid.Count() < 1 || g.Block.Count() < 1 || g.Block.Count() > 1024 || l.Op.Bytes() <= 0 || l.Op.FLOPs() < 0 {
				t.Errorf("%s: layer %d (%s): bad op grid %v block %v bytes %v", name, i, l.Name, g.Grid, g.Block, l.Op.Bytes())
			}
			if l.Name == "" {
				t.Errorf("%s: layer %d has no name", name, i)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	if _, err := models.Get("resnet51"); !errors.Is(err, models.ErrUnknownModel) || !strings.Contains(err.Error(), "resnet50") {
		t.Errorf("Get(resnet51) = %v, want ErrUnknownModel listing the zoo", err)
	}
	m, err := models.Get(" ResNet50 ")
	if err != nil || m.Name() != "resnet50" {
		t.Fatalf("Get is not case-insensitive: %v %v", m.Name(), err)
	}
	for _, b := range []int{0, -1, models.MaxBatch + 1} {
		if _, err := m.Ops(b); !errors.Is(err, models.ErrBatch) {
			t.Errorf("Ops(%d) = %v, want ErrBatch", b, err)
		}
	}
	// Large but allowed batches must still fit CUDA's grid limits or be refused.
	if _, err := m.Ops(models.MaxBatch); !errors.Is(err, models.ErrBatch) || !strings.Contains(err.Error(), "grid") {
		t.Errorf("Ops(MaxBatch) on resnet50 = %v, want a grid-limit ErrBatch", err)
	}
	if _, err := (models.Model{}).Ops(1); !errors.Is(err, models.ErrUnknownModel) {
		t.Errorf("zero Model Ops = %v", err)
	}
}

func mustOps(t *testing.T, name string, batch int) []models.Layer {
	t.Helper()
	m, err := models.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Ops(batch)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func macs(layers []models.Layer) float64 {
	var m float64
	for _, l := range layers {
		switch l.Op.(type) {
		case kernels.Conv2D, kernels.GEMM, kernels.Depthwise:
			m += l.Op.FLOPs() / 2
		}
	}
	return m
}
