package kernels

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"atoll/gpu"
)

// naiveAttention computes scores and context from a fused QKV tensor
// [seqs·seq][3][heads][d] (rows of stride ld) with plain index arithmetic,
// independently of View.
func naiveAttention(a Attention, qkv []float64) (scores, probs, ctx []float64) {
	ld, h, d := a.qkvStride(), a.hidden(), a.HeadDim
	at := func(part, tok, head, j int) float64 { return qkv[tok*ld+part*h+head*d+j] }
	scale := 1 / math.Sqrt(float64(d))
	if a.Scale != 0 {
		scale = float64(a.Scale)
	}
	b := a.Seqs * a.Heads
	scores = make([]float64, b*a.Seq*a.Seq)
	probs = make([]float64, len(scores))
	for z := range b {
		s, head := z/a.Heads, z%a.Heads
		for i := range a.Seq {
			for j := range a.Seq {
				acc := 0.0
				for k := range d {
					acc += at(0, s*a.Seq+i, head, k) * at(1, s*a.Seq+j, head, k)
				}
				scores[(z*a.Seq+i)*a.Seq+j] = acc * scale
			}
		}
	}
	// Any probabilities will do for the context check: use a fixed pattern.
	for i := range probs {
		probs[i] = math.Sin(float64(i))
	}
	ctx = make([]float64, a.Seqs*a.Seq*h)
	for z := range b {
		s, head := z/a.Heads, z%a.Heads
		for i := range a.Seq {
			for k := range d {
				acc := 0.0
				for j := range a.Seq {
					acc += probs[(z*a.Seq+i)*a.Seq+j] * at(2, s*a.Seq+j, head, k)
				}
				ctx[(s*a.Seq+i)*h+head*d+k] = acc
			}
		}
	}
	return scores, probs, ctx
}

// The attention GEMMs' views compute multi-head attention over the fused
// QKV layout, with packed and padded QKV rows.
func TestAttentionReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, a := range []Attention{
		{Seqs: 2, Seq: 5, Heads: 3, HeadDim: 4, In: BF16},
		{Seqs: 1, Seq: 7, Heads: 2, HeadDim: 8, QKVStride: 51, Scale: 0.5, In: F16},
	} {
		qkv := make([]float64, a.QKVElems())
		for i := range qkv {
			qkv[i] = rng.Float64()*2 - 1
		}
		wantS, probs, wantC := naiveAttention(a, qkv)
		sc, err := a.Scores()
		if err != nil {
			t.Fatal(err)
		}
		cx, err := a.Context()
		if err != nil {
			t.Fatal(err)
		}
		dev := newFake()
		for _, c := range []struct {
			op   StridedGEMM
			a, b []float64
			want []float64
		}{{sc, qkv, qkv, wantS}, {cx, probs, qkv, wantC}} {
			b, err := Alloc(dev, c.op, 1)
			if err != nil {
				t.Fatal(err)
			}
			b.T[0].Host, b.T[1].Host = c.a, c.b
			got, err := Reference(c.op, b)
			if err != nil {
				t.Fatal(err)
			}
			if e := RelErr(got[0], c.want); e > 1e-12 {
				t.Errorf("%s %s: relative error %g against the naive attention", c.op.Kernel(), c.op.Shape(), e)
			}
		}
	}
	// The pooler's rows GEMM reads every every-th row.
	g, err := RowsGEMM(2, 3, 2, 2, BF16, BF16, true, ActTanh)
	if err != nil {
		t.Fatal(err)
	}
	x := []float64{1, 2, 9, 9, 9, 9, 3, 4, 9, 9, 9, 9} // rows 0 and 3 are used
	w := []float64{1, 0, 0, 1}                         // identity
	got := refStrided(g, x, w, []float64{0.5, -0.5})
	want := []float64{math.Tanh(1.5), math.Tanh(1.5), math.Tanh(3.5), math.Tanh(3.5)}
	if e := RelErr(got, want); e > 1e-12 {
		t.Errorf("rows GEMM = %v, want %v", got, want)
	}
}

