package kernels

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// Reference computes op's outputs on the CPU in float64 from the host copies
// of its inputs (Buffers from Alloc or Refill), in the order of the op's
// output tensors. It is meant for small sizes (it is a naive loop nest).
func Reference(op Op, b Buffers) ([][]float64, error) {
	k, err := spec(op)
	if err != nil {
		return nil, err
	}
	if len(b.T) != len(k.tensors) {
		return nil, fmt.Errorf("%w: %s takes %d tensors, got %d", ErrBuffers, k.name, len(k.tensors), len(b.T))
	}
	in := func(i int) []float64 { return b.T[i].Host }
	for i, t := range b.T {
		if (t.Role == Input || t.Role == Weight) && len(t.Host) != t.Elems {
			return nil, fmt.Errorf("%w: %s tensor %s has no host values (allocate with Alloc)", ErrBuffers, k.name, t.Name)
		}
		_ = i
	}
	switch o := op.(type) {
	case GEMM:
		var bias []float64
		if o.Bias {
			bias = in(3)
		}
		return [][]float64{refGEMM(b, in(0), in(1), bias, nil, o.batch(), o.M, o.N, o.K, o.Act)}, nil
	case Conv2D:
		oh, ow := o.Out()
		c := convGeom{n: o.N, h: o.H, w: o.W, c: o.C, oc: o.OutC, r: o.R, s: o.S, st: max(o.Stride, 1), pad: o.Pad, oh: oh, ow: ow}
		switch {
		case o.BackwardData:
			return [][]float64{refConvDgrad(c, in(0), in(1))}, nil
		case o.BackwardFilter && o.Split > 0:
			return [][]float64{refConvWgradSplit(c, o.Split, in(0), in(1))}, nil // train.go
		case o.BackwardFilter:
			return [][]float64{refConvWgrad(c, in(0), in(1))}, nil
		}
		var bias, resid []float64
		i := 3
		if o.Bias {
			bias = in(i)
			i++
		}
		if o.Residual {
			resid = in(i)
		}
		return [][]float64{refConvFwd(b, c, in(0), in(1), bias, resid, o.Act)}, nil
	case Depthwise:
		oh, ow := o.Out()
		x, w := in(0), in(1)
		y := b.make(o.outputs())
		st := max(o.Stride, 1)
		for n := 0; n < o.N; n++ {
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					for ch := 0; ch < o.C; ch++ {
						acc := 0.0
						for ry := 0; ry < o.R; ry++ {
							for sx := 0; sx < o.S; sx++ {
								iy, ix := oy*st-o.Pad+ry, ox*st-o.Pad+sx
								if iy >= 0 && iy < o.H && ix >= 0 && ix < o.W {
									acc += x[((n*o.H+iy)*o.W+ix)*o.C+ch] * w[(ry*o.S+sx)*o.C+ch]
								}
							}
						}
						y[((n*oh+oy)*ow+ox)*o.C+ch] = act(acc, o.Act)
					}
				}
			}
		}
		return [][]float64{y}, nil
	case Elementwise:
		code, a, _ := ewCode(o)
		n := o.Elems
		out := b.make(n)
		switch code {
		case ewBiasAct:
			x, bias, cols := in(0), in(1), o.cols()
			for i := range out {
				out[i] = act(x[i]+bias[i%cols], a)
			}
		case ewAdd:
			x, y := in(0), in(1)
			for i := range out {
				out[i] = act(x[i]+y[i], a)
			}
		case ewAct:
			x := in(0)
			for i := range out {
				out[i] = act(x[i], a)
			}
		case ewSGD:
			w, g, m := in(0), in(1), in(2)
			lr, mu := o.lrMomentum()
			m2 := b.make(n)
			for i := range out {
				m2[i] = float64(mu)*m[i] + g[i]
				out[i] = w[i] - float64(lr)*m2[i]
			}
			return [][]float64{out, m2}, nil
		}
		return [][]float64{out}, nil
	case LayerNorm:
		x, g, be := in(0), in(1), in(2)
		y := b.make(len(x))
		eachRow(o.Rows, 8*len(x), func(r int) { // rows are independent
			row := x[r*o.Cols : (r+1)*o.Cols]
			mean, v := 0.0, 0.0
			for _, e := range row {
				mean += e
			}
			mean /= float64(o.Cols)
			for _, e := range row {
				v += (e - mean) * (e - mean)
			}
			rstd := 1 / math.Sqrt(v/float64(o.Cols)+LayerNormEps)
			for j, e := range row {
				y[r*o.Cols+j] = (e-mean)*rstd*g[j] + be[j]
			}
		})
		return [][]float64{y}, nil
	case Softmax:
		x := in(0)
		y := b.make(len(x))
		eachRow(o.Rows, 32*len(x), func(r int) { // rows are independent
			row := x[r*o.Cols : (r+1)*o.Cols]
			mx := math.Inf(-1)
			for _, e := range row {
				mx = math.Max(mx, e)
			}
			if b.Fast { // e^x once, in float32
				out := y[r*o.Cols : (r+1)*o.Cols]
				inv := 1 / expShiftFast(out, row, mx)
				for j := range out {
					out[j] *= inv
				}
				return
			}
			s := 0.0
			for _, e := range row {
				s += math.Exp(e - mx)
			}
			for j, e := range row {
				y[r*o.Cols+j] = math.Exp(e-mx) / s
			}
		})
		return [][]float64{y}, nil
	case Pool:
		oh, ow := o.Out()
		x := in(0)
		y := b.make(o.outputs())
		st := max(o.Stride, 1)
		for n := 0; n < o.N; n++ {
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					for ch := 0; ch < o.C; ch++ {
						acc := 0.0
						if o.Max {
							acc = -math.MaxFloat32
						}
						for ry := 0; ry < o.R; ry++ {
							for sx := 0; sx < o.S; sx++ {
								iy, ix := oy*st-o.Pad+ry, ox*st-o.Pad+sx
								if iy >= 0 && iy < o.H && ix >= 0 && ix < o.W {
									v := x[((n*o.H+iy)*o.W+ix)*o.C+ch]
									if o.Max {
										acc = math.Max(acc, v)
									} else {
										acc += v
									}
								}
							}
						}
						if !o.Max {
							acc /= float64(o.R * o.S)
						}
						y[((n*oh+oy)*ow+ox)*o.C+ch] = acc
					}
				}
			}
		}
		return [][]float64{y}, nil
	case Reduce:
		x := in(0)
		out := b.make(o.Rows)
		for r := range out {
			s := 0.0
			for j := 0; j < o.Cols; j++ {
				s += x[r*o.Cols+j]
			}
			if o.Name == "mean" {
				s /= float64(o.Cols)
			}
			out[r] = s
		}
		return [][]float64{out}, nil
	case Gather:
		table, idx := in(0), in(1)
		v := o.vocab()
		out := b.make(o.Rows * o.Cols)
		for r := 0; r < o.Rows; r++ {
			id := int(idx[r])
			if id < 0 || id >= v {
				continue
			}
			copy(out[r*o.Cols:(r+1)*o.Cols], table[id*o.Cols:(id+1)*o.Cols])
		}
		return [][]float64{out}, nil
	}
	if o, ok := op.(StridedGEMM); ok {
		var bias []float64
		if o.Bias {
			bias = in(3)
		}
		return [][]float64{refStrided(o, in(0), in(1), bias)}, nil
	}
	if out, ok, err := trainReference(op, in); ok { // training ops: train.go
		return out, err
	}
	if out, ok, err := bertTrainReference(op, in); ok { // BERT training ops: bert_train.go
		return out, err
	}
	return nil, fmt.Errorf("%w: no reference for %T", ErrUnsupported, op)
}

