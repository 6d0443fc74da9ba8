package kernels

import (
	"fmt"
	"math"

	"atoll/gpu"
)

// BERT training ops (cuda/bert_train.cu, family "bert", built on the misc
// family's block reductions): activation backward (GELU, tanh), softmax
// backward, layernorm backward and its weight-gradient partials, the
// embedding tables' gradients, the [CLS] gradient scatter, a batched
// transpose (attention backward operands) and Adam. As for the ResNet
// training kernels (train.go), nothing accumulates across logical blocks:
// reductions over rows write per-block partials (LNGradPartial, finished by
// BNFinalize), and the embedding gradient gives each table row to one
// logical block, which sums the tokens that map to it in token order — a
// block that runs again stores the same bytes. Adam may run in place and
// then relies on the resumable loop's exactly-once tickets, like SGD.

// ActBackward is an activation's input gradient, 1024 elements per logical
// block: GELU (the tanh approximation, ActGELU) from the pre-activation X,
// dX = dY·gelu′(X); tanh (ActTanh) from the output Y, dX = dY·(1 − Y²).
type ActBackward struct {
	Elems int
	Act   Act // ActGELU or ActTanh
	In    DType
}

func (a ActBackward) Kernel() string {
	if a.Act == ActTanh {
		return "tanh_bwd_" + a.In.String()
	}
	return "gelu_bwd_" + a.In.String()
}
func (a ActBackward) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(a.Elems, 1024)), Block: gpu.D1(256), Registers: 24}
}
func (a ActBackward) FLOPs() float64 { return 12 * float64(a.Elems) }
func (a ActBackward) Bytes() float64 { return 3 * float64(a.Elems) * float64(a.In.Size()) }
func (a ActBackward) Shape() string  { return fmt.Sprintf("n=%d act=%s", a.Elems, a.Act) }

// SoftmaxBackward is the input gradient of a row softmax from its output
// Y: dX = Scale·Y·(dY − Σ_j dY_j·Y_j) per row (Scale 0 means 1; attention
// folds its 1/√d into it). One row per logical block, 128 threads.
type SoftmaxBackward struct {
	Rows, Cols int
	In         DType
	Scale      float32
}

func (s SoftmaxBackward) scale() float32 {
	if s.Scale == 0 {
		return 1
	}
	return s.Scale
}
func (s SoftmaxBackward) Kernel() string { return "softmax_bwd_" + s.In.String() }
func (s SoftmaxBackward) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(s.Rows), Block: gpu.D1(128), Registers: 32}
}
func (s SoftmaxBackward) FLOPs() float64 { return 4 * float64(s.Rows*s.Cols) }
func (s SoftmaxBackward) Bytes() float64 { return 3 * float64(s.Rows*s.Cols) * float64(s.In.Size()) }
func (s SoftmaxBackward) Shape() string {
	return fmt.Sprintf("rows=%d cols=%d scale=%g", s.Rows, s.Cols, s.scale())
}

// LayerNormBackward is layernorm's input gradient, one row per logical
// block (256 threads): with mean and rstd recomputed from X as the forward
// does (biased variance, ε = 1e-5), x̂ = (X − mean)·rstd and g = dY·γ,
// dX = rstd·(g − mean(g) − x̂·mean(g·x̂)). It also writes the row
// statistics [Rows][2] = (mean, rstd), which LNGradPartial reads.
type LayerNormBackward struct {
	Rows, Cols int
	In         DType
}

func (l LayerNormBackward) Kernel() string { return "layernorm_bwd_" + l.In.String() }
func (l LayerNormBackward) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(l.Rows), Block: gpu.D1(256), Registers: 32}
}
func (l LayerNormBackward) FLOPs() float64 { return 12 * float64(l.Rows*l.Cols) }
func (l LayerNormBackward) Bytes() float64 {
	return 3*float64(l.Rows*l.Cols)*float64(l.In.Size()) + float64(4*l.Cols+8*l.Rows)
}
func (l LayerNormBackward) Shape() string { return fmt.Sprintf("rows=%d cols=%d", l.Rows, l.Cols) }

