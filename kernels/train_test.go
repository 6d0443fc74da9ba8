package kernels

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func init() {
	// C sizes of the training parameter structs (cuda/train.cu).
	for k, v := range map[string]int{"BnPartP": 64, "BnFinP": 48, "BnApP": 64, "BnBwP": 96, "XentP": 32, "XentBwP": 40,
		"ColSumP": 24, "PoolBwP": 72, "SgdP": 56, "SplitSumP": 32} {
		paramBytes[k] = v
	}
}

func TestTrainBadShapes(t *testing.T) {
	for _, op := range []Op{
		BNStats{Pixels: 0, C: 4, In: BF16},
		BNStats{Pixels: 4, C: 4, In: I32},
		BNStats{Pixels: 4, C: 4, In: BF16, Backward: true, Act: ActGELU},
		BNFinalize{Pixels: 4, C: 0},
		BNApply{Pixels: 4, C: -1, In: BF16},
		BNApply{Pixels: 4, C: 4, In: BF16, Act: ActReLU6},
		BNBackward{Pixels: 4, C: 4, In: I32},
		XentLoss{Rows: 0, Classes: 10, In: BF16},
		XentBackward{Rows: 2, Classes: 0, In: BF16},
		ColumnSum{Rows: 2, Cols: 0, In: F32},
		PoolBackward{Pool{N: 1, H: 2, W: 2, C: 3, R: 5, S: 5, In: BF16}},
		PoolBackward{Pool{N: 1, H: 8, W: 8, C: 3, R: 2, S: 2, Pad: 2, In: BF16}},
		SGD{Elems: 0, In: BF16},
		SGD{Elems: 4, In: BF16, LR: -1},
		SplitSum{Parts: 0, Elems: 4, Out: BF16},
		Conv2D{N: 4, H: 8, W: 8, C: 3, OutC: 4, R: 3, S: 3, In: BF16, BackwardFilter: true, Split: 3}, // 4 images in 3 splits
		Conv2D{N: 4, H: 8, W: 8, C: 3, OutC: 4, R: 3, S: 3, In: BF16, BackwardData: true, Split: 2},
		Conv2D{N: 4, H: 8, W: 8, C: 3, OutC: 4, R: 3, S: 3, In: BF16, BackwardFilter: true, Split: -1},
	} {
		if _, err := Tensors(op); !errors.Is(err, ErrShape) {
			t.Errorf("%s %s: %v, want ErrShape", op.Kernel(), op.Shape(), err)
		}
	}
}

// ref runs Reference on op with the given input values (in operand order,
// outputs skipped).
func trainRef(t *testing.T, op Op, inputs ...[]float64) [][]float64 {
	t.Helper()
	specs, err := Tensors(op)
	if err != nil {
		t.Fatal(err)
	}
	b := Buffers{T: make([]Tensor, len(specs))}
	i := 0
	for j, s := range specs {
		b.T[j] = Tensor{TensorSpec: s}
		if s.Role != Output {
			b.T[j].Host = inputs[i]
			i++
		}
	}
	out, err := Reference(op, b)
	if err != nil {
		t.Fatalf("%s: %v", op.Kernel(), err)
	}
	return out
}

func randVals(rng *rand.Rand, n int, scale, shift float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = (rng.Float64()*2-1)*scale + shift
	}
	return v
}