// act is the activation in float64 with the kernels' formulas (GELU: the
// tanh approximation).
func act(x float64, a Act) float64 {
	switch a {
	case ActReLU:
		return math.Max(x, 0)
	case ActGELU:
		return 0.5 * x * (1 + math.Tanh(0.7978845608028654*(x+0.044715*x*x*x)))
	case ActReLU6:
		return math.Min(math.Max(x, 0), 6)
	case ActTanh:
		return math.Tanh(x)
	}
	return x
}

// refGEMM: C[z][i][j] = act(sum A[z][i][p] B[z][p][j] + bias[j] + resid).
// Rows are split across the CPUs; each row sums in the same order
// whatever the split.
func refGEMM(env Buffers, a, b, bias, resid []float64, batch, m, n, k int, ac Act) []float64 {
	c := env.make(batch * m * n)
	matmul := env.mm(1)
	for z := range batch {
		matmul(c[z*m*n:][:m*n], a[z*m*k:][:m*k], b[z*k*n:][:k*n], m, n, k)
	}
	epilogue(c, n, bias, resid, ac, env.Fast)
	return c
}

// epilogue applies bias (per column of n), residual and activation in
// place; fast computes the activation in float32 (actFast).
func epilogue(c []float64, n int, bias, resid []float64, ac Act, fast bool) {
	cost := 2 // the work estimate eachRow splits by: a tanh is dear
	if ac == ActGELU || ac == ActTanh {
		cost = 64
	}
	eachRow(len(c)/n, cost*len(c), func(r int) {
		row := c[r*n : (r+1)*n]
		if bias != nil {
			for j, b := range bias[:n] {
				row[j] += b
			}
		}
		if resid != nil {
			for j, x := range resid[r*n : (r+1)*n] {
				row[j] += x
			}
		}
		if ac == ActNone {
			return
		}
		if fast {
			actFast(row, ac)
			return
		}
		for j, v := range row {
			row[j] = act(v, ac)
		}
	})
}

