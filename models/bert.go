package models

import (
	"fmt"

	"atoll/kernels"
)

// BERTConfig is the shape of a BERT-family encoder. Tests build reduced
// ones (one or two layers, hidden 32) that the CPU reference runs in
// milliseconds.
type BERTConfig struct {
	Layers int `json:"layers"`
	Hidden int `json:"hidden"`
	Heads  int `json:"heads"`
	FFN    int `json:"ffn"`
	// Embedding tables: Vocab words, Positions positions, Types token
	// types (0: no token-type embedding, as DistilBERT).
	Vocab     int  `json:"vocab"`
	Positions int  `json:"positions"`
	Types     int  `json:"types"`
	Seq       int  `json:"seq"`    // sequence length of every request
	Pooler    bool `json:"pooler"` // dense + tanh on the [CLS] token
	// Labels > 0 builds a fine-tuning step (classifier over the pooler,
	// softmax cross-entropy, backward, Adam) instead of inference.
	Labels int `json:"labels"`
}

var (
	bertBase   = BERTConfig{Layers: 12, Hidden: 768, Heads: 12, FFN: 3072, Vocab: 30522, Positions: 512, Types: 2, Seq: 128, Pooler: true}
	distilBERT = BERTConfig{Layers: 6, Hidden: 768, Heads: 12, FFN: 3072, Vocab: 30522, Positions: 512, Seq: 128}
)

func (c BERTConfig) validate() error {
	switch {
	case c.Layers < 1 || c.Hidden < 1 || c.Heads < 1 || c.FFN < 1 || c.Vocab < 1 || c.Seq < 1:
		return fmt.Errorf("%w: BERT %+v: layers, hidden, heads, ffn, vocab and seq must be positive", ErrConfig, c)
	case c.Hidden%c.Heads != 0:
		return fmt.Errorf("%w: BERT hidden %d is not a multiple of heads %d", ErrConfig, c.Hidden, c.Heads)
	case c.Seq > c.Positions:
		return fmt.Errorf("%w: BERT sequence %d longer than the position table (%d)", ErrConfig, c.Seq, c.Positions)
	case c.Types < 0 || c.Labels < 0:
		return fmt.Errorf("%w: BERT types %d, labels %d: must not be negative", ErrConfig, c.Types, c.Labels)
	case c.Labels > 0 && !c.Pooler:
		return fmt.Errorf("%w: a BERT fine-tuning step (labels %d) classifies the pooler's output: set Pooler", ErrConfig, c.Labels)
	}
	return nil
}

// NewBERT makes a BERT model of the given configuration outside the zoo.
func NewBERT(name string, cfg BERTConfig) (Model, error) {
	if err := cfg.validate(); err != nil {
		return Model{}, err
	}
	m := Model{name: name, base: name, phase: PhaseInference, arch: "bert", config: cfg,
		description: fmt.Sprintf("BERT %d layers, hidden %d, %d heads, sequence %d", cfg.Layers, cfg.Hidden, cfg.Heads, cfg.Seq),
		build:       func(b *builder, n int) { bertForward(b, n, cfg) }}
	if cfg.Labels > 0 {
		m.phase = PhaseTraining
		m.build = func(b *builder, n int) { bertTraining(b, n, cfg) }
	}
	return m, nil
}

func init() {
	b384 := bertBase
	b384.Seq = 384
	train := bertBase
	train.Labels = 2
	register(Model{arch: "bert", config: bertBase, name: "bert-base", base: "bert-base", phase: PhaseInference,
		description: "BERT-base (uncased), sequence 128, with pooler",
		build:       func(b *builder, n int) { bertForward(b, n, bertBase) }})
	register(Model{arch: "bert", config: b384, name: "bert-base-384", base: "bert-base-384", phase: PhaseInference,
		description: "BERT-base (uncased), sequence 384 (SQuAD), with pooler",
		build:       func(b *builder, n int) { bertForward(b, n, b384) }})
	register(Model{arch: "bert", config: distilBERT, name: "distilbert", base: "distilbert", phase: PhaseInference,
		description: "DistilBERT (6 layers), sequence 128, no pooler",
		build:       func(b *builder, n int) { bertForward(b, n, distilBERT) }})
	register(Model{arch: "bert", config: train, name: "bert-base-train", base: "bert-base", phase: PhaseTraining,
		description: "BERT-base fine-tuning step, sequence 128: forward, 2-label classifier on the pooler, softmax cross-entropy, backward, Adam",
		build:       func(b *builder, n int) { bertTraining(b, n, train) }})
}