// LNGradPartial is the first stage of layernorm's weight gradients: for
// each chunk of BNChunk rows it writes (Σ dY, Σ dY·x̂) per column to part
// [splits][2][Cols] — BNStats' layout, so BNFinalize{Pixels: Rows, C: Cols,
// Grad: true} finishes it into dγ = Σ dY·x̂ and dβ = Σ dY. x̂ comes from
// the row statistics LayerNormBackward wrote. Logical block: 256 rows x 64
// columns, 256 threads (64 columns x 4 row lanes, combined in a fixed
// order).
type LNGradPartial struct {
	Rows, Cols int
	In         DType
}

// Partials is the element count of the partial-sum tensor.
func (l LNGradPartial) Partials() int  { return bnSplits(l.Rows) * 2 * l.Cols }
func (l LNGradPartial) Kernel() string { return "ln_grad_partial_" + l.In.String() }
func (l LNGradPartial) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(bnSplits(l.Rows) * ceilDiv(l.Cols, 64)), Block: gpu.D1(256), Registers: 32}
}
func (l LNGradPartial) FLOPs() float64 { return 4 * float64(l.Rows*l.Cols) }
func (l LNGradPartial) Bytes() float64 {
	return 2*float64(l.Rows*l.Cols)*float64(l.In.Size()) + float64(8*l.Rows+4*l.Partials())
}
func (l LNGradPartial) Shape() string {
	return fmt.Sprintf("rows=%d cols=%d splits=%d", l.Rows, l.Cols, bnSplits(l.Rows))
}

// ColumnPartial is the first stage of a column sum over many rows (a
// linear layer's bias gradient over the tokens): for each chunk of BNChunk
// rows it writes Σ X per column to part [splits][Cols] (fp32), which
// SplitSum{Parts: splits, Elems: Cols, Out: F32} adds up in order. Logical
// block: 256 rows x 64 columns, 256 threads (LNGradPartial's body without
// x̂).
type ColumnPartial struct {
	Rows, Cols int
	In         DType
}

// Splits is the number of row chunks (SplitSum's Parts).
func (c ColumnPartial) Splits() int    { return bnSplits(c.Rows) }
func (c ColumnPartial) Kernel() string { return "col_partial_" + c.In.String() }
func (c ColumnPartial) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(bnSplits(c.Rows) * ceilDiv(c.Cols, 64)), Block: gpu.D1(256), Registers: 32}
}
func (c ColumnPartial) FLOPs() float64 { return float64(c.Rows * c.Cols) }
func (c ColumnPartial) Bytes() float64 {
	return float64(c.Rows*c.Cols)*float64(c.In.Size()) + float64(4*c.Splits()*c.Cols)
}
func (c ColumnPartial) Shape() string {
	return fmt.Sprintf("rows=%d cols=%d splits=%d", c.Rows, c.Cols, c.Splits())
}

// EmbedTable says which embedding table EmbeddingBackward fills.
type EmbedTable int

const (
	EmbedWord     EmbedTable = iota // row ids[t] gets token t's gradient
	EmbedPosition                   // row t mod Seq
	EmbedType                       // row 0 (every token has type 0)
)

func (e EmbedTable) String() string {
	switch e {
	case EmbedWord:
		return "word"
	case EmbedPosition:
		return "position"
	case EmbedType:
		return "type"
	}
	return fmt.Sprintf("table(%d)", int(e))
}

// EmbeddingBackward is an embedding table's gradient [Rows, Cols] in fp32
// from the gradient of the embeddings dY [Tokens, Cols]: row r is the sum,
// in token order, of the tokens that looked it up (Table says how a token
// picks its row; word ids outside [0, Rows) pick none, as the forward
// gather reads none). Each logical block owns one table row's columns, or
// a chunk of 64 of them in tables of fewer than 256 rows (position, type:
// a row many tokens pick is spread over blocks), and scans every token's
// key, 256 at a time by warp ballots: a deterministic, atomic-free
// scatter-add whose re-run block stores the same bytes. Rows no token
// picks are zero.
type EmbeddingBackward struct {
	Tokens, Seq, Cols, Rows int
	Table                   EmbedTable
	In                      DType
}

