package exec

import (
	"fmt"

	"atoll/kernels"
	"atoll/models"
)

// bindLayer binds one layer: layers marked as glue (models.Layer.Glue)
// whose layout the kernel library's strided GEMM expresses launch that
// kernel over the layer's own tensors (bindGlue); every other layer
// launches its op (bind).
func (in *Instance) bindLayer(l models.Layer, weights *models.Bundle) layer {
	if op, names, ok, err := in.glueOp(l); ok || err != nil {
		if err != nil {
			return layer{op: l.Op, err: err}
		}
		bufs, err := in.bindOp(op, names)
		if err != nil {
			return layer{op: l.Op, err: fmt.Errorf("glue %q as %s: %w", l.Glue, op.Kernel(), err)}
		}
		return layer{op: op, bufs: bufs}
	}
	bufs, err := in.bind(l, weights)
	return layer{op: l.Op, bufs: bufs, err: err}
}

// glueOp maps a glue layer to a kernels.StridedGEMM over its tensors:
//
//   - models.GlueAttnScores, a GEMM {M: S, N: S, K: d, Batch: n·heads}
//     reading [Q|K|V] [n·S, 3·h]: kernels.Attention.Scores (Q·Kᵀ/√d out of
//     the fused QKV tensor, the scale as models.Reference applies it);
//   - models.GlueAttnContext, {M: S, N: d, K: S, Batch: n·heads} reading
//     the probabilities and QKV, writing [n·S, h]: Attention.Context;
//   - models.GlueCLSRows on the pooler's forward GEMM {M: n, N, K} reading
//     the last hidden states [n·S, K] and a weight [K, N] (and bias):
//     kernels.RowsGEMM over every S-th row.
//
// ok is false for glue it has no kernel for (the layer then stays
// unrunnable, as before); err says why a glue layer's sizes do not fit
// its tensors.
func (in *Instance) glueOp(l models.Layer) (op kernels.Op, names []string, ok bool, err error) {
	gm, isGEMM := l.Op.(kernels.GEMM)
	switch {
	case l.Glue == "":
		return nil, nil, false, nil
	case !isGEMM:
		return nil, nil, false, nil
	case l.Glue == models.GlueAttnScores || l.Glue == models.GlueAttnContext:
		a, err := in.attention(l, gm)
		if err != nil {
			return nil, nil, true, err
		}
		var g kernels.StridedGEMM
		if l.Glue == models.GlueAttnScores {
			g, err = a.Scores()
		} else {
			g, err = a.Context()
		}
		if err != nil {
			return nil, nil, true, err
		}
		return g, []string{l.In[0], l.In[len(l.In)-1], l.Out[0]}, true, nil
	case l.Glue == models.GlueCLSRows:
		if len(l.In) != 1 || len(l.W) == 0 || len(l.Out) != 1 {
			return nil, nil, false, nil // not the forward pooler (e.g. its weight gradient)
		}
		x, _ := in.g.Tensor(l.In[0])
		if len(x.Shape) != 2 || x.Shape[1] != gm.K || gm.M <= 0 || x.Shape[0]%gm.M != 0 || gm.Batch > 1 {
			return nil, nil, true, fmt.Errorf("%w: glue %q: GEMM %s does not take one row of each of %d sequences of %v %v", kernels.ErrShape, l.Glue, gm.Shape(), gm.M, x.Name, x.Shape)
		}
		g, err := kernels.RowsGEMM(gm.M, x.Shape[0]/gm.M, gm.N, gm.K, gm.In, gm.Out, gm.Bias, gm.Act)
		if err != nil {
			return nil, nil, true, err
		}
		names := []string{l.In[0], l.W[0], l.Out[0]}
		if gm.Bias {
			if len(l.W) < 2 {
				return nil, nil, true, fmt.Errorf("%w: glue %q: GEMM %s has a bias but the layer no bias tensor", models.ErrOperands, l.Glue, gm.Shape())
			}
			names = append(names, l.W[1])
		}
		return g, names, true, nil
	}
	return nil, nil, false, nil
}

// attention derives the attention's sequences, heads and head size from a
// scores or context layer's GEMM and its QKV tensor (the last input,
// [n·S, 3·h]), refusing sizes that do not agree.
func (in *Instance) attention(l models.Layer, gm kernels.GEMM) (kernels.Attention, error) {
	if len(l.In) != 2 || len(l.Out) != 1 {
		return kernels.Attention{}, fmt.Errorf("%w: glue %q takes two inputs and one output, layer has %d and %d", models.ErrOperands, l.Glue, len(l.In), len(l.Out))
	}
	if gm.Bias || gm.Act != kernels.ActNone || gm.Out != gm.In {
		return kernels.Attention{}, fmt.Errorf("%w: glue %q: GEMM %s: attention GEMMs have no bias or activation and keep the input type", kernels.ErrShape, l.Glue, gm.Shape())
	}
	qkv, _ := in.g.Tensor(l.In[len(l.In)-1])
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: glue %q: GEMM %s over QKV %s %v: %s", kernels.ErrShape, l.Glue, gm.Shape(), qkv.Name, qkv.Shape, fmt.Sprintf(format, args...))
	}
	if len(qkv.Shape) != 2 || qkv.Shape[1]%3 != 0 {
		return kernels.Attention{}, bad("QKV must be [tokens, 3·hidden]")
	}
	seq, tokens, h := gm.M, qkv.Shape[0], qkv.Shape[1]/3
	if seq <= 0 || tokens%seq != 0 {
		return kernels.Attention{}, bad("%d tokens are not whole sequences of %d", tokens, seq)
	}
	n := tokens / seq
	if gm.Batch%n != 0 || gm.Batch < n {
		return kernels.Attention{}, bad("batch %d is not heads x %d sequences", gm.Batch, n)
	}
	heads := gm.Batch / n
	d := h / heads
	if d*heads != h {
		return kernels.Attention{}, bad("hidden %d does not split into %d heads", h, heads)
	}
	switch l.Glue {
	case models.GlueAttnScores:
		if gm.N != seq || gm.K != d {
			return kernels.Attention{}, bad("scores are S x S = %d x %d over head size %d, GEMM has N=%d K=%d", seq, seq, d, gm.N, gm.K)
		}
	default:
		if gm.N != d || gm.K != seq {
			return kernels.Attention{}, bad("context is S x d = %d x %d over %d keys, GEMM has N=%d K=%d", seq, d, seq, gm.N, gm.K)
		}
	}
	return kernels.Attention{Seqs: n, Seq: seq, Heads: heads, HeadDim: d, In: gm.In}, nil
}
