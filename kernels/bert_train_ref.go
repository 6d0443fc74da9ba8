package kernels

import (
	"math"
	"slices"
)

// bertTrainReference computes a BERT training op on the CPU (float64; ok
// false for other ops).
func bertTrainReference(op Op, in func(int) []float64) (out [][]float64, ok bool, err error) {
	switch o := op.(type) {
	case ActBackward:
		dy, x := in(0), in(1)
		dx := make([]float64, o.Elems)
		for i := range dx {
			v := x[i]
			if o.Act == ActTanh {
				dx[i] = dy[i] * (1 - v*v)
				continue
			}
			const c, a = 0.7978845608028654, 0.044715
			t := math.Tanh(c * (v + a*v*v*v))
			dx[i] = dy[i] * (0.5*(1+t) + 0.5*v*(1-t*t)*c*(1+3*a*v*v))
		}
		return [][]float64{dx}, true, nil
	case SoftmaxBackward:
		dy, y := in(0), in(1)
		dx := make([]float64, o.Rows*o.Cols)
		sc := float64(o.scale())
		for r := range o.Rows {
			row := r * o.Cols
			s := 0.0
			for j := range o.Cols {
				s += dy[row+j] * y[row+j]
			}
			for j := range o.Cols {
				dx[row+j] = sc * y[row+j] * (dy[row+j] - s)
			}
		}
		return [][]float64{dx}, true, nil
	case LayerNormBackward:
		dy, x, gamma := in(0), in(1), in(2)
		dx := make([]float64, o.Rows*o.Cols)
		st := make([]float64, 2*o.Rows)
		n := float64(o.Cols)
		for r := range o.Rows {
			xr, dr := x[r*o.Cols:(r+1)*o.Cols], dy[r*o.Cols:(r+1)*o.Cols]
			mean, v := 0.0, 0.0
			for _, e := range xr {
				mean += e
			}
			mean /= n
			for _, e := range xr {
				v += (e - mean) * (e - mean)
			}
			rstd := 1 / math.Sqrt(v/n+LayerNormEps)
			a, b := 0.0, 0.0
			for j := range o.Cols {
				g := dr[j] * gamma[j]
				a += g
				b += g * (xr[j] - mean) * rstd
			}
			a, b = a/n, b/n
			for j := range o.Cols {
				xh := (xr[j] - mean) * rstd
				dx[r*o.Cols+j] = rstd * (dr[j]*gamma[j] - a - xh*b)
			}
			st[2*r], st[2*r+1] = mean, rstd
		}
		return [][]float64{dx, st}, true, nil
	case LNGradPartial:
		dy, x, st := in(0), in(1), in(2)
		part := make([]float64, o.Partials())
		for s := range bnSplits(o.Rows) {
			for r := s * BNChunk; r < min((s+1)*BNChunk, o.Rows); r++ {
				for j := range o.Cols {
					i := r*o.Cols + j
					part[2*s*o.Cols+j] += dy[i]
					part[(2*s+1)*o.Cols+j] += dy[i] * (x[i] - st[2*r]) * st[2*r+1]
				}
			}
		}
		return [][]float64{part}, true, nil
	case ColumnPartial:
		x := in(0)
		part := make([]float64, o.Splits()*o.Cols)
		for r := range o.Rows {
			s := r / BNChunk
			for j := range o.Cols {
				part[s*o.Cols+j] += x[r*o.Cols+j]
			}
		}
		return [][]float64{part}, true, nil
	case EmbeddingBackward:
		dy := in(0)
		var ids []float64
		if o.Table == EmbedWord {
			ids = in(1)
		}
		d := make([]float64, o.Rows*o.Cols)
		for t := range o.Tokens {
			row := 0
			switch o.Table {
			case EmbedWord:
				row = int(ids[t])
			case EmbedPosition:
				row = t % o.Seq
			}
			if row < 0 || row >= o.Rows {
				continue
			}
			for j := range o.Cols {
				d[row*o.Cols+j] += dy[t*o.Cols+j]
			}
		}
		return [][]float64{d}, true, nil
	case CLSScatter:
		src := in(0)
		d := make([]float64, o.elems())
		for n := range o.Seqs {
			copy(d[n*o.Seq*o.Cols:][:o.Cols], src[n*o.Cols:(n+1)*o.Cols])
		}
		return [][]float64{d}, true, nil
	case Transpose:
		x := in(0)
		y := make([]float64, o.elems())
		per := o.Rows * o.Cols
		for b := range max(o.Batch, 1) {
			for r := range o.Rows {
				for c := range o.Cols {
					y[b*per+c*o.Rows+r] = x[b*per+r*o.Cols+c]
				}
			}
		}
		return [][]float64{y}, true, nil
	case Concat3:
		out := make([]float64, 3*o.Rows*o.Cols)
		for p := range 3 {
			src := in(p)
			for r := range o.Rows {
				copy(out[(3*r+p)*o.Cols:][:o.Cols], src[r*o.Cols:(r+1)*o.Cols])
			}
		}
		return [][]float64{out}, true, nil
	case EmbedAdd:
		x, pos := in(0), in(1)
		out := make([]float64, o.Tokens*o.Cols)
		for i := range out {
			t, j := i/o.Cols, i%o.Cols
			out[i] = x[i] + pos[(t%o.Seq)*o.Cols+j]
			if o.Types > 0 {
				out[i] += in(2)[j]
			}
		}
		return [][]float64{out}, true, nil
	case Adam:
		w, g, m, v := in(0), in(1), in(2), in(3)
		lr, b1, b2, eps, _ := o.Hyper()
		c1, c2 := o.corrections()
		f1, f2 := float64(b1), float64(b2)
		var r, ro []float64
		if o.In != F32 {
			r, ro = in(4), make([]float64, o.Elems)
		}
		wo, mo, vo := make([]float64, o.Elems), make([]float64, o.Elems), make([]float64, o.Elems)
		// The kernel's fp32 operations, each rounded as IEEE fp32 rounds
		// it (an operation on fp32 values in float64, rounded once to
		// fp32, is the correctly rounded fp32 result), so that the master
		// weight's residual matches bit for bit.
		f := func(x float64) float64 { return float64(float32(x)) }
		omb1, omb2 := f(1-f1), f(1-f2)
		for i := range wo {
			mm := f(f(f1*m[i]) + f(omb1*g[i]))
			vv := f(f(f2*v[i]) + f(f(omb2*g[i])*g[i]))
			mo[i], vo[i] = mm, vv
			master := w[i]
			if r != nil {
				master = f(w[i] + r[i])
			}
			vh := max(f(vv*float64(c2)), 0)
			upd := f(f(float64(lr)*f(mm*float64(c1))) / f(f(math.Sqrt(vh))+float64(eps)))
			wo[i] = f(master - upd)
			if r != nil {
				nw := wo[i]
				wo[i] = roundTo(o.In, nw)
				ro[i] = f(nw - wo[i])
			}
		}
		if r != nil {
			return [][]float64{wo, mo, vo, ro}, true, nil
		}
		return [][]float64{wo, mo, vo}, true, nil
	}
	return nil, false, nil
}

