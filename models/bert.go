package models

import (
	"fmt"
	"math"
	"slices"

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
	// LR is the fine-tuning step's Adam learning rate (0: 2e-5).
	LR float32 `json:"lr,omitempty"`
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
	case c.Types < 0 || c.Labels < 0 || c.LR < 0:
		return fmt.Errorf("%w: BERT types %d, labels %d, learning rate %g: must not be negative", ErrConfig, c.Types, c.Labels, c.LR)
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
	prefix           string
	qkv, out, f1, f2 kernels.GEMM
	scores, context  kernels.GEMM
	softmax          int // elements
	in, attnLN       string
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
	train := cfg.Labels > 0
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
	if train {
		// A training step reads the tables the optimizer updates.
		b.op("embeddings.add", kernels.EmbedAdd{Tokens: tokens, Seq: cfg.Seq, Cols: h, Positions: cfg.Positions, Types: cfg.Types, In: bf16}, addParams,
			[]string{x}, w, []string{sum})
	} else {
		b.op("embeddings.add", kernels.Elementwise{Name: "embed_add", Elems: tokens * h, Inputs: inputs, Outputs: 1, In: bf16}, addParams,
			[]string{x}, w, []string{sum})
	}
	ln := kernels.LayerNorm{Rows: tokens, Cols: h, In: bf16}
	x = b.layerNorm("embeddings.layernorm", sum, ln)

	// Inference keeps the linear layers' biases in bf16 as PyTorch does
	// (a BLAS takes no other with a bf16 output); training keeps them in
	// f32, the type its optimizer updates.
	bias := bf16
	if train {
		bias = kernels.F32
	}
	var out []bertLayer
	for i := range cfg.Layers {
		p := fmt.Sprintf("encoder.%d", i)
		l := bertLayer{
			prefix:  p,
			in:      x,
			qkv:     kernels.GEMM{M: tokens, N: 3 * h, K: h, In: bf16, Out: bf16, Bias: true, BiasType: bias},
			scores:  kernels.GEMM{M: cfg.Seq, N: cfg.Seq, K: d, Batch: n * cfg.Heads, In: bf16, Out: bf16},
			context: kernels.GEMM{M: cfg.Seq, N: d, K: cfg.Seq, Batch: n * cfg.Heads, In: bf16, Out: bf16},
			out:     kernels.GEMM{M: tokens, N: h, K: h, In: bf16, Out: bf16, Bias: true, BiasType: bias},
			f1:      kernels.GEMM{M: tokens, N: cfg.FFN, K: h, In: bf16, Out: bf16, Bias: true, BiasType: bias, Act: kernels.ActGELU},
			f2:      kernels.GEMM{M: tokens, N: h, K: cfg.FFN, In: bf16, Out: bf16, Bias: true, BiasType: bias},
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
		var f1 string
		if train {
			// The GELU backward needs the pre-activation: the GEMM writes
			// it and a separate GELU the activation.
			f := b.add(p+".ffn.intermediate", noAct(l.f1), LinearParams(l.f1))
			f.In, f.Out = []string{l.attnLN}, []string{b.act(p+".ffn.intermediate.pre", bf16, tokens, cfg.FFN)}
			f.W = []string{b.weight(p+".ffn.intermediate.weight", bf16, h, cfg.FFN), b.weight(p+".ffn.intermediate.bias", kernels.F32, cfg.FFN)}
			f1 = b.act(p+".ffn.intermediate", bf16, tokens, cfg.FFN)
			b.op(p+".ffn.gelu", kernels.Elementwise{Name: "gelu", Elems: tokens * cfg.FFN, Inputs: 1, Outputs: 1, In: bf16}, 0,
				[]string{p + ".ffn.intermediate.pre"}, nil, []string{f1})
		} else {
			f1 = b.linear(p+".ffn.intermediate", l.attnLN, l.f1) // GELU fused
		}
		f2 := b.linear(p+".ffn.output", f1, l.f2)
		res2 := b.act(p+".ffn.residual", bf16, tokens, h)
		b.op(p+".ffn.residual", kernels.Elementwise{Name: "add", Elems: tokens * h, Inputs: 2, Outputs: 1, In: bf16}, 0, []string{f2, l.attnLN}, nil, []string{res2})
		x = b.layerNorm(p+".ffn.layernorm", res2, ln)
		out = append(out, l)
	}
	b.output = x
	if cfg.Pooler {
		// Dense + tanh on each sequence's first ([CLS]) token.
		// SplitK 1: the layer runs as the strided RowsGEMM (glue), which
		// does not split K, and the profile describes that launch.
		pd := kernels.GEMM{M: n, N: h, K: h, In: bf16, Out: bf16, Bias: true, SplitK: 1}
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

// layerNormBackward adds layernorm's backward pass: dx into dx (the row
// kernel, which also leaves the row statistics), and dγ, dβ as
// grad:name.weight and grad:name.bias (per-chunk column partials finished
// in a fixed order: no atomics). The output gradient is grad:name, x the
// layernorm's input.
func (b *builder) layerNormBackward(name string, rows, cols int, x, dx string) {
	st := b.tensor(GradName(name)+".rowstats", KindGradient, kernels.F32, 2*rows)
	b.op(name+".dgrad", kernels.LayerNormBackward{Rows: rows, Cols: cols, In: bf16}, 0,
		[]string{GradName(name), x}, []string{name + ".weight"}, []string{dx, st})
	r := kernels.LNGradPartial{Rows: rows, Cols: cols, In: bf16}
	part := b.tensor(GradName(name)+".partials", KindGradient, kernels.F32, r.Partials())
	b.op(name+".wgrad", r, 0, []string{GradName(name), x, st}, nil, []string{part})
	b.op(name+".wgrad.finalize", kernels.BNFinalize{Pixels: rows, C: cols, Grad: true}, 0, []string{part}, nil,
		[]string{b.grad(name + ".weight"), b.grad(name + ".bias")})
}

// bertTraining is one fine-tuning step: the encoder and pooler, a
// classifier over cfg.Labels, softmax cross-entropy, the full backward pass
// and one Adam update per parameter (in the parameter's own type, fp32
// moments). Every layer is a kernel of the library (the linear layers'
// backward passes as 1x1 convolutions, the attention's as strided GEMMs
// over the fused QKV tensor), so models.Reference computes the step and a
// device runs it without glue beyond the forward attention and pooler.
func bertTraining(b *builder, n int, cfg BERTConfig) {
	tokens := n * cfg.Seq
	h := cfg.Hidden
	layers, pooled := bertForward(b, n, cfg)
	cls := kernels.GEMM{M: n, N: cfg.Labels, K: h, In: bf16, Out: bf16, Bias: true}
	logits := b.linear("classifier", pooled, cls)
	b.output = b.lossForward(n, cfg.Labels, logits)

	b.lossBackward(n, cfg.Labels, logits)
	b.denseBackward("classifier", linearConv(n, 1, h, cfg.Labels), pooled, GradName(logits), b.grad(pooled))
	b.op("pooler.tanh.bwd", kernels.ActBackward{Elems: n * h, Act: kernels.ActTanh, In: bf16}, 0,
		[]string{GradName(pooled), pooled}, nil, []string{b.grad("pooler.dense")})
	// The pooler read the [CLS] rows of the last hidden states: as a 1x1
	// convolution with stride S over each sequence [S, 1, h], its dgrad
	// writes the [CLS] rows' gradient and zeros elsewhere.
	last := layers[len(layers)-1].prefix + ".ffn.layernorm"
	b.denseBackward("pooler.dense", linearConv(n, cfg.Seq, h, h), last, GradName("pooler.dense"), b.grad(last))
	for i := len(layers) - 1; i >= 0; i-- {
		l := layers[i]
		p := l.prefix
		b.layerNormBackward(p+".ffn.layernorm", tokens, h, p+".ffn.residual", b.grad(p+".ffn.residual"))
		// The residual's gradient flows to both addends: grad:ffn.output
		// and the layernorm's share are grad:ffn.residual itself.
		b.denseBackward(p+".ffn.output", linearConv(tokens, 1, cfg.FFN, h), p+".ffn.intermediate", GradName(p+".ffn.residual"),
			b.grad(p+".ffn.intermediate"))
		pre := p + ".ffn.intermediate.pre"
		b.op(p+".ffn.gelu.bwd", kernels.ActBackward{Elems: tokens * cfg.FFN, Act: kernels.ActGELU, In: bf16}, 0,
			[]string{GradName(p + ".ffn.intermediate"), pre}, nil, []string{b.grad(pre)})
		b.denseBackward(p+".ffn.intermediate", linearConv(tokens, 1, h, cfg.FFN), l.attnLN, GradName(pre), b.gradPart(l.attnLN, p+".ffn"))
		b.op(p+".ffn.grad_add", kernels.Elementwise{Name: "add", Elems: tokens * h, Inputs: 2, Outputs: 1, In: bf16}, 0,
			[]string{GradName(l.attnLN) + "@" + p + ".ffn", GradName(p + ".ffn.residual")}, nil, []string{b.grad(l.attnLN)})
		b.layerNormBackward(p+".attention.layernorm", tokens, h, p+".attention.residual", b.grad(p+".attention.residual"))
		b.denseBackward(p+".attention.output", linearConv(tokens, 1, h, h), p+".attention.context", GradName(p+".attention.residual"),
			b.grad(p+".attention.context"))
		b.attentionBackward(p, n, cfg)
		// The input's gradient: the QKV projection's share plus the
		// attention residual's (grad:attention.residual itself).
		b.denseBackward(p+".attention.qkv", linearConv(tokens, 1, h, 3*h), l.in, GradName(p+".attention.qkv"), b.gradPart(l.in, p+".attention"))
		b.op(p+".attention.grad_add", kernels.Elementwise{Name: "add", Elems: tokens * h, Inputs: 2, Outputs: 1, In: bf16}, 0,
			[]string{GradName(l.in) + "@" + p + ".attention", GradName(p + ".attention.residual")}, nil, []string{b.grad(l.in)})
	}
	b.layerNormBackward("embeddings.layernorm", tokens, h, "embeddings.add", b.grad("embeddings.add"))
	// Each table's gradient [rows, h] in fp32: a logical block per row sums
	// the tokens that looked it up (deterministic, no atomics).
	for _, e := range []struct {
		table string
		rows  int
		kind  kernels.EmbedTable
	}{
		{"word", cfg.Vocab, kernels.EmbedWord},
		{"position", cfg.Positions, kernels.EmbedPosition},
		{"token_type", cfg.Types, kernels.EmbedType},
	} {
		if e.rows == 0 {
			continue
		}
		w := "embeddings." + e.table + "_embeddings.weight"
		in := []string{GradName("embeddings.add")}
		if e.kind == kernels.EmbedWord {
			in = append(in, "input_ids")
		}
		b.op("embeddings."+e.table+".bwd", kernels.EmbeddingBackward{Tokens: tokens, Seq: cfg.Seq, Cols: h, Rows: e.rows, Table: e.kind, In: bf16}, 0,
			in, nil, []string{b.tensor(GradName(w), KindGradient, kernels.F32, e.rows, h)})
	}
	b.adam("optimizer.adam", cfg.LR)
}

// attentionBackward adds the backward pass of layer p's attention from
// grad:context into grad:qkv: dP = dC·Vᵀ, dV = Pᵀ·dC, the softmax
// backward with the scores' 1/√d folded in (dS), dQ = dS·K, dK = dSᵀ·Q
// (strided GEMMs over the fused QKV tensor; Pᵀ and dSᵀ by a batched
// transpose), and dQ, dK, dV concatenated into the fused gradient.
func (b *builder) attentionBackward(p string, n int, cfg BERTConfig) {
	tokens, h := n*cfg.Seq, cfg.Hidden
	d := h / cfg.Heads
	a := kernels.Attention{Seqs: n, Seq: cfg.Seq, Heads: cfg.Heads, HeadDim: d, In: bf16}
	dP, dV, dQ, dK, err := a.Backward()
	if err != nil {
		panic(fmt.Sprintf("models: BERT %+v attention backward: %v", cfg, err)) // validate admits no such config
	}
	qkv, probs, scores, ctx := p+".attention.qkv", p+".attention.softmax", p+".attention.scores", p+".attention.context"
	batch := n * cfg.Heads
	sq := []int{batch, cfg.Seq, cfg.Seq}
	tr := kernels.Transpose{Batch: batch, Rows: cfg.Seq, Cols: cfg.Seq, In: bf16}
	b.op(p+".attention.context.dgrad_p", dP, 0, []string{GradName(ctx), qkv}, nil, []string{b.grad(probs)})
	pt := b.act(probs+".T", bf16, sq...)
	b.op(p+".attention.softmax.transpose", tr, 0, []string{probs}, nil, []string{pt})
	part := func(x string) string { return b.tensor(GradName(qkv)+"."+x, KindGradient, bf16, tokens, h) }
	b.op(p+".attention.context.dgrad_v", dV, 0, []string{pt, GradName(ctx)}, nil, []string{part("v")})
	b.op(p+".attention.softmax.bwd", kernels.SoftmaxBackward{Rows: batch * cfg.Seq, Cols: cfg.Seq, In: bf16, Scale: float32(1 / math.Sqrt(float64(d)))}, 0,
		[]string{GradName(probs), probs}, nil, []string{b.grad(scores)})
	st := b.tensor(GradName(scores)+".T", KindGradient, bf16, sq...)
	b.op(p+".attention.scores.transpose", tr, 0, []string{GradName(scores)}, nil, []string{st})
	b.op(p+".attention.scores.dgrad_q", dQ, 0, []string{GradName(scores), qkv}, nil, []string{part("q")})
	b.op(p+".attention.scores.dgrad_k", dK, 0, []string{st, qkv}, nil, []string{part("k")})
	b.op(p+".attention.qkv.concat", kernels.Concat3{Rows: tokens, Cols: h, In: bf16}, 0,
		[]string{GradName(qkv) + ".q", GradName(qkv) + ".k", GradName(qkv) + ".v"}, nil, []string{b.grad(qkv)})
}

// linearConv is a linear layer x [rows·every, k] → [rows, n] over every
// every-th row of x as a 1x1 convolution (rows images of every x 1 pixels,
// stride every): its BackwardData and BackwardFilter passes are the
// layer's dgrad (dy·Wᵀ, zero on the rows it skips) and wgrad (xᵀ·dy), W
// [k, n] being the convolution's [1, 1, k, n] weight.
func linearConv(rows, every, k, n int) kernels.Conv2D {
	return kernels.Conv2D{N: rows, H: every, W: 1, C: k, OutC: n, R: 1, S: 1, Stride: every, In: bf16}
}

// denseBackward adds the backward pass of linear layer name (weights
// name.weight [K, N], name.bias [N]) given as its 1x1 convolution c: the
// bias gradient (column sums of dy in fp32: per-chunk partials added up in
// order), dx = dy·Wᵀ into dx and dW = xᵀ·dy
// (a split wgrad and its ordered sum, as for the ResNet convolutions).
func (b *builder) denseBackward(name string, c kernels.Conv2D, x, dy, dx string) {
	cp := kernels.ColumnPartial{Rows: c.N, Cols: c.OutC, In: bf16}
	part := b.tensor(GradName(name+".bias")+".partials", KindGradient, kernels.F32, cp.Splits()*c.OutC)
	b.op(name+".bgrad", cp, 0, []string{dy}, nil, []string{part})
	b.op(name+".bgrad.sum", kernels.SplitSum{Parts: cp.Splits(), Elems: c.OutC, Out: kernels.F32}, 0, []string{part}, nil, []string{b.grad(name + ".bias")})
	dg := c
	dg.BackwardData = true
	b.op(name+".dgrad", dg, 0, []string{dy}, []string{name + ".weight"}, []string{dx})
	wg := c
	wg.BackwardFilter = true
	b.wgrad(name, wg, x, dy, name+".weight")
}

// adam adds one Adam update per weight (learning rate lr; 0: the
// kernel's default), in order of first use: the weight in its own type,
// its gradient grad:w (bf16 for the linear weights, fp32 for biases,
// layernorm parameters and the embedding tables), fp32 moments adam.m:w
// and adam.v:w and, for bf16 weights, the fp32 master weight's rounding
// residual adam.r:w, all updated in place.
func (b *builder) adam(name string, lr float32) {
	for _, t := range slices.Clone(b.list) {
		if t.Kind != KindWeight {
			continue
		}
		gi, ok := b.tensors[GradName(t.Name)]
		if !ok {
			panic(fmt.Sprintf("models: %s: weight %s has no gradient", name, t.Name)) // a defect of the builder
		}
		g := b.list[gi]
		state := []string{b.tensor("adam.m:"+t.Name, KindState, kernels.F32, t.Shape...), b.tensor("adam.v:"+t.Name, KindState, kernels.F32, t.Shape...)}
		if t.DType != kernels.F32 {
			state = append(state, b.tensor("adam.r:"+t.Name, KindState, kernels.F32, t.Shape...))
		}
		b.op(name+"."+t.Name, kernels.Adam{Elems: t.Elems(), In: t.DType, Grad: g.DType, LR: lr}, 0,
			append([]string{g.Name}, state...), []string{t.Name}, append([]string{t.Name}, state...))
	}
}

func noAct(g kernels.GEMM) kernels.GEMM { g.Act = kernels.ActNone; return g }