// eachRow calls row(r) for r in [0, rows), split across the CPUs when the
// work (multiply-adds) is worth goroutines. Each call owns its own output
// row, so results do not depend on the split.
func eachRow(rows, work int, row func(r int)) {
	inParts(rows, work, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row(r)
		}
	})
}

// InParts is inParts for other packages' CPU work (a serving executor's
// attention heads).
func InParts(n, work int, part func(lo, hi int)) { inParts(n, work, part) }

// inParts splits [0, n) into one contiguous range per CPU (one range when
// the work, in multiply-adds, is not worth goroutines) and calls part on
// each, concurrently; it returns when all have.
func inParts(n, work int, part func(lo, hi int)) {
	parts := min(runtime.GOMAXPROCS(0), max(n, 1))
	if work < 1<<16 {
		parts = 1
	}
	var wg sync.WaitGroup
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			part(p*n/parts, (p+1)*n/parts)
		}()
	}
	wg.Wait()
}

type convGeom struct{ n, h, w, c, oc, r, s, st, pad, oh, ow int }

// convBack accumulates a convolution's data gradient (wgrad false: dst =
// dX, a = W) or weight gradient (wgrad true: dst = dW, a = X) from dy over
// every (output pixel, input pixel, filter tap) the convolution connects:
// output pixels in NHWC order, taps in (r, s) order within each, taps in
// the padding skipped, channels in order — one fixed order of additions.
//
// It runs unseen by the race detector (go:norace): one goroutine, only its
// arguments touched, and the training checks' convolutions made their
// tests minutes long under -race.
//
//go:norace
func (g convGeom) convBack(wgrad bool, a, dy, dst []float64) {
	for n := 0; n < g.n; n++ {
		for oy := 0; oy < g.oh; oy++ {
			for ox := 0; ox < g.ow; ox++ {
				out := (n*g.oh+oy)*g.ow + ox
				d := dy[out*g.oc:][:g.oc]
				for ry := 0; ry < g.r; ry++ {
					for sx := 0; sx < g.s; sx++ {
						iy, ix := oy*g.st-g.pad+ry, ox*g.st-g.pad+sx
						if iy < 0 || iy >= g.h || ix < 0 || ix >= g.w {
							continue
						}
						in, tap := (n*g.h+iy)*g.w+ix, ry*g.s+sx
						if wgrad {
							for c := 0; c < g.c; c++ {
								xv := a[in*g.c+c]
								row := dst[(tap*g.c+c)*g.oc:][:g.oc]
								for o, dv := range d {
									row[o] += xv * dv
								}
							}
							continue
						}
						for c := 0; c < g.c; c++ {
							wrow := a[(tap*g.c+c)*g.oc:][:g.oc]
							v := 0.0
							for o, dv := range d {
								v += dv * wrow[o]
							}
							dst[in*g.c+c] += v
						}
					}
				}
			}
		}
	}
}