// roundTo rounds v to a 16-bit type d (bf16 or f16).
func roundTo(d DType, v float64) float64 {
	if d == F16 {
		return float64(F16ToF32(F32ToF16(float32(v))))
	}
	return float64(BF16ToF32(F32ToBF16(float32(v))))
}

// bertTrainCheckOps are the correctness cases of the BERT training kernels:
// every op and variant, sizes off the 1024-element, 64-column and
// 256-row tiles, all float types.
func bertTrainCheckOps() []Op {
	ops := []Op{
		ActBackward{Elems: 5000, Act: ActGELU, In: BF16},
		ActBackward{Elems: 3000, Act: ActTanh, In: F32},
		SoftmaxBackward{Rows: 33, Cols: 128, In: BF16, Scale: 0.125},
		SoftmaxBackward{Rows: 7, Cols: 300, In: F32},
		LayerNormBackward{Rows: 37, Cols: 768, In: BF16},
		LayerNormBackward{Rows: 5, Cols: 300, In: F32},
		LNGradPartial{Rows: 600, Cols: 100, In: BF16},
		LNGradPartial{Rows: 70, Cols: 64, In: F16},
		ColumnPartial{Rows: 600, Cols: 100, In: BF16},
		ColumnPartial{Rows: 8, Cols: 3, In: F32},
		EmbeddingBackward{Tokens: 300, Seq: 50, Cols: 72, Rows: 40, Table: EmbedWord, In: BF16},
		EmbeddingBackward{Tokens: 300, Seq: 50, Cols: 1100, Rows: 64, Table: EmbedPosition, In: BF16},
		EmbeddingBackward{Tokens: 300, Seq: 50, Cols: 72, Rows: 2, Table: EmbedType, In: F32},
		EmbeddingBackward{Tokens: 2200, Seq: 100, Cols: 300, Rows: 300, Table: EmbedWord, In: BF16}, // marks past 2048 tokens scanned again
		CLSScatter{Seqs: 3, Seq: 50, Cols: 72, In: BF16},
		Transpose{Batch: 6, Rows: 50, Cols: 70, In: BF16},
		Adam{Elems: 3000, In: F32, Grad: F32},
		Adam{Elems: 3000, In: BF16, Grad: BF16, LR: 1e-3, Step: 3},
		Concat3{Rows: 50, Cols: 72, In: BF16},
		EmbedAdd{Tokens: 100, Seq: 50, Cols: 72, Positions: 64, Types: 2, In: BF16},
		EmbedAdd{Tokens: 30, Seq: 10, Cols: 20, Positions: 10, In: F32},
	}
	for _, a := range []Attention{
		{Seqs: 2, Seq: 40, Heads: 3, HeadDim: 24, In: BF16},
		{Seqs: 2, Seq: 21, Heads: 2, HeadDim: 20, In: F16},
	} {
		dP, dV, dQ, dK, err := a.Backward()
		if err != nil {
			panic("kernels: bad self-test case: " + err.Error()) // a defect in this table
		}
		ops = append(ops, dP, dV, dQ, dK)
	}
	return ops
}

