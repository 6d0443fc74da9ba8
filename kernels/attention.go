package kernels

import (
	"fmt"
	"math"
	"sort"

	"atoll/gpu"
)

// View places one operand of a StridedGEMM in its buffer: element (r, c)
// of batch entry b = o·inner + i (o the outer index, e.g. the sequence; i
// the inner one, e.g. the head) is element
//
//	Offset + o·Outer + i·Inner + r·LD + c
//
// of a buffer of Elems elements. Strides are in elements.
type View struct {
	Elems  int // the buffer's size (the tensor the operand is bound to)
	Offset int // first element of batch entry 0
	LD     int // row stride
	Outer  int // stride between outer batch entries
	Inner  int // stride between inner batch entries
}

func (v View) at(o, i, r, c int) int { return v.Offset + o*v.Outer + i*v.Inner + r*v.LD + c }

// StridedGEMM is a batched GEMM over strided views of larger buffers:
//
//	C[b][m][n] = act(Scale · Σ_k A[b][m][k]·B[b][k][n] + bias[n])
//
// for b = o·Inner + i, o < Outer, i < Inner, each operand placed by its
// View. With TransB the B view holds Bᵀ (row n, column k). It is what
// multi-head attention needs (Attention builds the two GEMMs: Q·Kᵀ and P·V
// straight out of a fused QKV projection, the context written token-major
// for the output projection), and a GEMM over every S-th row (the BERT
// pooler's [CLS] tokens: A.LD = S·K).
//
// The kernel: 64x64 tiles, 128 threads (4 warps of 32x32 on
// mma.sync.m16n8k16, bf16/f16 in, fp32 accumulation), K-tiles of 32 double
// buffered with cp.async where a view's rows are 16-byte aligned. The C
// view must tile its buffer exactly (every element written once), so that
// the output is fully defined; A and B views may overlap (Q and K of one
// buffer).
type StridedGEMM struct {
	M, N, K      int
	Outer, Inner int // batch = Outer·Inner; 0 means 1
	A, B, C      View
	TransB       bool
	Scale        float32 // 0 means 1
	In, Out      DType
	Bias         bool
	Act          Act
}

const (
	sgemmBM, sgemmBN, sgemmBK = 64, 64, 32
	sgemmThreads              = 128
)

// sgemmSmem is the body's dynamic shared memory: two stages of a 64x(32+8)
// A tile and a 64x(32+8) Bᵀ tile (or 32x(64+8) B tile) of 16-bit elements
// (cuda/attention.cu SG_STAGE).
const sgemmSmem = 2 * (sgemmBM*(sgemmBK+8) + sgemmBN*(sgemmBK+8)) * 2

func (g StridedGEMM) outer() int { return max(g.Outer, 1) }
func (g StridedGEMM) inner() int { return max(g.Inner, 1) }
func (g StridedGEMM) batch() int { return g.outer() * g.inner() }
func (g StridedGEMM) scale() float32 {
	if g.Scale == 0 {
		return 1
	}
	return g.Scale
}

func (g StridedGEMM) Kernel() string {
	t := "nn"
	if g.TransB {
		t = "nt"
	}
	return fmt.Sprintf("sgemm_%s_%s", g.In, t)
}

func (g StridedGEMM) Geometry() Geometry {
	return Geometry{
		Grid:      gpu.Dim3{X: ceilDiv(g.N, sgemmBN), Y: ceilDiv(g.M, sgemmBM), Z: g.batch()},
		Block:     gpu.D1(sgemmThreads),
		SharedMem: sgemmSmem,
		Registers: 96,
	}
}

func (g StridedGEMM) FLOPs() float64 {
	return 2 * float64(g.M) * float64(g.N) * float64(g.K) * float64(g.batch())
}

// Bytes counts each batch entry's A and B views once (a buffer read by
// several entries, e.g. Q and K of one QKV tensor, counts per view), C and
// the bias.
func (g StridedGEMM) Bytes() float64 {
	b := float64(g.batch())
	bytes := b * (float64(g.M*g.K+g.K*g.N)*float64(g.In.Size()) + float64(g.M*g.N)*float64(g.Out.Size()))
	if g.Bias {
		bytes += float64(g.N * 4)
	}
	return bytes
}

func (g StridedGEMM) Shape() string {
	return fmt.Sprintf("M=%d N=%d K=%d batch=%dx%d lda=%d ldb=%d ldc=%d scale=%g act=%s",
		g.M, g.N, g.K, g.outer(), g.inner(), g.A.LD, g.B.LD, g.C.LD, g.scale(), g.Act)
}