// Batch norm forward through the three kernels normalises each channel to
// mean β and standard deviation γ; its backward matches finite
// differences of L = Σ w·y.
func TestBatchNormReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const P, C = 600, 5 // three chunks, the last partial
	x := randVals(rng, P*C, 2, 0.5)
	gamma, beta := randVals(rng, C, 1, 1.5), randVals(rng, C, 1, 0)
	forward := func(x []float64, act Act) ([]float64, []float64) {
		part := trainRef(t, BNStats{Pixels: P, C: C, In: F32}, x)[0]
		st := trainRef(t, BNFinalize{Pixels: P, C: C}, part)[0]
		return trainRef(t, BNApply{Pixels: P, C: C, In: F32, Act: act}, x, st, gamma, beta)[0], st
	}
	y, st := forward(x, ActNone)
	for ch := range C {
		m, v := 0.0, 0.0
		for p := range P {
			m += y[p*C+ch]
		}
		m /= P
		for p := range P {
			v += (y[p*C+ch] - m) * (y[p*C+ch] - m)
		}
		if sd := math.Sqrt(v / P); math.Abs(m-beta[ch]) > 1e-6 || math.Abs(sd-math.Abs(gamma[ch])) > 1e-4 {
			t.Errorf("channel %d: mean %.6f sd %.6f, want %.6f and %.6f", ch, m, sd, beta[ch], math.Abs(gamma[ch]))
		}
	}
	// Backward with ReLU against finite differences.
	w := randVals(rng, P*C, 1, 0)
	loss := func(x []float64) float64 {
		y, _ := forward(x, ActReLU)
		s := 0.0
		for i := range y {
			s += w[i] * y[i]
		}
		return s
	}
	yr, _ := forward(x, ActReLU)
	part := trainRef(t, BNStats{Pixels: P, C: C, In: F32, Backward: true, Act: ActReLU}, x, w, yr, st)[0]
	g := trainRef(t, BNFinalize{Pixels: P, C: C, Grad: true}, part)
	dx := trainRef(t, BNBackward{Pixels: P, C: C, In: F32, Act: ActReLU, Residual: true}, w, yr, x, st, g[0], g[1], gamma)
	for _, i := range []int{0, 7, 333, P*C - 1} {
		if yr[i] == 0 {
			continue // at the ReLU's kink side: dx is 0 there and so is the difference quotient (checked below)
		}
		h := 1e-6
		xp := append([]float64(nil), x...)
		xp[i] += h
		xm := append([]float64(nil), x...)
		xm[i] -= h
		num := (loss(xp) - loss(xm)) / (2 * h)
		if math.Abs(num-dx[0][i]) > 1e-5*math.Max(1, math.Abs(num)) {
			t.Errorf("dx[%d] = %.8f, finite difference %.8f", i, dx[0][i], num)
		}
		if want := w[i]; dx[1][i] != want {
			t.Errorf("dshort[%d] = %v, want dy %v", i, dx[1][i], want)
		}
	}
	// dβ = Σ dz, checked directly.
	for ch := range C {
		s := 0.0
		for p := range P {
			if yr[p*C+ch] > 0 {
				s += w[p*C+ch]
			}
		}
		if math.Abs(s-g[1][ch]) > 1e-9 {
			t.Errorf("dβ[%d] = %v, want %v", ch, g[1][ch], s)
		}
	}
}

func TestXentReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const R, K = 4, 7
	x := randVals(rng, R*K, 3, 0)
	labels := []float64{0, 6, 3, 3}
	loss := trainRef(t, XentLoss{Rows: R, Classes: K, In: F32}, x, labels)[0]
	probs := trainRef(t, Softmax{Rows: R, Cols: K, In: F32}, x)[0]
	d := trainRef(t, XentBackward{Rows: R, Classes: K, In: F32}, probs, labels)[0]
	for r := range R {
		if want := -math.Log(probs[r*K+int(labels[r])]); math.Abs(loss[r]-want) > 1e-12 {
			t.Errorf("row %d: loss %v, want −log p = %v", r, loss[r], want)
		}
		s := 0.0
		for j := range K {
			s += d[r*K+j]
		}
		if math.Abs(s) > 1e-12 || d[r*K+int(labels[r])] >= 0 {
			t.Errorf("row %d: gradient sums to %v, label entry %v (want 0 and negative)", r, s, d[r*K+int(labels[r])])
		}
	}
	for _, bad := range [][]float64{{0, 7, 1, 1}, {-1, 0, 0, 0}} {
		for _, op := range []Op{XentLoss{Rows: R, Classes: K, In: F32}, XentBackward{Rows: R, Classes: K, In: F32}} {
			specs, _ := Tensors(op)
			b := Buffers{T: []Tensor{{TensorSpec: specs[0], Host: x}, {TensorSpec: specs[1], Host: bad}, {TensorSpec: specs[2]}}}
			if _, err := Reference(op, b); !errors.Is(err, ErrLabels) {
				t.Errorf("%s with labels %v: %v, want ErrLabels", op.Kernel(), bad, err)
			}
		}
	}
}

