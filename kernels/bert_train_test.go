package kernels

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func init() {
	// C sizes of the BERT training parameter structs (cuda/bert_train.cu).
	for k, v := range map[string]int{"ActBwP": 40, "SmBwP": 40, "LnBwP": 56, "LnPartP": 48, "EmbBwP": 48, "ClsP": 32, "TrP": 32, "AdamP": 112, "Cat3P": 48, "EmbAddP": 48} {
		paramBytes[k] = v
	}
}

func TestBERTTrainBadShapes(t *testing.T) {
	for _, op := range []Op{
		ActBackward{Elems: 0, Act: ActGELU, In: BF16},
		ActBackward{Elems: 4, Act: ActReLU, In: BF16},
		ActBackward{Elems: 4, Act: ActGELU, In: I32},
		SoftmaxBackward{Rows: 0, Cols: 4, In: BF16},
		SoftmaxBackward{Rows: 2, Cols: 4, In: BF16, Scale: -1},
		LayerNormBackward{Rows: 2, Cols: 0, In: BF16},
		LNGradPartial{Rows: 2, Cols: 4, In: I32},
		ColumnPartial{Rows: 0, Cols: 4, In: BF16},
		EmbeddingBackward{Tokens: 4, Seq: 0, Cols: 4, Rows: 4, In: BF16},
		EmbeddingBackward{Tokens: 4, Seq: 2, Cols: 4, Rows: 4, Table: EmbedTable(7), In: BF16},
		CLSScatter{Seqs: 1, Seq: 0, Cols: 4, In: BF16},
		Transpose{Batch: -1, Rows: 2, Cols: 2, In: BF16},
		Adam{Elems: 0, In: F32, Grad: F32},
		Adam{Elems: 4, In: F32, Grad: I32},
		Adam{Elems: 4, In: F32, Grad: F32, Beta1: 1},
		Adam{Elems: 4, In: F32, Grad: F32, LR: -1},
	} {
		if _, err := Tensors(op); !errors.Is(err, ErrShape) {
			t.Errorf("%s %s: %v, want ErrShape", op.Kernel(), op.Shape(), err)
		}
	}
}

// Every BERT training op has a spec, a CUDA body in the embedded source
// and a CPU reference.
func TestBERTTrainSpecs(t *testing.T) {
	for _, op := range bertTrainCheckOps() {
		src, err := Source(op)
		if err != nil {
			t.Fatalf("%s: %v", op.Kernel(), err)
		}
		k, _ := spec(op)
		body := k.body[:strings.IndexByte(k.body, '<')]
		if !strings.Contains(src, "void "+body+"(") || !strings.Contains(src, "FORMS("+op.Kernel()+",") {
			t.Errorf("%s: source lacks %s or its FORMS", op.Kernel(), body)
		}
		b, err := Alloc(newFake(), op, 1)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Reference(op, b)
		if err != nil {
			t.Fatalf("%s: %v", op.Kernel(), err)
		}
		if len(out) != len(b.Outputs()) {
			t.Errorf("%s: %d reference outputs for %d output tensors", op.Kernel(), len(out), len(b.Outputs()))
		}
		for i, o := range b.Outputs() {
			if len(out[i]) != o.Elems {
				t.Errorf("%s: output %s has %d values, want %d", op.Kernel(), o.Name, len(out[i]), o.Elems)
			}
		}
	}
	for _, want := range BERTTrainOps {
		found := false
		for _, op := range bertTrainCheckOps() {
			if strings.HasPrefix(op.Kernel(), strings.Split(want.Kernel(), "_")[0]) {
				found = true
			}
		}
		if !found {
			t.Errorf("no self-test case for %T", want)
		}
	}
}