// bertIdentityOps are the BERT training kernels bertIdentity preempts
// (besides bertIdentityAdam, which updates in place).
func bertIdentityOps() []Op {
	return []Op{
		SoftmaxBackward{Rows: 8 * 12 * 128 * 8, Cols: 128, In: BF16, Scale: 0.125},
		LayerNormBackward{Rows: 1 << 15, Cols: 768, In: BF16},
		LNGradPartial{Rows: 1 << 16, Cols: 768, In: BF16},
		ColumnPartial{Rows: 1 << 16, Cols: 768, In: BF16},
		EmbeddingBackward{Tokens: 1024, Seq: 128, Cols: 768, Rows: 30522, Table: EmbedWord, In: BF16},
		EmbeddingBackward{Tokens: 1024, Seq: 128, Cols: 768, Rows: 2, Table: EmbedType, In: BF16},
	}
}

var bertIdentityAdam = Adam{Elems: 1 << 24, In: BF16, Grad: BF16}

// bertIdentity preempts the BERT training kernels whose results a re-run
// or a reordering could change: the row reductions (softmax and layernorm
// backward), the layernorm weight-gradient partials, the embedding
// gradient's per-row sums, and in-place Adam (a block run twice would
// apply its update twice).
func (r *runner) bertIdentity(rep *Report, minPreempt int, next func() uint64) error {
	for _, op := range bertIdentityOps() {
		if !r.selected(op) {
			continue
		}
		if err := r.identityOne(rep, op, nil, 8, minPreempt, next); err != nil {
			return err
		}
	}
	adam := bertIdentityAdam
	if !r.selected(adam) {
		return nil
	}
	inplace := func(b Buffers) Buffers {
		c := Buffers{T: slices.Clone(b.T)}
		for i, src := range []int{0, 2, 3, 4} { // w, m, v, r -> w_out, m_out, v_out, r_out
			t := c.T[src]
			t.Name, t.Role, t.Host = t.Name+"_out", Output, nil
			c.T[5+i] = t
		}
		return c
	}
	return r.identityOne(rep, adam, inplace, 8, minPreempt, next)
}