// check refuses a view whose strides are negative or shorter than a row,
// or whose last element lies past its buffer.
func (v View) check(name string, outer, inner, rows, cols int) error {
	switch {
	case v.Elems <= 0:
		return fmt.Errorf("%s view: buffer of %d elements", name, v.Elems)
	case v.Offset < 0 || v.Outer < 0 || v.Inner < 0:
		return fmt.Errorf("%s view: offset %d and batch strides %d, %d must not be negative", name, v.Offset, v.Outer, v.Inner)
	case v.LD < cols:
		return fmt.Errorf("%s view: row stride %d is shorter than a row (%d elements)", name, v.LD, cols)
	}
	if last := v.at(outer-1, inner-1, rows-1, cols-1); last >= v.Elems {
		return fmt.Errorf("%s view: batch entry (%d, %d) ends at element %d, past the buffer's %d", name, outer-1, inner-1, last, v.Elems)
	}
	return nil
}

// disjoint reports whether the view's elements for the given extents are
// pairwise distinct: sorted by stride, each stride must exceed the span of
// the dimensions below it.
func (v View) disjoint(outer, inner, rows, cols int) bool {
	type dim struct{ stride, ext int }
	ds := []dim{{1, cols}, {v.LD, rows}, {v.Inner, inner}, {v.Outer, outer}}
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].stride < ds[j].stride })
	span := 0
	for _, d := range ds {
		if d.ext <= 1 {
			continue
		}
		if d.stride <= span {
			return false
		}
		span += d.stride * (d.ext - 1)
	}
	return true
}

func (g StridedGEMM) validate() error {
	if !positive(g.M, g.N, g.K) || g.Outer < 0 || g.Inner < 0 {
		return shapeErr(g, "M, N, K must be positive and Outer, Inner non-negative")
	}
	if !valid16(g.In) || !validFloat(g.Out) || !validAct(g.Act) {
		return shapeErr(g, "inputs must be bf16 or f16, output f32/f16/bf16, act known")
	}
	if s := g.scale(); math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
		return shapeErr(g, "scale %g is not finite", s)
	}
	o, i := g.outer(), g.inner()
	brows, bcols := g.K, g.N
	if g.TransB {
		brows, bcols = g.N, g.K
	}
	for _, c := range []struct {
		name       string
		v          View
		rows, cols int
	}{{"A", g.A, g.M, g.K}, {"B", g.B, brows, bcols}, {"C", g.C, g.M, g.N}} {
		if err := c.v.check(c.name, o, i, c.rows, c.cols); err != nil {
			return shapeErr(g, "%s", err)
		}
	}
	if !g.C.disjoint(o, i, g.M, g.N) {
		return shapeErr(g, "C view: batch entries or rows overlap (strides ld=%d inner=%d outer=%d for %dx%d x %dx%d)", g.C.LD, g.C.Inner, g.C.Outer, g.M, g.N, o, i)
	}
	if g.C.Elems != g.batch()*g.M*g.N {
		return shapeErr(g, "C view covers %d of its buffer's %d elements: it must tile the output exactly", g.batch()*g.M*g.N, g.C.Elems)
	}
	return nil
}

// sgemmParams is the C struct SgemmP (cuda/attention.cu) in Go.
func (g StridedGEMM) pack(a *gpu.Args, p []gpu.Ptr) {
	in := gpu.Ptr(g.In.Size())
	a.Ptr(p[0] + gpu.Ptr(g.A.Offset)*in).Ptr(p[1] + gpu.Ptr(g.B.Offset)*in).Ptr(p[2] + gpu.Ptr(g.C.Offset)*gpu.Ptr(g.Out.Size()))
	if g.Bias {
		a.Ptr(p[3])
	} else {
		a.Ptr(0)
	}
	for _, v := range []int{g.A.LD, g.B.LD, g.C.LD, g.A.Outer, g.A.Inner, g.B.Outer, g.B.Inner, g.C.Outer, g.C.Inner} {
		a.U64(uint64(int64(v)))
	}
	vecA, vecB, vecC := g.vec()
	for _, v := range []int32{int32(g.M), int32(g.N), int32(g.K), int32(g.inner()), int32(g.batch()), int32(g.Act), dtCode(g.Out), b2i(vecA), b2i(vecB), b2i(vecC)} {
		a.I32(v)
	}
	a.F32(g.scale())
}