// The activation and softmax backward references match finite differences
// of the forward formulas.
func TestActSoftmaxBackwardReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const h = 1e-6
	x, dy := randVals(rng, 200, 3, 0), randVals(rng, 200, 1, 0)
	gelu := trainRef(t, ActBackward{Elems: 200, Act: ActGELU, In: F32}, dy, x)[0]
	y := make([]float64, 200)
	for i, v := range x {
		y[i] = math.Tanh(v)
	}
	tanh := trainRef(t, ActBackward{Elems: 200, Act: ActTanh, In: F32}, dy, y)[0]
	for i, v := range x {
		if want := dy[i] * (act(v+h, ActGELU) - act(v-h, ActGELU)) / (2 * h); math.Abs(gelu[i]-want) > 1e-6 {
			t.Fatalf("gelu' at %g: %g, want %g", v, gelu[i]/dy[i], want/dy[i])
		}
		if want := dy[i] * (math.Tanh(v+h) - math.Tanh(v-h)) / (2 * h); math.Abs(tanh[i]-want) > 1e-6 {
			t.Fatalf("tanh' at %g: %g, want %g", v, tanh[i]/dy[i], want/dy[i])
		}
	}
	// Softmax: L = Σ dy·softmax(scale'·z); dL/dz = scale'·(the reference at scale 1).
	const rows, cols = 3, 17
	z, d := randVals(rng, rows*cols, 2, 0), randVals(rng, rows*cols, 1, 0)
	sm := func(z []float64) []float64 { return softmaxRows(z, rows, cols) }
	dz := trainRef(t, SoftmaxBackward{Rows: rows, Cols: cols, In: F32, Scale: 0.5}, d, sm(z))[0]
	loss := func(z []float64) float64 {
		s := 0.0
		for i, v := range sm(z) {
			s += d[i] * v
		}
		return s
	}
	for i := range z {
		zp, zm := append([]float64(nil), z...), append([]float64(nil), z...)
		zp[i] += h
		zm[i] -= h
		if want := 0.5 * (loss(zp) - loss(zm)) / (2 * h); math.Abs(dz[i]-want) > 1e-6 {
			t.Fatalf("softmax backward [%d]: %g, want %g", i, dz[i], want)
		}
	}
}

func softmaxRows(z []float64, rows, cols int) []float64 {
	y := make([]float64, len(z))
	for r := range rows {
		m := math.Inf(-1)
		for _, v := range z[r*cols : (r+1)*cols] {
			m = math.Max(m, v)
		}
		s := 0.0
		for j := range cols {
			y[r*cols+j] = math.Exp(z[r*cols+j] - m)
			s += y[r*cols+j]
		}
		for j := range cols {
			y[r*cols+j] /= s
		}
	}
	return y
}

// Layernorm backward (dx, and dγ, dβ through the partials and
// bn_finalize_grad) matches finite differences of L = Σ dy·layernorm(x).
func TestLayerNormBackwardReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const rows, cols, h = 300, 9, 1e-6 // 300 rows: two partial chunks
	x, dy := randVals(rng, rows*cols, 2, 0.5), randVals(rng, rows*cols, 1, 0)
	gamma, beta := randVals(rng, cols, 0.5, 1), randVals(rng, cols, 0.5, 0)
	fwd := func(x, gamma, beta []float64) float64 {
		y := trainRef(t, LayerNorm{Rows: rows, Cols: cols, In: F32}, x, gamma, beta)[0]
		s := 0.0
		for i, v := range y {
			s += dy[i] * v
		}
		return s
	}
	out := trainRef(t, LayerNormBackward{Rows: rows, Cols: cols, In: F32}, dy, x, gamma)
	dx, st := out[0], out[1]
	part := trainRef(t, LNGradPartial{Rows: rows, Cols: cols, In: F32}, dy, x, st)[0]
	fin := trainRef(t, BNFinalize{Pixels: rows, C: cols, Grad: true}, part)
	dgamma, dbeta := fin[0], fin[1]
	num := func(v []float64, i int, f func() float64) float64 {
		old := v[i]
		v[i] = old + h
		p := f()
		v[i] = old - h
		m := f()
		v[i] = old
		return (p - m) / (2 * h)
	}
	f := func() float64 { return fwd(x, gamma, beta) }
	for _, i := range []int{0, 5, cols + 3, 17 * cols, rows*cols - 1} {
		if want := num(x, i, f); math.Abs(dx[i]-want) > 1e-5*(1+math.Abs(want)) {
			t.Errorf("dx[%d] = %g, want %g", i, dx[i], want)
		}
	}
	for j := range cols {
		if want := num(gamma, j, f); math.Abs(dgamma[j]-want) > 1e-5*(1+math.Abs(want)) {
			t.Errorf("dγ[%d] = %g, want %g", j, dgamma[j], want)
		}
		if want := num(beta, j, f); math.Abs(dbeta[j]-want) > 1e-5*(1+math.Abs(want)) {
			t.Errorf("dβ[%d] = %g, want %g", j, dbeta[j], want)
		}
	}
}