func (e EmbeddingBackward) Kernel() string { return "embed_bwd_" + e.In.String() }
func (e EmbeddingBackward) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(e.Rows * ceilDiv(e.Cols, e.chunk())), Block: gpu.D1(256), Registers: 40}
}

// chunk is the columns of a row one logical block sums.
func (e EmbeddingBackward) chunk() int {
	if e.Rows < 256 {
		return 64
	}
	return max(e.Cols, 1)
}
func (e EmbeddingBackward) FLOPs() float64 { return float64(e.Tokens * e.Cols) }
func (e EmbeddingBackward) Bytes() float64 {
	return float64(e.Tokens*e.Cols)*float64(e.In.Size()) + float64(4*e.Rows*e.Cols+4*e.Tokens)
}
func (e EmbeddingBackward) Shape() string {
	return fmt.Sprintf("tokens=%d seq=%d cols=%d rows=%d table=%s", e.Tokens, e.Seq, e.Cols, e.Rows, e.Table)
}

// CLSScatter writes the gradient of each sequence's first ([CLS]) token,
// dCLS [Seqs, Cols], into the gradient of the whole sequence output
// [Seqs·Seq, Cols], zero elsewhere. 1024 elements per logical block.
type CLSScatter struct {
	Seqs, Seq, Cols int
	In              DType
}

func (c CLSScatter) elems() int     { return c.Seqs * c.Seq * c.Cols }
func (c CLSScatter) Kernel() string { return "cls_scatter_" + c.In.String() }
func (c CLSScatter) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(c.elems(), 1024)), Block: gpu.D1(256), Registers: 16}
}
func (c CLSScatter) FLOPs() float64 { return 0 }
func (c CLSScatter) Bytes() float64 {
	return float64(c.elems()+c.Seqs*c.Cols) * float64(c.In.Size())
}
func (c CLSScatter) Shape() string {
	return fmt.Sprintf("seqs=%d seq=%d cols=%d", c.Seqs, c.Seq, c.Cols)
}

// Transpose is Y[b] = X[b]ᵀ for Batch matrices [Rows, Cols] (Y is [Batch,
// Cols, Rows]): the attention backward's Pᵀ and dSᵀ operands for the
// strided GEMM, which has no transposed A. 1024 outputs per logical block.
type Transpose struct {
	Batch, Rows, Cols int
	In                DType
}

func (t Transpose) elems() int     { return max(t.Batch, 1) * t.Rows * t.Cols }
func (t Transpose) Kernel() string { return "transpose_" + t.In.String() }
func (t Transpose) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(t.elems(), 1024)), Block: gpu.D1(256), Registers: 16}
}
func (t Transpose) FLOPs() float64 { return 0 }
func (t Transpose) Bytes() float64 { return 2 * float64(t.elems()) * float64(t.In.Size()) }
func (t Transpose) Shape() string {
	return fmt.Sprintf("batch=%d rows=%d cols=%d", max(t.Batch, 1), t.Rows, t.Cols)
}

// Adam is one Adam update (PyTorch's, no weight decay) of one parameter
// tensor: weights in In, gradient in Grad, moments m and v in fp32.
// Weights of a 16-bit type carry fp32 master weights as a third state r,
// the rounding residual (master = w + r, zero at the first step like the
// moments): the update applies to w + r, w′ is its rounding to In and
// r′ = (w + r)′ − w′, so that updates smaller than a bf16 step accumulate
// instead of rounding away. The update:
// m′ = β1·m + (1−β1)·g, v′ = β2·v + (1−β2)·g², w′ = w − LR·m̂/(√v̂ + ε) with
// m̂ = m′/(1−β1^Step), v̂ = max(v′, 0)/(1−β2^Step) (v′ is never negative in
// a real run; the clamp keeps random self-test states finite). It may run
// in place (w_out = w, m_out = m, v_out = v, r_out = r). Zero fields mean LR 2e-5,
// β1 0.9, β2 0.999, ε 1e-8, Step 1. 1024 elements per logical block.
type Adam struct {
	Elems                 int
	In, Grad              DType
	LR, Beta1, Beta2, Eps float32
	Step                  int
}