// vec reports which views allow the kernel's wide accesses: 16-byte rows
// of A and B (every stride, the offset and the contiguous extent multiples
// of 8 elements) and 4-byte column pairs of C.
func (g StridedGEMM) vec() (a, b, c bool) {
	m8 := func(vals ...int) bool {
		for _, v := range vals {
			if v%8 != 0 {
				return false
			}
		}
		return true
	}
	a = m8(g.A.Offset, g.A.LD, g.A.Outer, g.A.Inner, g.K)
	bw := g.N
	if g.TransB {
		bw = g.K
	}
	b = m8(g.B.Offset, g.B.LD, g.B.Outer, g.B.Inner, bw)
	c = (g.C.Offset|g.C.LD|g.C.Outer|g.C.Inner|g.N)%2 == 0
	return a, b, c
}

// sgemmSpec fills k for a StridedGEMM.
func sgemmSpec(g StridedGEMM, k *kspec) error {
	if err := g.validate(); err != nil {
		return err
	}
	k.family, k.param = "attn", "SgemmP"
	k.body = fmt.Sprintf("body_sgemm<%s, %d>", dtC(g.In), b2i(g.TransB))
	k.tensors = []TensorSpec{
		{Name: "A", DType: g.In, Elems: g.A.Elems, Role: Input},
		{Name: "B", DType: g.In, Elems: g.B.Elems, Role: Weight},
		{Name: "C", DType: g.Out, Elems: g.C.Elems, Role: Output},
	}
	if g.Bias {
		k.tensors = append(k.tensors, TensorSpec{Name: "bias", DType: F32, Elems: g.N, Role: Weight})
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) { g.pack(a, p) }
	return nil
}

// refStrided is StridedGEMM's CPU reference.
func refStrided(g StridedGEMM, a, b, bias []float64) []float64 {
	out := make([]float64, g.C.Elems)
	scale := float64(g.scale())
	for o := range g.outer() {
		for i := range g.inner() {
			for m := range g.M {
				for n := range g.N {
					s := 0.0
					for k := range g.K {
						bi := g.B.at(o, i, k, n)
						if g.TransB {
							bi = g.B.at(o, i, n, k)
						}
						s += a[g.A.at(o, i, m, k)] * b[bi]
					}
					v := s * scale
					if bias != nil {
						v += bias[n]
					}
					out[g.C.at(o, i, m, n)] = act(v, g.Act)
				}
			}
		}
	}
	return out
}

// Attention describes multi-head self-attention over a fused QKV
// projection: Seqs sequences of Seq tokens, QKV laid out
// [Seqs·Seq][3][Heads][HeadDim] (rows of QKVStride elements), the context
// written token-major [Seqs·Seq][Heads·HeadDim] (heads merged, what the
// output projection reads), the scores and probabilities
// [Seqs·Heads][Seq][Seq].
type Attention struct {
	Seqs, Seq, Heads, HeadDim int
	// QKVStride is the QKV tensor's row stride in elements; 0 means
	// 3·Heads·HeadDim (a packed fused projection).
	QKVStride int
	// Scale multiplies the scores; 0 means 1/√HeadDim.
	Scale float32
	In    DType // bf16 or f16; the outputs have the same type
}

func (a Attention) hidden() int { return a.Heads * a.HeadDim }
func (a Attention) qkvStride() int {
	if a.QKVStride == 0 {
		return 3 * a.hidden()
	}
	return a.QKVStride
}

// QKVElems is the size of the QKV tensor.
func (a Attention) QKVElems() int { return a.Seqs * a.Seq * a.qkvStride() }

func (a Attention) validate() error {
	switch {
	case a.Seqs <= 0 || a.Seq <= 0 || a.Heads <= 0 || a.HeadDim <= 0:
		return fmt.Errorf("%w: attention seqs=%d seq=%d heads=%d dim=%d: all must be positive", ErrShape, a.Seqs, a.Seq, a.Heads, a.HeadDim)
	case a.QKVStride < 0 || (a.QKVStride > 0 && a.QKVStride < 3*a.hidden()):
		return fmt.Errorf("%w: attention QKV row stride %d is shorter than Q, K and V of %d heads x %d (%d elements)", ErrShape, a.QKVStride, a.Heads, a.HeadDim, 3*a.hidden())
	case !valid16(a.In):
		return fmt.Errorf("%w: attention input type %s: must be bf16 or f16", ErrShape, a.In)
	case math.IsNaN(float64(a.Scale)) || math.IsInf(float64(a.Scale), 0):
		return fmt.Errorf("%w: attention scale %g is not finite", ErrShape, a.Scale)
	}
	return nil
}