// Pooling backward is the adjoint of average pooling (⟨pool(x), dy⟩ =
// ⟨x, pool_bwd(dy)⟩) and routes max pooling's gradient to the first maxima.
func TestPoolBackwardReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, q := range []Pool{
		{N: 2, H: 9, W: 9, C: 3, R: 3, S: 3, Stride: 2, Pad: 1, In: F32},
		{N: 2, H: 4, W: 4, C: 5, R: 4, S: 4, Stride: 1, In: F32},
	} {
		x := randVals(rng, q.N*q.H*q.W*q.C, 1, 0)
		dy := randVals(rng, q.outputs(), 1, 0)
		y := trainRef(t, q, x)[0]
		dx := trainRef(t, PoolBackward{q}, dy)[0]
		a, b := 0.0, 0.0
		for i := range y {
			a += y[i] * dy[i]
		}
		for i := range x {
			b += x[i] * dx[i]
		}
		if math.Abs(a-b) > 1e-9 {
			t.Errorf("%s: ⟨pool(x), dy⟩ = %v, ⟨x, pool_bwd(dy)⟩ = %v", q.Shape(), a, b)
		}
	}
	q := Pool{N: 1, H: 3, W: 3, C: 1, R: 3, S: 3, Stride: 1, Max: true, In: F32}
	x := []float64{1, 5, 5, 0, 2, 5, 1, 1, 1} // three tied maxima: the first in scan order wins
	dx := trainRef(t, PoolBackward{q}, []float64{2}, x)[0]
	if want := []float64{0, 2, 0, 0, 0, 0, 0, 0, 0}; !equalF(dx, want) {
		t.Errorf("max pool backward %v, want %v", dx, want)
	}
}

func TestSGDAndColumnSumReference(t *testing.T) {
	out := trainRef(t, SGD{Elems: 2, In: F32, LR: 0.5, Momentum: 0.5}, []float64{1, 2}, []float64{0.5, -1}, []float64{1, 0})
	if !equalF(out[0], []float64{0.5, 2.5}) || !equalF(out[1], []float64{1, -1}) {
		t.Errorf("SGD: w %v m %v, want [0.5 2.5] and [1 -1]", out[0], out[1])
	}
	s := trainRef(t, ColumnSum{Rows: 3, Cols: 2, In: F32}, []float64{1, 2, 3, 4, 5, 6})[0]
	if !equalF(s, []float64{9, 12}) {
		t.Errorf("column sum %v, want [9 12]", s)
	}
}

func equalF(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-12 {
			return false
		}
	}
	return true
}

// The split wgrad's partials add up to the unsplit wgrad.
func TestSplitWgradReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	c := Conv2D{N: 6, H: 7, W: 7, C: 5, OutC: 4, R: 3, S: 3, Stride: 2, Pad: 1, In: BF16, BackwardFilter: true}
	oh, ow := c.Out()
	x := randVals(rng, c.N*c.H*c.W*c.C, 1, 0)
	dy := randVals(rng, c.N*oh*ow*c.OutC, 1, 0)
	whole := trainRef(t, c, x, dy)[0]
	c.Split = 3
	part := trainRef(t, c, x, dy)[0]
	sum := trainRef(t, SplitSum{Parts: 3, Elems: len(whole), Out: F32}, part)[0]
	if e := RelErr(sum, whole); e > 1e-12 {
		t.Errorf("split wgrad summed: relative error %g against the unsplit wgrad", e)
	}
	if e := RelErr(part[:len(whole)], whole); e < 0.1 {
		t.Errorf("the first partial is %g from the whole: not a partial sum", e)
	}
	if g := c.Geometry().Grid; g.Z != 3 {
		t.Errorf("split wgrad grid %v, want z = 3", g)
	}
}

// Options.Only selects kernels by any of its comma-separated substrings.
func TestSelfTestOnly(t *testing.T) {
	for _, c := range []struct {
		only string
		op   Op
		want bool
	}{
		{"", GEMM{M: 8, N: 8, K: 8, In: BF16, Out: BF16}, true},
		{"bn_,xent", XentLoss{Rows: 1, Classes: 2, In: BF16}, true},
		{"bn_,xent", BNFinalize{Pixels: 1, C: 1}, true},
		{"bn_,xent", GEMM{M: 8, N: 8, K: 8, In: BF16, Out: BF16}, false},
		{",", SGD{Elems: 1, In: F32}, false},
	} {
		r := &runner{only: c.only}
		if got := r.selected(c.op); got != c.want {
			t.Errorf("Only %q, %s: selected %v, want %v", c.only, c.op.Kernel(), got, c.want)
		}
	}
}