// bertLayer holds the forward ops and tensor names of one encoder layer
// that the backward pass needs.
type bertLayer struct {
	prefix            string
	qkv, out, f1, f2  kernels.GEMM
	scores, context   kernels.GEMM
	softmax, ln1, ln2 int // elements
	in, attnLN        string
}

// bertForward adds embeddings, the encoder and (if configured) the pooler.
// Dropout is the identity (inference; training omits it too). There is no
// attention mask (every sequence is full length; token types are all 0)
// and the 1/√d scale belongs to the score GEMM. It returns the layers and
// the name of the last tensor (the pooler's output, or the last hidden
// states).
func bertForward(b *builder, n int, cfg BERTConfig) ([]bertLayer, string) {
	tokens := n * cfg.Seq
	h := cfg.Hidden
	d := h / cfg.Heads
	ids := b.input("input_ids", kernels.I32, n, cfg.Seq)
	word := kernels.Gather{Rows: tokens, Cols: h, In: bf16, Vocab: cfg.Vocab}
	x := b.act("embeddings.word", bf16, tokens, h)
	b.op("embeddings.word", word, EmbeddingParams(word), []string{ids},
		[]string{b.weight("embeddings.word_embeddings.weight", bf16, cfg.Vocab, h)}, []string{x})
	inputs := 2 // word + position
	addParams := cfg.Positions * h
	w := []string{b.weight("embeddings.position_embeddings.weight", bf16, cfg.Positions, h)}
	if cfg.Types > 0 {
		inputs = 3
		addParams += cfg.Types * h
		w = append(w, b.weight("embeddings.token_type_embeddings.weight", bf16, cfg.Types, h))
	}
	// Position (and token-type) lookups are fused into the add: their
	// tables are indexed by position, not gathered by token id.
	sum := b.act("embeddings.add", bf16, tokens, h)
	b.op("embeddings.add", kernels.Elementwise{Name: "embed_add", Elems: tokens * h, Inputs: inputs, Outputs: 1, In: bf16}, addParams,
		[]string{x}, w, []string{sum})
	ln := kernels.LayerNorm{Rows: tokens, Cols: h, In: bf16}
	x = b.layerNorm("embeddings.layernorm", sum, ln)

	var out []bertLayer
	for i := range cfg.Layers {
		p := fmt.Sprintf("encoder.%d", i)
		l := bertLayer{
			prefix:  p,
			in:      x,
			qkv:     kernels.GEMM{M: tokens, N: 3 * h, K: h, In: bf16, Out: bf16, Bias: true},
			scores:  kernels.GEMM{M: cfg.Seq, N: cfg.Seq, K: d, Batch: n * cfg.Heads, In: bf16, Out: bf16},
			context: kernels.GEMM{M: cfg.Seq, N: d, K: cfg.Seq, Batch: n * cfg.Heads, In: bf16, Out: bf16},
			out:     kernels.GEMM{M: tokens, N: h, K: h, In: bf16, Out: bf16, Bias: true},
			f1:      kernels.GEMM{M: tokens, N: cfg.FFN, K: h, In: bf16, Out: bf16, Bias: true, Act: kernels.ActGELU},
			f2:      kernels.GEMM{M: tokens, N: h, K: cfg.FFN, In: bf16, Out: bf16, Bias: true},
			softmax: n * cfg.Heads * cfg.Seq * cfg.Seq,
		}
		qkv := b.linear(p+".attention.qkv", x, l.qkv)
		scores := b.act(p+".attention.scores", bf16, n*cfg.Heads, cfg.Seq, cfg.Seq)
		b.op(p+".attention.scores", l.scores, 0, []string{qkv, qkv}, nil, []string{scores}).glue(GlueAttnScores) // Q·Kᵀ per (sequence, head)
		probs := b.act(p+".attention.softmax", bf16, n*cfg.Heads, cfg.Seq, cfg.Seq)
		b.op(p+".attention.softmax", kernels.Softmax{Rows: n * cfg.Heads * cfg.Seq, Cols: cfg.Seq, In: bf16}, 0, []string{scores}, nil, []string{probs})
		ctx := b.act(p+".attention.context", bf16, tokens, h)
		b.op(p+".attention.context", l.context, 0, []string{probs, qkv}, nil, []string{ctx}).glue(GlueAttnContext) // P·V per (sequence, head)
		ao := b.linear(p+".attention.output", ctx, l.out)
		res := b.act(p+".attention.residual", bf16, tokens, h)
		b.op(p+".attention.residual", kernels.Elementwise{Name: "add", Elems: tokens * h, Inputs: 2, Outputs: 1, In: bf16}, 0, []string{ao, x}, nil, []string{res})
		l.attnLN = b.layerNorm(p+".attention.layernorm", res, ln)
		f1 := b.linear(p+".ffn.intermediate", l.attnLN, l.f1) // GELU fused
		f2 := b.linear(p+".ffn.output", f1, l.f2)
		res2 := b.act(p+".ffn.residual", bf16, tokens, h)
		b.op(p+".ffn.residual", kernels.Elementwise{Name: "add", Elems: tokens * h, Inputs: 2, Outputs: 1, In: bf16}, 0, []string{f2, l.attnLN}, nil, []string{res2})
		x = b.layerNorm(p+".ffn.layernorm", res2, ln)
		out = append(out, l)
	}
	b.output = x
	if cfg.Pooler {
		// Dense + tanh on each sequence's first ([CLS]) token.
		pd := kernels.GEMM{M: n, N: h, K: h, In: bf16, Out: bf16, Bias: true}
		l := b.add("pooler.dense", pd, LinearParams(pd))
		l.In, l.Out = []string{x}, []string{b.act("pooler.dense", bf16, n, h)}
		l.W = []string{b.weight("pooler.dense.weight", bf16, h, h), b.weight("pooler.dense.bias", kernels.F32, h)}
		l.glue(GlueCLSRows)
		b.output = b.act("pooler", bf16, n, h)
		b.op("pooler.tanh", kernels.Elementwise{Name: "tanh", Elems: n * h, Inputs: 1, Outputs: 1, In: bf16}, 0, []string{"pooler.dense"}, nil, []string{b.output})
	}
	return out, b.output
}