// Inconsistent attention shapes, views and strides are refused with
// ErrShape and a message naming the problem.
func TestAttentionBadShapes(t *testing.T) {
	good := Attention{Seqs: 2, Seq: 8, Heads: 2, HeadDim: 4, In: BF16}
	for name, c := range map[string]struct {
		a    Attention
		want string
	}{
		"zero heads":        {Attention{Seqs: 2, Seq: 8, HeadDim: 4, In: BF16}, "must be positive"},
		"negative seq":      {Attention{Seqs: 2, Seq: -1, Heads: 2, HeadDim: 4, In: BF16}, "must be positive"},
		"short QKV rows":    {Attention{Seqs: 2, Seq: 8, Heads: 2, HeadDim: 4, QKVStride: 20, In: BF16}, "shorter than Q, K and V"},
		"f32 inputs":        {Attention{Seqs: 2, Seq: 8, Heads: 2, HeadDim: 4, In: F32}, "bf16 or f16"},
		"non-finite scale":  {Attention{Seqs: 2, Seq: 8, Heads: 2, HeadDim: 4, In: BF16, Scale: float32(math.Inf(1))}, "not finite"},
		"negative QKV rows": {Attention{Seqs: 2, Seq: 8, Heads: 2, HeadDim: 4, QKVStride: -3, In: BF16}, "shorter than"},
	} {
		for _, f := range []func() (StridedGEMM, error){c.a.Scores, c.a.Context} {
			if _, err := f(); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: err = %v, want ErrShape mentioning %q", name, err, c.want)
			}
		}
	}
	sc, _ := good.Scores()
	cx, _ := good.Context()
	for name, c := range map[string]struct {
		op   StridedGEMM
		want string
	}{
		"V past its buffer":  {func() StridedGEMM { g := cx; g.B.Elems--; return g }(), "past the buffer"},
		"B row too short":    {func() StridedGEMM { g := sc; g.B.LD = 3; return g }(), "row stride 3 is shorter"},
		"heads overlap in C": {func() StridedGEMM { g := cx; g.C.Inner = 2; return g }(), "overlap"},
		"C rows overlap":     {func() StridedGEMM { g := cx; g.C.LD = 2; return g }(), "row stride 2 is shorter"},
		"C heads collide":    {func() StridedGEMM { g := cx; g.C.Inner = 0; return g }(), "overlap"},
		"C not covered":      {func() StridedGEMM { g := sc; g.C.Elems++; return g }(), "must tile the output"},
		"negative stride":    {func() StridedGEMM { g := sc; g.A.Outer = -1; return g }(), "must not be negative"},
		"zero K":             {func() StridedGEMM { g := sc; g.K = 0; return g }(), "must be positive"},
		"f32 inputs":         {func() StridedGEMM { g := sc; g.In = F32; return g }(), "bf16 or f16"},
		"unknown act":        {func() StridedGEMM { g := sc; g.Act = Act(42); return g }(), "act known"},
		"NaN scale":          {func() StridedGEMM { g := sc; g.Scale = float32(math.NaN()); return g }(), "not finite"},
	} {
		if _, err := spec(c.op); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrShape mentioning %q", name, err, c.want)
		}
	}
	if _, err := RowsGEMM(0, 3, 4, 4, BF16, BF16, false, ActNone); !errors.Is(err, ErrShape) {
		t.Errorf("rows GEMM with no rows: %v", err)
	}
}

