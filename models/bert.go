package models

import (
	"fmt"

	"atoll/kernels"
)

// bertConfig is the shape of a BERT-family encoder.
type bertConfig struct {
	layers, hidden, heads, ffn int
	vocab, positions, types    int // embedding tables; types 0: no token-type embedding
	seq                        int
	pooler                     bool
	labels                     int // training: classification head width
}

var (
	bertBase   = bertConfig{layers: 12, hidden: 768, heads: 12, ffn: 3072, vocab: 30522, positions: 512, types: 2, seq: 128, pooler: true}
	distilBERT = bertConfig{layers: 6, hidden: 768, heads: 12, ffn: 3072, vocab: 30522, positions: 512, seq: 128}
)

func init() {
	b384 := bertBase
	b384.seq = 384
	train := bertBase
	train.labels = 2
	register(Model{name: "bert-base", base: "bert-base", phase: PhaseInference,
		description: "BERT-base (uncased), sequence 128, with pooler",
		build:       func(b *builder, n int) { bertForward(b, n, bertBase) }})
	register(Model{name: "bert-base-384", base: "bert-base-384", phase: PhaseInference,
		description: "BERT-base (uncased), sequence 384 (SQuAD), with pooler",
		build:       func(b *builder, n int) { bertForward(b, n, b384) }})
	register(Model{name: "distilbert", base: "distilbert", phase: PhaseInference,
		description: "DistilBERT (6 layers), sequence 128, no pooler",
		build:       func(b *builder, n int) { bertForward(b, n, distilBERT) }})
	register(Model{name: "bert-base-train", base: "bert-base", phase: PhaseTraining,
		description: "BERT-base fine-tuning step, sequence 128: forward, 2-label classifier on the pooler, softmax cross-entropy, backward, Adam",
		build:       func(b *builder, n int) { bertTraining(b, n, train) }})
}

// bertLayer holds the forward ops of one encoder layer that the backward
// pass needs shapes of.
type bertLayer struct {
	prefix            string
	qkv, out, f1, f2  kernels.GEMM
	scores, context   kernels.GEMM
	softmax, ln1, ln2 int // elements
}

// bertForward adds embeddings, the encoder and (if configured) the pooler.
// Dropout is the identity (inference; training omits it too). The
// attention mask and the 1/√d scale are fused into the softmax and the
// score GEMM.
func bertForward(b *builder, n int, cfg bertConfig) []bertLayer {
	tokens := n * cfg.seq
	h := cfg.hidden
	d := h / cfg.heads
	word := kernels.Gather{Rows: tokens, Cols: h, In: bf16, Vocab: cfg.vocab}
	b.add("embeddings.word", word, EmbeddingParams(word))
	inputs := 2 // word + position
	addParams := cfg.positions * h
	if cfg.types > 0 {
		inputs = 3
		addParams += cfg.types * h
	}
	// Position (and token-type) lookups are fused into the add: their
	// tables are indexed by position, not gathered by token id.
	b.add("embeddings.add", kernels.Elementwise{Name: "embed_add", Elems: tokens * h, Inputs: inputs, Outputs: 1, In: bf16}, addParams)
	ln := kernels.LayerNorm{Rows: tokens, Cols: h, In: bf16}
	b.add("embeddings.layernorm", ln, LayerNormParams(ln))

	var out []bertLayer
	for i := range cfg.layers {
		p := fmt.Sprintf("encoder.%d", i)
		l := bertLayer{
			prefix:  p,
			qkv:     kernels.GEMM{M: tokens, N: 3 * h, K: h, In: bf16, Out: bf16, Bias: true},
			scores:  kernels.GEMM{M: cfg.seq, N: cfg.seq, K: d, Batch: n * cfg.heads, In: bf16, Out: bf16},
			context: kernels.GEMM{M: cfg.seq, N: d, K: cfg.seq, Batch: n * cfg.heads, In: bf16, Out: bf16},
			out:     kernels.GEMM{M: tokens, N: h, K: h, In: bf16, Out: bf16, Bias: true},
			f1:      kernels.GEMM{M: tokens, N: cfg.ffn, K: h, In: bf16, Out: bf16, Bias: true, Act: kernels.ActGELU},
			f2:      kernels.GEMM{M: tokens, N: h, K: cfg.ffn, In: bf16, Out: bf16, Bias: true},
			softmax: n * cfg.heads * cfg.seq * cfg.seq,
		}
		b.linear(p+".attention.qkv", l.qkv)
		b.add(p+".attention.scores", l.scores, 0) // Q·Kᵀ per (sequence, head)
		b.add(p+".attention.softmax", kernels.Softmax{Rows: n * cfg.heads * cfg.seq, Cols: cfg.seq, In: bf16}, 0)
		b.add(p+".attention.context", l.context, 0) // P·V per (sequence, head)
		b.linear(p+".attention.output", l.out)
		b.add(p+".attention.residual", kernels.Elementwise{Name: "add", Elems: tokens * h, Inputs: 2, Outputs: 1, In: bf16}, 0)
		b.add(p+".attention.layernorm", ln, LayerNormParams(ln))
		b.linear(p+".ffn.intermediate", l.f1) // GELU fused
		b.linear(p+".ffn.output", l.f2)
		b.add(p+".ffn.residual", kernels.Elementwise{Name: "add", Elems: tokens * h, Inputs: 2, Outputs: 1, In: bf16}, 0)
		b.add(p+".ffn.layernorm", ln, LayerNormParams(ln))
		out = append(out, l)
	}
	if cfg.pooler {
		// Dense + tanh on each sequence's first ([CLS]) token.
		b.linear("pooler.dense", kernels.GEMM{M: n, N: h, K: h, In: bf16, Out: bf16, Bias: true})
		b.add("pooler.tanh", kernels.Elementwise{Name: "tanh", Elems: n * h, Inputs: 1, Outputs: 1, In: bf16}, 0)
	}
	return out
}