// layerNorm adds a layernorm over x with parameters name.weight and
// name.bias [cols] f32; it writes and returns name.
func (b *builder) layerNorm(name, x string, ln kernels.LayerNorm) string {
	out := b.act(name, ln.In, ln.Rows, ln.Cols)
	b.op(name, ln, LayerNormParams(ln), []string{x},
		[]string{b.weight(name+".weight", kernels.F32, ln.Cols), b.weight(name+".bias", kernels.F32, ln.Cols)}, []string{out})
	return out
}

// layerNormBackward adds dγ, dβ (column sums over the rows) and dx: dy is
// the gradient of the output name, x the layernorm's input; dx goes to dx.
func (b *builder) layerNormBackward(name string, rows, cols int, x, dx string) {
	r := columnReduce("layernorm_bwd", cols, rows)
	part := b.tensor(GradName(name+".partials"), KindGradient, kernels.F32, r.Rows)
	b.op(name+".wgrad", r, 0, []string{GradName(name), x}, nil, []string{part})
	b.op(name+".dgrad", kernels.Elementwise{Name: "layernorm_bwd", Elems: rows * cols, Inputs: 3, Outputs: 1, In: bf16}, 0,
		[]string{GradName(name), x, part}, []string{name + ".weight"}, []string{dx})
}