// The embedding gradients are the adjoints of the lookups: <gather(T),
// dy> = <T, embed_bwd(dy)> for the word, position and type tables.
func TestEmbeddingBackwardReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const tokens, seq, cols, vocab = 40, 10, 6, 13
	dy := randVals(rng, tokens*cols, 1, 0)
	ids := make([]float64, tokens)
	for i := range ids {
		ids[i] = float64(rng.IntN(vocab + 2)) // some out of range: no row
	}
	for _, tc := range []struct {
		table EmbedTable
		rows  int
		key   func(tok int) int
	}{
		{EmbedWord, vocab, func(tok int) int { return int(ids[tok]) }},
		{EmbedPosition, seq + 3, func(tok int) int { return tok % seq }},
		{EmbedType, 2, func(int) int { return 0 }},
	} {
		op := EmbeddingBackward{Tokens: tokens, Seq: seq, Cols: cols, Rows: tc.rows, Table: tc.table, In: F32}
		var got []float64
		if tc.table == EmbedWord {
			got = trainRef(t, op, dy, ids)[0]
		} else {
			got = trainRef(t, op, dy)[0]
		}
		table := randVals(rng, tc.rows*cols, 1, 0)
		a, b := 0.0, 0.0
		for tok := range tokens {
			if k := tc.key(tok); k >= 0 && k < tc.rows {
				for j := range cols {
					a += table[k*cols+j] * dy[tok*cols+j]
				}
			}
		}
		for i := range table {
			b += table[i] * got[i]
		}
		if math.Abs(a-b) > 1e-9*(1+math.Abs(a)) {
			t.Errorf("%s table: <gather(T), dy> = %g, <T, embed_bwd(dy)> = %g", tc.table, a, b)
		}
	}
}

// Transpose twice is the identity; the [CLS] scatter puts each sequence's
// row first and zeros elsewhere.
func TestTransposeCLSReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	x := randVals(rng, 3*4*5, 1, 0)
	y := trainRef(t, Transpose{Batch: 3, Rows: 4, Cols: 5, In: F32}, x)[0]
	if y[1*20+2*4+3] != x[1*20+3*5+2] {
		t.Errorf("transpose: y[1][2][3] = %g, want x[1][3][2] = %g", y[1*20+2*4+3], x[1*20+3*5+2])
	}
	if z := trainRef(t, Transpose{Batch: 3, Rows: 5, Cols: 4, In: F32}, y)[0]; RelErr(z, x) != 0 {
		t.Errorf("transpose twice differs from the input")
	}
	cls := randVals(rng, 2*3, 1, 0)
	d := trainRef(t, CLSScatter{Seqs: 2, Seq: 4, Cols: 3, In: F32}, cls)[0]
	for tok := range 8 {
		for j := range 3 {
			want := 0.0
			if tok%4 == 0 {
				want = cls[(tok/4)*3+j]
			}
			if d[tok*3+j] != want {
				t.Fatalf("cls scatter [%d][%d] = %g, want %g", tok, j, d[tok*3+j], want)
			}
		}
	}
}

// Adam's first step moves every weight by about LR against its gradient's
// sign (m̂ = g, v̂ = g²); later steps follow the recurrences.
func TestAdamReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const n = 100
	w, g := randVals(rng, n, 1, 0), randVals(rng, n, 1, 0)
	zero := make([]float64, n)
	op := Adam{Elems: n, In: F32, Grad: F32, LR: 1e-3}
	out := trainRef(t, op, w, g, zero, zero)
	for i := range n {
		step := w[i] - out[0][i]
		if want := 1e-3 * math.Copysign(1, g[i]); math.Abs(step-want) > 1e-3*1e-8/math.Abs(g[i])+1e-7 { // ε, and the fp32 weight's rounding
			t.Fatalf("first step of weight %d: %g, want about %g", i, step, want)
		}
		if math.Abs(out[1][i]-0.1*g[i]) > 1e-7 || math.Abs(out[2][i]-0.001*g[i]*g[i]) > 1e-7 {
			t.Fatalf("moments of %d: m %g v %g", i, out[1][i], out[2][i])
		}
	}
	// Step 2 from those moments: the bias corrections change.
	op.Step = 2
	out2 := trainRef(t, op, out[0], g, out[1], out[2])
	for i := range n {
		m := 0.9*out[1][i] + 0.1*g[i]
		v := 0.999*out[2][i] + 0.001*g[i]*g[i]
		want := out[0][i] - 1e-3*(m/(1-0.81))/(math.Sqrt(v/(1-0.999*0.999))+1e-8)
		if math.Abs(out2[0][i]-want) > 1e-6*(1+math.Abs(want)) {
			t.Fatalf("second step of weight %d: %g, want %g", i, out2[0][i], want)
		}
	}
}