// layerNormBackward adds dγ, dβ (column sums over the rows) and dx.
func (b *builder) layerNormBackward(name string, rows, cols int) {
	b.add(name+".wgrad", columnReduce("layernorm_bwd", cols, rows), 0)
	b.add(name+".dgrad", kernels.Elementwise{Name: "layernorm_bwd", Elems: rows * cols, Inputs: 3, Outputs: 1, In: bf16}, 0)
}

// bertTraining is one fine-tuning step: the encoder and pooler, a
// classifier over cfg.labels, softmax cross-entropy, the full backward pass
// and one fused Adam update over every parameter (fp32 master weights and
// moments).
func bertTraining(b *builder, n int, cfg bertConfig) {
	tokens := n * cfg.seq
	h := cfg.hidden
	layers := bertForward(b, n, cfg)
	cls := kernels.GEMM{M: n, N: cfg.labels, K: h, In: bf16, Out: bf16, Bias: true}
	b.linear("classifier", cls)
	b.add("loss.softmax", kernels.Softmax{Rows: n, Cols: cfg.labels, In: bf16}, 0)
	b.add("loss.xent", kernels.Reduce{Name: "xent", Rows: n, Cols: cfg.labels, In: bf16}, 0)

	b.add("loss.xent.bwd", kernels.Elementwise{Name: "xent_bwd", Elems: n * cfg.labels, Inputs: 2, Outputs: 1, In: bf16}, 0)
	b.linearBackward("classifier", cls)
	b.add("pooler.tanh.bwd", kernels.Elementwise{Name: "tanh_bwd", Elems: n * h, Inputs: 2, Outputs: 1, In: bf16}, 0)
	b.linearBackward("pooler.dense", kernels.GEMM{M: n, N: h, K: h, In: bf16, Out: bf16, Bias: true})
	// The [CLS] rows' gradient scattered into a zeroed gradient of the whole sequence output.
	b.add("pooler.scatter", kernels.Elementwise{Name: "cls_scatter", Elems: tokens * h, Inputs: 1, Outputs: 1, In: bf16}, 0)
	for i := len(layers) - 1; i >= 0; i-- {
		l := layers[i]
		p := l.prefix
		b.layerNormBackward(p+".ffn.layernorm", tokens, h)
		b.linearBackward(p+".ffn.output", l.f2)
		b.add(p+".ffn.gelu.bwd", kernels.Elementwise{Name: "gelu_bwd", Elems: tokens * cfg.ffn, Inputs: 2, Outputs: 1, In: bf16}, 0)
		b.linearBackward(p+".ffn.intermediate", noAct(l.f1))
		b.add(p+".ffn.grad_add", kernels.Elementwise{Name: "add", Elems: tokens * h, Inputs: 2, Outputs: 1, In: bf16}, 0)
		b.layerNormBackward(p+".attention.layernorm", tokens, h)
		b.linearBackward(p+".attention.output", l.out)
		// context = P·V: dP = dC·Vᵀ, dV = Pᵀ·dC.
		s, d, batch := l.context.M, l.context.N, l.context.Batch
		b.add(p+".attention.context.dgrad_p", kernels.GEMM{M: s, N: s, K: d, Batch: batch, In: bf16, Out: bf16}, 0)
		b.add(p+".attention.context.dgrad_v", kernels.GEMM{M: s, N: d, K: s, Batch: batch, In: bf16, Out: bf16}, 0)
		b.add(p+".attention.softmax.bwd", kernels.Elementwise{Name: "softmax_bwd", Elems: l.softmax, Inputs: 2, Outputs: 1, In: bf16}, 0)
		// scores = Q·Kᵀ: dQ = dS·K, dK = dSᵀ·Q.
		b.add(p+".attention.scores.dgrad_q", kernels.GEMM{M: s, N: d, K: s, Batch: batch, In: bf16, Out: bf16}, 0)
		b.add(p+".attention.scores.dgrad_k", kernels.GEMM{M: s, N: d, K: s, Batch: batch, In: bf16, Out: bf16}, 0)
		b.linearBackward(p+".attention.qkv", l.qkv)
		b.add(p+".attention.grad_add", kernels.Elementwise{Name: "add", Elems: tokens * h, Inputs: 2, Outputs: 1, In: bf16}, 0)
	}
	b.layerNormBackward("embeddings.layernorm", tokens, h)
	// Scatter-add into the word, position and token-type table gradients.
	b.add("embeddings.bwd", kernels.Elementwise{Name: "embed_bwd", Elems: tokens * h, Inputs: 1, Outputs: 1, In: bf16}, 0)
	b.optimizer("optimizer.adam", "adam", 4, 3)
}

func noAct(g kernels.GEMM) kernels.GEMM { g.Act = kernels.ActNone; return g }