// bertTraining is one fine-tuning step: the encoder and pooler, a
// classifier over cfg.Labels, softmax cross-entropy, the full backward pass
// and one fused Adam update over every parameter (fp32 master weights and
// moments).
func bertTraining(b *builder, n int, cfg BERTConfig) {
	tokens := n * cfg.Seq
	h := cfg.Hidden
	layers, pooled := bertForward(b, n, cfg)
	cls := kernels.GEMM{M: n, N: cfg.Labels, K: h, In: bf16, Out: bf16, Bias: true}
	logits := b.linear("classifier", pooled, cls)
	b.output = b.lossForward(n, cfg.Labels, logits)

	b.lossBackward(n, cfg.Labels, logits)
	b.linearBackward("classifier", cls, pooled)
	b.op("pooler.tanh.bwd", kernels.Elementwise{Name: "tanh_bwd", Elems: n * h, Inputs: 2, Outputs: 1, In: bf16}, 0,
		[]string{GradName(pooled), pooled}, nil, []string{b.grad("pooler.dense")})
	// The pooler read the [CLS] rows of the last hidden states (a view):
	// its input gradient covers those rows only.
	last := layers[len(layers)-1].prefix + ".ffn.layernorm"
	b.linearBackwardFrom("pooler.dense", kernels.GEMM{M: n, N: h, K: h, In: bf16, Out: bf16, Bias: true}, last, GradName("pooler.dense"),
		b.tensor(GradName("pooler.cls"), KindGradient, bf16, n, h))
	b.layers[len(b.layers)-1].glue(GlueCLSRows) // wgrad reads the [CLS] rows
	// The [CLS] rows' gradient scattered into a zeroed gradient of the whole sequence output.
	b.op("pooler.scatter", kernels.Elementwise{Name: "cls_scatter", Elems: tokens * h, Inputs: 1, Outputs: 1, In: bf16}, 0,
		[]string{GradName("pooler.cls")}, nil, []string{b.grad(last)})
	for i := len(layers) - 1; i >= 0; i-- {
		l := layers[i]
		p := l.prefix
		b.layerNormBackward(p+".ffn.layernorm", tokens, h, p+".ffn.residual", b.grad(p+".ffn.residual"))
		b.linearBackwardFrom(p+".ffn.output", l.f2, p+".ffn.intermediate", GradName(p+".ffn.residual"), b.grad(p+".ffn.intermediate"))
		// The residual's gradient flows to both addends: grad:ffn.output
		// and the layernorm's share are grad:ffn.residual itself.
		b.op(p+".ffn.gelu.bwd", kernels.Elementwise{Name: "gelu_bwd", Elems: tokens * cfg.FFN, Inputs: 2, Outputs: 1, In: bf16}, 0,
			[]string{GradName(p + ".ffn.intermediate"), p + ".ffn.intermediate"}, nil, []string{b.tensor(GradName(p+".ffn.intermediate")+".pre", KindGradient, bf16, tokens, cfg.FFN)})
		b.linearBackwardFrom(p+".ffn.intermediate", noAct(l.f1), l.attnLN, GradName(p+".ffn.intermediate")+".pre", b.gradPart(l.attnLN, p+".ffn"))
		b.op(p+".ffn.grad_add", kernels.Elementwise{Name: "add", Elems: tokens * h, Inputs: 2, Outputs: 1, In: bf16}, 0,
			[]string{GradName(l.attnLN) + "@" + p + ".ffn", GradName(p + ".ffn.residual")}, nil, []string{b.grad(l.attnLN)})
		b.layerNormBackward(p+".attention.layernorm", tokens, h, p+".attention.residual", b.grad(p+".attention.residual"))
		b.linearBackwardFrom(p+".attention.output", l.out, p+".attention.context", GradName(p+".attention.residual"), b.grad(p+".attention.context"))
		// context = P·V: dP = dC·Vᵀ, dV = Pᵀ·dC.
		s, d, batch := l.context.M, l.context.N, l.context.Batch
		qkv, probs := p+".attention.qkv", p+".attention.softmax"
		dqkv := b.grad(qkv) // dQ, dK, dV land in their thirds of the fused gradient
		b.op(p+".attention.context.dgrad_p", kernels.GEMM{M: s, N: s, K: d, Batch: batch, In: bf16, Out: bf16}, 0,
			[]string{GradName(p + ".attention.context"), qkv}, nil, []string{b.grad(probs)}).glue(GlueAttnBackward)
		b.op(p+".attention.context.dgrad_v", kernels.GEMM{M: s, N: d, K: s, Batch: batch, In: bf16, Out: bf16}, 0,
			[]string{probs, GradName(p + ".attention.context")}, nil, []string{dqkv}).glue(GlueAttnBackward)
		b.op(p+".attention.softmax.bwd", kernels.Elementwise{Name: "softmax_bwd", Elems: l.softmax, Inputs: 2, Outputs: 1, In: bf16}, 0,
			[]string{GradName(probs), probs}, nil, []string{b.grad(p + ".attention.scores")})
		// scores = Q·Kᵀ: dQ = dS·K, dK = dSᵀ·Q.
		b.op(p+".attention.scores.dgrad_q", kernels.GEMM{M: s, N: d, K: s, Batch: batch, In: bf16, Out: bf16}, 0,
			[]string{GradName(p + ".attention.scores"), qkv}, nil, []string{dqkv}).glue(GlueAttnBackward)
		b.op(p+".attention.scores.dgrad_k", kernels.GEMM{M: s, N: d, K: s, Batch: batch, In: bf16, Out: bf16}, 0,
			[]string{GradName(p + ".attention.scores"), qkv}, nil, []string{dqkv}).glue(GlueAttnBackward)
		b.linearBackwardFrom(p+".attention.qkv", l.qkv, l.in, dqkv, b.gradPart(l.in, p+".attention"))
		b.op(p+".attention.grad_add", kernels.Elementwise{Name: "add", Elems: tokens * h, Inputs: 2, Outputs: 1, In: bf16}, 0,
			[]string{GradName(l.in) + "@" + p + ".attention", GradName(l.attnLN)}, nil, []string{b.grad(l.in)})
	}
	b.layerNormBackward("embeddings.layernorm", tokens, h, "embeddings.add", b.grad("embeddings.add"))
	// Scatter-add into the word, position and token-type table gradients.
	tables := []string{b.grad("embeddings.word_embeddings.weight"), b.grad("embeddings.position_embeddings.weight")}
	if cfg.Types > 0 {
		tables = append(tables, b.grad("embeddings.token_type_embeddings.weight"))
	}
	b.op("embeddings.bwd", kernels.Elementwise{Name: "embed_bwd", Elems: tokens * h, Inputs: 1, Outputs: 1, In: bf16}, 0,
		[]string{GradName("embeddings.add"), "input_ids"}, nil, tables)
	b.optimizer("optimizer.adam", "adam", 4, 3, "adam.m", "adam.v")
}

// linearBackwardFrom is linearBackward with the output gradient dy and the
// input gradient dx named explicitly (residual branches share gradients).
func (b *builder) linearBackwardFrom(name string, g kernels.GEMM, x, dy, dx string) {
	if g.Bias {
		r := columnReduce("sum", g.N, g.M)
		b.op(name+".bgrad", r, 0, []string{dy}, nil, []string{b.tensor(GradName(name+".bias")+".partials", KindGradient, kernels.F32, r.Rows)})
	}
	b.op(name+".dgrad", kernels.GEMM{M: g.M, N: g.K, K: g.N, In: g.In, Out: g.Out}, 0, []string{dy}, []string{name + ".weight"}, []string{dx})
	b.op(name+".wgrad", kernels.GEMM{M: g.K, N: g.N, K: g.M, In: g.In, Out: g.Out}, 0, []string{x, dy}, nil, []string{b.grad(name + ".weight")})
}

func noAct(g kernels.GEMM) kernels.GEMM { g.Act = kernels.ActNone; return g }