// The attention backward GEMMs, as views over QKV and the heads-merged
// context gradient, compute dP = dC·Vᵀ, dV = Pᵀ·dC, dQ = dS·K and
// dK = dSᵀ·Q per (sequence, head), checked against naive loops.
func TestAttentionBackwardViews(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	a := Attention{Seqs: 2, Seq: 5, Heads: 3, HeadDim: 4, In: BF16}
	dPg, dVg, dQg, dKg, err := a.Backward()
	if err != nil {
		t.Fatal(err)
	}
	s, hd, heads, h := a.Seq, a.HeadDim, a.Heads, a.Heads*a.HeadDim
	tokens, batch := a.Seqs*s, a.Seqs*a.Heads
	qkv, dc := randVals(rng, tokens*3*h, 1, 0), randVals(rng, tokens*h, 1, 0)
	p, ds := randVals(rng, batch*s*s, 1, 0), randVals(rng, batch*s*s, 1, 0)
	tr := func(x []float64) []float64 {
		return trainRef(t, Transpose{Batch: batch, Rows: s, Cols: s, In: F32}, x)[0]
	}
	dP := trainRef(t, dPg, dc, qkv)[0]
	dV := trainRef(t, dVg, tr(p), dc)[0]
	dQ := trainRef(t, dQg, ds, qkv)[0]
	dK := trainRef(t, dKg, tr(ds), qkv)[0]
	at := func(part, tok, head, j int) float64 { return qkv[tok*3*h+part*h+head*hd+j] }
	for b := range batch {
		n, head := b/heads, b%heads
		for i := range s {
			for j := range s {
				want := 0.0
				for k := range hd {
					want += dc[(n*s+i)*h+head*hd+k] * at(2, n*s+j, head, k)
				}
				if got := dP[(b*s+i)*s+j]; math.Abs(got-want) > 1e-12 {
					t.Fatalf("dP[%d][%d][%d] = %g, want %g", b, i, j, got, want)
				}
			}
			for k := range hd {
				var v, q, kk float64
				for j := range s {
					v += p[(b*s+j)*s+i] * dc[(n*s+j)*h+head*hd+k]
					q += ds[(b*s+i)*s+j] * at(1, n*s+j, head, k)
					kk += ds[(b*s+j)*s+i] * at(0, n*s+j, head, k)
				}
				o := (n*s+i)*h + head*hd + k
				if math.Abs(dV[o]-v) > 1e-12 || math.Abs(dQ[o]-q) > 1e-12 || math.Abs(dK[o]-kk) > 1e-12 {
					t.Fatalf("seq %d head %d row %d col %d: dV %g/%g dQ %g/%g dK %g/%g", n, head, i, k, dV[o], v, dQ[o], q, dK[o], kk)
				}
			}
		}
	}
}

// 16-bit weights keep an fp32 master (w + r): updates far below a bf16
// step accumulate in r and move w once they add up, as fp32 master
// weights do.
func TestAdamMasterWeights(t *testing.T) {
	op := Adam{Elems: 1, In: BF16, Grad: F32, LR: 1e-4}
	w, r, m, v := []float64{1}, []float64{0}, []float64{0}, []float64{0}
	for step := 1; step <= 40; step++ {
		op.Step = step
		out := trainRef(t, op, w, []float64{1}, m, v, r)
		w, m, v, r = out[0], out[1], out[2], out[3]
		if step == 1 && w[0] != 1 {
			t.Fatalf("one update of 1e-4 moved the bf16 weight 1 to %g (a bf16 step at 1 is 2^-7)", w[0])
		}
	}
	if master := w[0] + r[0]; math.Abs(master-(1-40e-4)) > 1e-6 {
		t.Errorf("master weight after 40 steps of 1e-4: %g, want %g", master, 1-40e-4)
	}
	if w[0] == 1 {
		t.Errorf("40 updates of 1e-4 (4e-3, half a bf16 step) did not move the bf16 weight")
	}
}

// ColumnPartial's chunks, added up by SplitSum, are the column sums.
func TestColumnPartialReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	const rows, cols = 600, 7
	x := randVals(rng, rows*cols, 1, 0)
	cp := ColumnPartial{Rows: rows, Cols: cols, In: F32}
	part := trainRef(t, cp, x)[0]
	got := trainRef(t, SplitSum{Parts: cp.Splits(), Elems: cols, Out: F32}, part)[0]
	want := trainRef(t, ColumnSum{Rows: rows, Cols: cols, In: F32}, x)[0]
	if cp.Splits() != 3 || RelErr(got, want) > 1e-12 {
		t.Errorf("%d splits; column sums through the partials %v, want %v", cp.Splits(), got, want)
	}
}