// Scores is S = Scale·Q·Kᵀ per (sequence, head), Q and K read out of the
// QKV tensor (operands: A = QKV, B = QKV, C = scores).
func (a Attention) Scores() (StridedGEMM, error) {
	if err := a.validate(); err != nil {
		return StridedGEMM{}, err
	}
	ld, h := a.qkvStride(), a.hidden()
	scale := a.Scale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(a.HeadDim)))
	}
	qkv := func(part int) View {
		return View{Elems: a.QKVElems(), Offset: part * h, LD: ld, Outer: a.Seq * ld, Inner: a.HeadDim}
	}
	return StridedGEMM{M: a.Seq, N: a.Seq, K: a.HeadDim, Outer: a.Seqs, Inner: a.Heads,
		A: qkv(0), B: qkv(1), TransB: true,
		C:     View{Elems: a.Seqs * a.Heads * a.Seq * a.Seq, LD: a.Seq, Outer: a.Heads * a.Seq * a.Seq, Inner: a.Seq * a.Seq},
		Scale: scale, In: a.In, Out: a.In}, nil
}

// Context is C = P·V per (sequence, head), V read out of the QKV tensor,
// the result written token-major with heads merged (operands: A = P, B =
// QKV, C = context).
func (a Attention) Context() (StridedGEMM, error) {
	if err := a.validate(); err != nil {
		return StridedGEMM{}, err
	}
	ld, h := a.qkvStride(), a.hidden()
	return StridedGEMM{M: a.Seq, N: a.HeadDim, K: a.Seq, Outer: a.Seqs, Inner: a.Heads,
		A:  View{Elems: a.Seqs * a.Heads * a.Seq * a.Seq, LD: a.Seq, Outer: a.Heads * a.Seq * a.Seq, Inner: a.Seq * a.Seq},
		B:  View{Elems: a.QKVElems(), Offset: 2 * h, LD: ld, Outer: a.Seq * ld, Inner: a.HeadDim},
		C:  View{Elems: a.Seqs * a.Seq * h, LD: h, Outer: a.Seq * h, Inner: a.HeadDim},
		In: a.In, Out: a.In}, nil
}

// RowsGEMM is C[rows][N] = act(A'·B + bias) where A' takes every every-th
// row of A [rows·every][K] (the first token of each sequence: BERT's
// pooler over [CLS]), B [K][N] a weight.
func RowsGEMM(rows, every, n, k int, in, out DType, bias bool, ac Act) (StridedGEMM, error) {
	if rows <= 0 || every <= 0 || n <= 0 || k <= 0 {
		return StridedGEMM{}, fmt.Errorf("%w: rows GEMM rows=%d every=%d N=%d K=%d: all must be positive", ErrShape, rows, every, n, k)
	}
	g := StridedGEMM{M: rows, N: n, K: k,
		A: View{Elems: rows * every * k, LD: every * k}, B: View{Elems: k * n, LD: n}, C: View{Elems: rows * n, LD: n},
		In: in, Out: out, Bias: bias, Act: ac}
	return g, g.validate()
}

// sgemmCheckOps are SelfTest's StridedGEMM cases: both attention GEMMs with
// ragged tiles and several heads (16-byte and scalar load paths), a bf16
// BERT-base-like head, and a row-strided pooler GEMM with bias and tanh.
func sgemmCheckOps() []Op {
	var ops []Op
	for _, a := range []Attention{
		{Seqs: 2, Seq: 40, Heads: 3, HeadDim: 24, In: BF16},                // vector loads, ragged 64-tiles
		{Seqs: 1, Seq: 130, Heads: 2, HeadDim: 64, In: BF16},               // BERT head size, 3 M/N tiles
		{Seqs: 2, Seq: 21, Heads: 2, HeadDim: 20, QKVStride: 124, In: F16}, // scalar loads, padded QKV rows
	} {
		for _, f := range []func() (StridedGEMM, error){a.Scores, a.Context} {
			g, err := f()
			if err != nil {
				panic("kernels: bad self-test case: " + err.Error()) // a defect in this table
			}
			ops = append(ops, g)
		}
	}
	p, err := RowsGEMM(3, 7, 72, 48, BF16, BF16, true, ActTanh)
	if err != nil {
		panic("kernels: bad self-test case: " + err.Error())
	}
	q, err := RowsGEMM(2, 5, 30, 20, F16, F32, false, ActNone)
	if err != nil {
		panic("kernels: bad self-test case: " + err.Error())
	}
	return append(ops, p, q)
}