// refConvFwd: Y[n][oy][ox][o] = act(sum X[n][iy][ix][c] W[r][s][c][o] + bias[o] + resid).
// The implicit GEMM made explicit: the patches (im2col; zeros in the
// padding) times the weights [R·S·C][O], so each output sums its taps in
// (r, s) order, channels in order. A padding tap adds 0·w = ±0, which leaves
// every finite sum as it was.
func refConvFwd(env Buffers, g convGeom, x, w, bias, resid []float64, a Act) []float64 {
	rows, kk := g.n*g.oh*g.ow, g.r*g.s*g.c
	patches := env.make(rows * kk)
	for n := 0; n < g.n; n++ {
		for oy := 0; oy < g.oh; oy++ {
			for ox := 0; ox < g.ow; ox++ {
				prow := patches[((n*g.oh+oy)*g.ow+ox)*kk:][:kk]
				for ry := 0; ry < g.r; ry++ {
					for sx := 0; sx < g.s; sx++ {
						iy, ix := oy*g.st-g.pad+ry, ox*g.st-g.pad+sx
						if iy < 0 || iy >= g.h || ix < 0 || ix >= g.w {
							continue
						}
						copy(prow[(ry*g.s+sx)*g.c:][:g.c], x[((n*g.h+iy)*g.w+ix)*g.c:])
					}
				}
			}
		}
	}
	y := env.make(rows * g.oc)
	env.mm(1)(y, patches, w, rows, g.oc, kk)
	epilogue(y, g.oc, bias, resid, a, env.Fast)
	return y
}

// refConvDgrad: dX[n][iy][ix][c] = sum over taps of dY[n][oy][ox][o] W[r][s][c][o]
// (the adjoint of the forward pass, computed by scattering).
func refConvDgrad(g convGeom, dy, w []float64) []float64 {
	dx := make([]float64, g.n*g.h*g.w*g.c)
	g.convBack(false, w, dy, dx)
	return dx
}

// refConvWgrad: dW[r][s][c][o] = sum over n, oy, ox of X[n][iy][ix][c] dY[n][oy][ox][o].
func refConvWgrad(g convGeom, x, dy []float64) []float64 {
	dw := make([]float64, g.r*g.s*g.c*g.oc)
	g.convBack(true, x, dy, dw)
	return dw
}

// RelErr is ‖got − ref‖₂ / ‖ref‖₂; NaN or Inf in got gives +Inf. An all-zero
// reference compares the absolute norm instead.
func RelErr(got, ref []float64) float64 {
	if len(got) != len(ref) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range ref {
		if math.IsNaN(got[i]) || math.IsInf(got[i], 0) {
			return math.Inf(1)
		}
		d := got[i] - ref[i]
		num += d * d
		den += ref[i] * ref[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// Tolerance is the relative-error bound SelfTest applies to outputs of type d.
func Tolerance(d DType) float64 {
	switch d {
	case BF16:
		return 1e-2
	case F16:
		return 5e-3
	}
	return 1e-5
}