// Hyper returns the update's hyperparameters with the defaults filled in.
func (a Adam) Hyper() (lr, b1, b2, eps float32, step int) {
	lr, b1, b2, eps, step = a.LR, a.Beta1, a.Beta2, a.Eps, a.Step
	if lr == 0 {
		lr = 2e-5
	}
	if b1 == 0 {
		b1 = 0.9
	}
	if b2 == 0 {
		b2 = 0.999
	}
	if eps == 0 {
		eps = 1e-8
	}
	if step == 0 {
		step = 1
	}
	return
}

// corrections are 1/(1−β1^t) and 1/(1−β2^t) in fp32, as the kernel gets them.
func (a Adam) corrections() (c1, c2 float32) {
	_, b1, b2, _, t := a.Hyper()
	return float32(1 / (1 - math.Pow(float64(b1), float64(t)))), float32(1 / (1 - math.Pow(float64(b2), float64(t))))
}
func (a Adam) Kernel() string { return "adam_" + a.In.String() }
func (a Adam) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(a.Elems, 1024)), Block: gpu.D1(256), Registers: 32}
}
func (a Adam) FLOPs() float64 { return 12 * float64(a.Elems) }
func (a Adam) Bytes() float64 {
	return float64(a.Elems) * float64(2*a.In.Size()+a.Grad.Size()+16)
}
func (a Adam) Shape() string {
	lr, b1, b2, eps, t := a.Hyper()
	return fmt.Sprintf("n=%d grad=%s lr=%g b1=%g b2=%g eps=%g step=%d", a.Elems, a.Grad, lr, b1, b2, eps, t)
}

// Concat3 is out[r] = [a[r], b[r], c[r]] for three [Rows, Cols] tensors
// (out [Rows, 3·Cols]): the fused QKV gradient from dQ, dK and dV. 1024
// outputs per logical block.
type Concat3 struct {
	Rows, Cols int
	In         DType
}

func (c Concat3) Kernel() string { return "concat3_" + c.In.String() }
func (c Concat3) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(3*c.Rows*c.Cols, 1024)), Block: gpu.D1(256), Registers: 16}
}
func (c Concat3) FLOPs() float64 { return 0 }
func (c Concat3) Bytes() float64 { return 6 * float64(c.Rows*c.Cols) * float64(c.In.Size()) }
func (c Concat3) Shape() string  { return fmt.Sprintf("rows=%d cols=%d", c.Rows, c.Cols) }

// EmbedAdd is BERT's embedding sum out[t] = X[t] + pos[t mod Seq] (+
// type[0] when Types > 0: every token has type 0) over the word
// embeddings X [Tokens, Cols], reading the position table [Positions,
// Cols] and the token-type table [Types, Cols] as weights, so that a
// training step sees the tables the optimizer updated. 1024 elements per
// logical block.
type EmbedAdd struct {
	Tokens, Seq, Cols, Positions, Types int
	In                                  DType
}

func (e EmbedAdd) Kernel() string { return "embed_add_" + e.In.String() }
func (e EmbedAdd) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(e.Tokens*e.Cols, 1024)), Block: gpu.D1(256), Registers: 16}
}
func (e EmbedAdd) FLOPs() float64 { return 2 * float64(e.Tokens*e.Cols) }
func (e EmbedAdd) Bytes() float64 {
	return float64(2*e.Tokens*e.Cols+e.Seq*e.Cols+e.Cols) * float64(e.In.Size())
}
func (e EmbedAdd) Shape() string {
	return fmt.Sprintf("tokens=%d seq=%d cols=%d positions=%d types=%d", e.Tokens, e.Seq, e.Cols, e.Positions, e.Types)
}