// The views' layout properties the kernel relies on: wide loads only where
// every row is 16-byte aligned, and C views that cover their buffer once.
func TestStridedGEMMLayout(t *testing.T) {
	bert := Attention{Seqs: 1, Seq: 128, Heads: 12, HeadDim: 64, In: BF16}
	sc, err := bert.Scores()
	if err != nil {
		t.Fatal(err)
	}
	cx, _ := bert.Context()
	if a, b, c := sc.vec(); !a || !b || !c {
		t.Errorf("BERT-base scores: vector paths %v %v %v, want all", a, b, c)
	}
	if a, b, c := cx.vec(); !a || !b || !c {
		t.Errorf("BERT-base context: vector paths %v %v %v, want all", a, b, c)
	}
	if sc.Scale != 0.125 || !sc.TransB || cx.TransB {
		t.Errorf("scores scale %g transB %v, context transB %v", sc.Scale, sc.TransB, cx.TransB)
	}
	odd := Attention{Seqs: 1, Seq: 9, Heads: 2, HeadDim: 6, In: BF16}
	os, _ := odd.Scores()
	if a, b, _ := os.vec(); a || b {
		t.Errorf("head dim 6: vector loads %v %v, want scalar", a, b)
	}
	// FLOPs: 2·S²·d per head for each GEMM; the grid covers the tiles.
	if want := 2.0 * 128 * 128 * 64 * 12; sc.FLOPs() != want || cx.FLOPs() != want {
		t.Errorf("FLOPs %g and %g, want %g", sc.FLOPs(), cx.FLOPs(), want)
	}
	if g := sc.Geometry().Grid; g.X != 2 || g.Y != 2 || g.Z != 12 {
		t.Errorf("scores grid %v, want 2x2x12", g)
	}
	if g := cx.Geometry().Grid; g.X != 1 || g.Y != 2 || g.Z != 12 {
		t.Errorf("context grid %v, want 1x2x12", g)
	}
	// Every element of a C view is written exactly once.
	for _, g := range []StridedGEMM{sc, cx} {
		small := g
		seen := make([]int, g.C.Elems)
		for o := range small.outer() {
			for i := range small.inner() {
				for m := range small.M {
					for n := range small.N {
						seen[small.C.at(o, i, m, n)]++
					}
				}
			}
		}
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("%s: element %d written %d times", g.Shape(), i, c)
			}
		}
	}
	if !strings.HasPrefix(sc.Kernel(), "sgemm_bf16_nt") || !strings.HasPrefix(cx.Kernel(), "sgemm_bf16_nn") {
		t.Errorf("kernel names %s, %s", sc.Kernel(), cx.Kernel())
	}
}

// tanh is an elementwise kernel (the BERT pooler's activation).
func TestTanhElementwise(t *testing.T) {
	op := Elementwise{Name: "tanh", Elems: 10, Inputs: 1, In: BF16}
	b, err := Alloc(newFake(), op, 5)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Reference(op, b)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range b.T[0].Host {
		if out[0][i] != math.Tanh(v) {
			t.Fatalf("tanh(%g) = %g", v, out[0][i])
		}
	}
	if ActTanh.String() != "tanh" {
		t.Errorf("ActTanh prints as %q", ActTanh)
	}
}

// The strided GEMM pairs with the other families in padded launches, as HP
// or BE; a pair module holds the GEMM family's source once.
func TestStridedGEMMPadded(t *testing.T) {
	dev := newFake()
	lib := New(dev)
	sc, err := Attention{Seqs: 1, Seq: 128, Heads: 12, HeadDim: 64, In: BF16}.Scores()
	if err != nil {
		t.Fatal(err)
	}
	gm := GEMM{M: 256, N: 256, K: 64, In: BF16, Out: BF16}
	sb, _ := Alloc(dev, sc, 1)
	gb, _ := Alloc(dev, gm, 2)
	ctl := Control{Flag: gpu.HostWord{Index: 1, Dev: 0x1000}, Counter: 0x2000, Done: gpu.HostWord{Index: 2, Dev: 0x1004}, Workers: 7}
	for _, c := range []struct {
		hp, be   Op
		hb, bb   Buffers
		hpBlocks int
	}{{sc, gm, sb, gb, 48}, {gm, sc, gb, sb, 16}} {
		l, err := lib.LaunchPadded(c.hp, c.hb, Control{}, 0, c.be, c.bb, ctl)
		if err != nil {
			t.Fatalf("%s + %s: %v", c.hp.Kernel(), c.be.Kernel(), err)
		}
		if l.Grid.Count() != c.hpBlocks || l.Pad == nil || l.Pad.Grid.Count() != 7 {
			t.Errorf("%s + %s: %d HP blocks, pad %+v", c.hp.Kernel(), c.be.Kernel(), l.Grid.Count(), l.Pad)
		}
		if want := 2*CtlBytes + paramBytes["GemmP"] + paramBytes["SgemmP"]; len(l.Args.Bytes()) != want {
			t.Errorf("%s + %s: %d argument bytes, want %d", c.hp.Kernel(), c.be.Kernel(), len(l.Args.Bytes()), want)
		}
		src, err := PairSource(c.hp, c.be)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(src, "struct GemmP {") != 1 || strings.Count(src, "struct SgemmP {") != 1 {
			t.Errorf("%s + %s: pair source has the GEMM family %d times, the strided GEMM %d times", c.hp.Kernel(), c.be.Kernel(),
				strings.Count(src, "struct GemmP {"), strings.Count(src, "struct SgemmP {"))
		}
	}
}