// Backward returns the attention's backward GEMMs over the strided GEMM,
// for the context gradient dC [Seqs·Seq, Heads·HeadDim] (heads merged):
//
//   - dP = dC·Vᵀ (A = dC, B = QKV; C = [Seqs·Heads][Seq][Seq], the
//     probabilities' layout);
//   - dV = Pᵀ·dC (A = Pᵀ, the probabilities transposed by Transpose; B =
//     dC; C = dV [Seqs·Seq, Heads·HeadDim]);
//   - dQ = dS·K (A = dS, the scores' gradient with the scale folded in:
//     SoftmaxBackward with Scale = the scores' scale; B = QKV; C = dQ);
//   - dK = dSᵀ·Q (A = dSᵀ, B = QKV; C = dK).
//
// Each C is a whole tensor; Concat3 assembles the fused QKV gradient.
func (a Attention) Backward() (dP, dV, dQ, dK StridedGEMM, err error) {
	if err := a.validate(); err != nil {
		return dP, dV, dQ, dK, err
	}
	ld, h := a.qkvStride(), a.hidden()
	qkv := func(part int) View {
		return View{Elems: a.QKVElems(), Offset: part * h, LD: ld, Outer: a.Seq * ld, Inner: a.HeadDim}
	}
	merged := View{Elems: a.Seqs * a.Seq * h, LD: h, Outer: a.Seq * h, Inner: a.HeadDim}
	sq := View{Elems: a.Seqs * a.Heads * a.Seq * a.Seq, LD: a.Seq, Outer: a.Heads * a.Seq * a.Seq, Inner: a.Seq * a.Seq}
	base := StridedGEMM{Outer: a.Seqs, Inner: a.Heads, In: a.In, Out: a.In}
	dP, dV, dQ, dK = base, base, base, base
	dP.M, dP.N, dP.K, dP.A, dP.B, dP.TransB, dP.C = a.Seq, a.Seq, a.HeadDim, merged, qkv(2), true, sq
	dV.M, dV.N, dV.K, dV.A, dV.B, dV.C = a.Seq, a.HeadDim, a.Seq, sq, merged, merged
	dQ.M, dQ.N, dQ.K, dQ.A, dQ.B, dQ.C = a.Seq, a.HeadDim, a.Seq, sq, qkv(1), merged
	dK.M, dK.N, dK.K, dK.A, dK.B, dK.C = a.Seq, a.HeadDim, a.Seq, sq, qkv(0), merged
	for _, g := range []StridedGEMM{dP, dV, dQ, dK} {
		if err := g.validate(); err != nil {
			return dP, dV, dQ, dK, err
		}
	}
	return dP, dV, dQ, dK, nil
}

// BERTTrainOps are the BERT training ops' types, for documentation and tests.
var BERTTrainOps = []Op{ActBackward{}, SoftmaxBackward{}, LayerNormBackward{}, LNGradPartial{}, ColumnPartial{}, EmbeddingBackward{}, CLSScatter{},
	Transpose{}, Adam{}, Concat3{}, EmbedAdd{}}

// bertTrainSpec fills k for a BERT training op; ok is false for other ops.
func bertTrainSpec(op Op, k *kspec) (ok bool, err error) {
	k.family = "bert"
	switch o := op.(type) {
	case ActBackward:
		return true, actBackwardSpec(o, k)
	case SoftmaxBackward:
		return true, softmaxBackwardSpec(o, k)
	case LayerNormBackward:
		return true, layerNormBackwardSpec(o, k)
	case LNGradPartial:
		return true, lnGradPartialSpec(o, k)
	case ColumnPartial:
		return true, columnPartialSpec(o, k)
	case EmbeddingBackward:
		return true, embeddingBackwardSpec(o, k)
	case CLSScatter:
		return true, clsScatterSpec(o, k)
	case Transpose:
		return true, transposeSpec(o, k)
	case Concat3:
		return true, concat3Spec(o, k)
	case EmbedAdd:
		return true, embedAddSpec(o, k)
	case Adam:
		return true, adamSpec(o, k)
	}
	return false, nil
}

// actBackwardSpec fills k for an ActBackward op.
func actBackwardSpec(o ActBackward, k *kspec) error {
	if !positive(o.Elems) || !validFloat(o.In) || (o.Act != ActGELU && o.Act != ActTanh) {
		return shapeErr(o, "Elems must be positive, the type f32/f16/bf16, the activation gelu or tanh")
	}
	k.setNoSync(8)
	k.param, k.body = "ActBwP", fmt.Sprintf("body_act_bwd<%s>", dtC(o.In))
	t := func(name string, r Role) TensorSpec {
		return TensorSpec{Name: name, DType: o.In, Elems: o.Elems, Role: r}
	}
	x := "X"
	if o.Act == ActTanh {
		x = "Y"
	}
	k.tensors = []TensorSpec{t("dY", Input), t(x, Input), t("dX", Output)}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).U64(uint64(o.Elems)).I32(int32(o.Act))
	}
	return nil
}

// softmaxBackwardSpec fills k for a SoftmaxBackward op.
func softmaxBackwardSpec(o SoftmaxBackward, k *kspec) error {
	if !positive(o.Rows, o.Cols) || !validFloat(o.In) || o.Scale < 0 || math.IsNaN(float64(o.Scale)) {
		return shapeErr(o, "Rows and Cols must be positive, the type f32/f16/bf16, Scale non-negative")
	}
	k.param, k.body = "SmBwP", fmt.Sprintf("body_softmax_bwd<%s>", dtC(o.In))
	t := func(name string, r Role) TensorSpec {
		return TensorSpec{Name: name, DType: o.In, Elems: o.Rows * o.Cols, Role: r}
	}
	k.tensors = []TensorSpec{t("dY", Input), t("Y", Input), t("dX", Output)}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).I32(int32(o.Rows)).I32(int32(o.Cols)).F32(o.scale())
	}
	return nil
}

// layerNormBackwardSpec fills k for a LayerNormBackward op.
func layerNormBackwardSpec(o LayerNormBackward, k *kspec) error {
	if !positive(o.Rows, o.Cols) || !validFloat(o.In) {
		return shapeErr(o, "Rows and Cols must be positive, the type f32/f16/bf16")
	}
	k.param, k.body = "LnBwP", fmt.Sprintf("body_ln_bwd<%s>", dtC(o.In))
	t := func(name string, r Role) TensorSpec {
		return TensorSpec{Name: name, DType: o.In, Elems: o.Rows * o.Cols, Role: r}
	}
	k.tensors = []TensorSpec{t("dY", Input), t("X", Input), f32Tensor("gamma", o.Cols, Weight), t("dX", Output), f32Tensor("rowstats", 2*o.Rows, Output)}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).Ptr(p[3]).Ptr(p[4]).I32(int32(o.Rows)).I32(int32(o.Cols)).F32(LayerNormEps)
	}
	return nil
}

// lnGradPartialSpec fills k for a LNGradPartial op.
func lnGradPartialSpec(o LNGradPartial, k *kspec) error {
	if !positive(o.Rows, o.Cols) || !validFloat(o.In) {
		return shapeErr(o, "Rows and Cols must be positive, the type f32/f16/bf16")
	}
	k.param, k.body = "LnPartP", fmt.Sprintf("body_ln_partial<%s>", dtC(o.In))
	t := func(name string) TensorSpec {
		return TensorSpec{Name: name, DType: o.In, Elems: o.Rows * o.Cols, Role: Input}
	}
	k.tensors = []TensorSpec{t("dY"), t("X"), f32Tensor("rowstats", 2*o.Rows, Input), f32Tensor("part", o.Partials(), Output)}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).Ptr(p[3]).I32(int32(o.Rows)).I32(int32(o.Cols)).I32(int32(ceilDiv(o.Cols, 64)))
	}
	return nil
}

// columnPartialSpec fills k for a ColumnPartial op.
func columnPartialSpec(o ColumnPartial, k *kspec) error {
	if !positive(o.Rows, o.Cols) || !validFloat(o.In) {
		return shapeErr(o, "Rows and Cols must be positive, the type f32/f16/bf16")
	}
	k.param, k.body = "LnPartP", fmt.Sprintf("body_ln_partial<%s>", dtC(o.In))
	k.tensors = []TensorSpec{{Name: "X", DType: o.In, Elems: o.Rows * o.Cols, Role: Input}, f32Tensor("part", o.Splits()*o.Cols, Output)}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(0).Ptr(0).Ptr(p[1]).I32(int32(o.Rows)).I32(int32(o.Cols)).I32(int32(ceilDiv(o.Cols, 64)))
	}
	return nil
}

// embeddingBackwardSpec fills k for an EmbeddingBackward op.
func embeddingBackwardSpec(o EmbeddingBackward, k *kspec) error {
	if !positive(o.Tokens, o.Seq, o.Cols, o.Rows) || !validFloat(o.In) || o.Table < EmbedWord || o.Table > EmbedType {
		return shapeErr(o, "Tokens, Seq, Cols and Rows must be positive, the type f32/f16/bf16, the table word, position or type")
	}
	k.param, k.body = "EmbBwP", fmt.Sprintf("body_embed_bwd<%s>", dtC(o.In))
	k.tensors = []TensorSpec{{Name: "dY", DType: o.In, Elems: o.Tokens * o.Cols, Role: Input}}
	if o.Table == EmbedWord {
		k.tensors = append(k.tensors, TensorSpec{Name: "ids", DType: I32, Elems: o.Tokens, Role: Input, IntRange: o.Rows})
	}
	k.tensors = append(k.tensors, f32Tensor("dTable", o.Rows*o.Cols, Output))
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		var ids gpu.Ptr
		if o.Table == EmbedWord {
			ids = p[1]
		}
		a.Ptr(p[0]).Ptr(ids).Ptr(p[len(p)-1])
		for _, v := range []int{o.Tokens, o.Cols, o.Rows, o.Seq, int(o.Table), o.chunk()} {
			a.I32(int32(v))
		}
	}
	return nil
}

// clsScatterSpec fills k for a CLSScatter op.
func clsScatterSpec(o CLSScatter, k *kspec) error {
	if !positive(o.Seqs, o.Seq, o.Cols) || !validFloat(o.In) {
		return shapeErr(o, "Seqs, Seq and Cols must be positive, the type f32/f16/bf16")
	}
	k.setNoSync(8)
	k.param, k.body = "ClsP", fmt.Sprintf("body_cls_scatter<%s>", dtC(o.In))
	k.tensors = []TensorSpec{
		{Name: "dCLS", DType: o.In, Elems: o.Seqs * o.Cols, Role: Input},
		{Name: "dX", DType: o.In, Elems: o.elems(), Role: Output},
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).U64(uint64(o.elems())).I32(int32(o.Seq)).I32(int32(o.Cols))
	}
	return nil
}

// transposeSpec fills k for a Transpose op.
func transposeSpec(o Transpose, k *kspec) error {
	if !positive(o.Rows, o.Cols) || o.Batch < 0 || !validFloat(o.In) {
		return shapeErr(o, "Rows and Cols must be positive, Batch non-negative, the type f32/f16/bf16")
	}
	k.setNoSync(8)
	k.param, k.body = "TrP", fmt.Sprintf("body_transpose<%s>", dtC(o.In))
	k.tensors = []TensorSpec{
		{Name: "X", DType: o.In, Elems: o.elems(), Role: Input},
		{Name: "Y", DType: o.In, Elems: o.elems(), Role: Output},
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).U64(uint64(o.elems())).I32(int32(o.Rows)).I32(int32(o.Cols))
	}
	return nil
}

// concat3Spec fills k for a Concat3 op.
func concat3Spec(o Concat3, k *kspec) error {
	if !positive(o.Rows, o.Cols) || !validFloat(o.In) {
		return shapeErr(o, "Rows and Cols must be positive, the type f32/f16/bf16")
	}
	k.setNoSync(8)
	k.param, k.body = "Cat3P", fmt.Sprintf("body_concat3<%s>", dtC(o.In))
	t := func(name string, n int, r Role) TensorSpec {
		return TensorSpec{Name: name, DType: o.In, Elems: n, Role: r}
	}
	n := o.Rows * o.Cols
	k.tensors = []TensorSpec{t("a", n, Input), t("b", n, Input), t("c", n, Input), t("out", 3*n, Output)}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).Ptr(p[3]).U64(uint64(3 * n)).I32(int32(o.Cols))
	}
	return nil
}

// embedAddSpec fills k for an EmbedAdd op.
func embedAddSpec(o EmbedAdd, k *kspec) error {
	if !positive(o.Tokens, o.Seq, o.Cols, o.Positions) || o.Types < 0 || o.Seq > o.Positions || !validFloat(o.In) {
		return shapeErr(o, "Tokens, Seq, Cols and Positions must be positive, Seq at most Positions, Types non-negative, the type f32/f16/bf16")
	}
	k.setNoSync(8)
	k.param, k.body = "EmbAddP", fmt.Sprintf("body_embed_add<%s>", dtC(o.In))
	t := func(name string, n int, r Role) TensorSpec {
		return TensorSpec{Name: name, DType: o.In, Elems: n, Role: r}
	}
	k.tensors = []TensorSpec{t("X", o.Tokens*o.Cols, Input), t("pos", o.Positions*o.Cols, Weight)}
	if o.Types > 0 {
		k.tensors = append(k.tensors, t("type", o.Types*o.Cols, Weight))
	}
	k.tensors = append(k.tensors, t("out", o.Tokens*o.Cols, Output))
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		var typ gpu.Ptr
		if o.Types > 0 {
			typ = p[2]
		}
		a.Ptr(p[0]).Ptr(p[1]).Ptr(typ).Ptr(p[len(p)-1]).U64(uint64(o.Tokens * o.Cols)).I32(int32(o.Seq)).I32(int32(o.Cols))
	}
	return nil
}

// adamSpec fills k for an Adam op.
func adamSpec(o Adam, k *kspec) error {
	lr, b1, b2, eps, _ := o.Hyper()
	if !positive(o.Elems) || !validFloat(o.In) || !validFloat(o.Grad) || o.LR < 0 || o.Eps < 0 || o.Step < 0 ||
		b1 >= 1 || b2 >= 1 || o.Beta1 < 0 || o.Beta2 < 0 {
		return shapeErr(o, "Elems must be positive, the types f32/f16/bf16, LR, ε and Step non-negative, β1 and β2 in [0, 1)")
	}
	k.setNoSync(8)
	k.param, k.body = "AdamP", fmt.Sprintf("body_adam<%s>", dtC(o.In))
	w := func(name string, r Role) TensorSpec {
		return TensorSpec{Name: name, DType: o.In, Elems: o.Elems, Role: r}
	}
	master := o.In != F32
	k.tensors = []TensorSpec{w("w", Weight), {Name: "g", DType: o.Grad, Elems: o.Elems, Role: Input},
		f32Tensor("m", o.Elems, Input), f32Tensor("v", o.Elems, Input)}
	if master {
		k.tensors = append(k.tensors, f32Tensor("r", o.Elems, Input))
	}
	k.tensors = append(k.tensors, w("w_out", Output), f32Tensor("m_out", o.Elems, Output), f32Tensor("v_out", o.Elems, Output))
	if master {
		k.tensors = append(k.tensors, f32Tensor("r_out", o.Elems, Output))
	}
	c1, c2 := o.corrections()
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		var r, rOut gpu.Ptr
		outs := p[4:]
		if master {
			r, rOut, outs = p[4], p[8], p[5:8]
		}
		a.Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).Ptr(p[3]).Ptr(r).Ptr(outs[0]).Ptr(outs[1]).Ptr(outs[2]).Ptr(rOut)
		a.U64(uint64(o.Elems)).I32(dtCode(o.Grad)).F32(lr).F32(b1).F32(b2).F32(eps).F32(c1).F32(c2)
	}
	return nil
}
