package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"atoll/gpu"
)

// The steps planConv makes, run on the CPU as the device runs them (gather,
// product, scatter, through a workspace of the planned size), compute the
// convolution a direct loop computes, in every pass, for workspaces small
// enough to cut the pass into many steps.
func TestConvPlanComputesTheConvolution(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	shapes := []gpu.Conv{
		{N: 2, H: 7, W: 6, C: 8, OutC: 5, R: 3, S: 3, Stride: 1, Pad: 1},
		{N: 3, H: 9, W: 9, C: 3, OutC: 4, R: 7, S: 7, Stride: 2, Pad: 3},
		{N: 4, H: 8, W: 8, C: 16, OutC: 8, R: 3, S: 3, Stride: 2, Pad: 1},
		{N: 2, H: 5, W: 5, C: 4, OutC: 3, R: 1, S: 1, Stride: 2, Pad: 0},
		{N: 1, H: 6, W: 4, C: 2, OutC: 3, R: 3, S: 2, Stride: 1, Pad: 0},
	}
	for _, base := range shapes {
		for _, v := range []gpu.Conv{
			{Pass: gpu.ConvForward},
			{Pass: gpu.ConvForward, Bias: true, BiasType: gpu.BF16, Act: gpu.EpiReLU, Accumulate: true},
			{Pass: gpu.ConvData},
			{Pass: gpu.ConvFilter},
			{Pass: gpu.ConvFilter, Split: base.N},
		} {
			c := base
			c.In, c.Pass, c.Split, c.Bias, c.BiasType, c.Act, c.Accumulate = gpu.BF16, v.Pass, v.Split, v.Bias, v.BiasType, v.Act, v.Accumulate
			if err := c.Check(); err != nil {
				t.Fatal(err)
			}
			oh, ow := c.Out()
			for _, budget := range []int64{int64(2 * c.R * c.S * c.C * c.N * oh * ow), int64(2 * c.R * c.S * c.C * oh * ow), 2 * int64(c.C*oh*ow*c.N/max(c.Split, 1)), 2 * int64(c.R*c.S*c.C)} {
				t.Run(fmt.Sprintf("%s/ws%d", c, budget), func(t *testing.T) {
					steps, err := planConv(c, budget)
					if errors.Is(err, errors.ErrUnsupported) {
						return // too small a workspace for this pass's smallest step
					}
					if err != nil {
						t.Fatal(err)
					}
					d := operands(c, rng)
					got, want := runConvPlan(t, c, steps, budget, d), directConv(c, d)
					if len(got) != len(want.out) {
						t.Fatalf("%d outputs, want %d", len(got), len(want.out))
					}
					for i := range got {
						if math.Abs(got[i]-want.out[i]) > 1e-9*(1+math.Abs(want.out[i])) {
							t.Fatalf("%d steps: output %d = %g, want %g", len(steps), i, got[i], want.out[i])
						}
					}
				})
			}
		}
	}
}

// A workspace too small for a pass's smallest step is refused, so the
// caller runs its own kernel.
func TestConvPlanRefusesATooSmallWorkspace(t *testing.T) {
	c := gpu.Conv{N: 2, H: 8, W: 8, C: 8, OutC: 8, R: 3, S: 3, Stride: 1, Pad: 1, In: gpu.BF16}
	for _, pass := range []gpu.ConvPass{gpu.ConvForward, gpu.ConvData, gpu.ConvFilter} {
		c.Pass = pass
		if _, err := planConv(c, 64); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s in 64 bytes: %v, want errors.ErrUnsupported", c, err)
		}
	}
}

// convData are one case's operands and its direct result.
type convData struct {
	x, w, dy, bias, resid []float64
	out                   []float64
}

var convOperands = map[gpu.Conv]*convData{}

// operands draws c's operands once (the plan's run and the direct loop read
// the same ones).
func operands(c gpu.Conv, rng *rand.Rand) *convData {
	if d, ok := convOperands[c]; ok {
		return d
	}
	oh, ow := c.Out()
	draw := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(rng.IntN(17) - 8)
		}
		return v
	}
	d := &convData{x: draw(c.N * c.H * c.W * c.C), w: draw(c.R * c.S * c.C * c.OutC), dy: draw(c.N * oh * ow * c.OutC),
		bias: draw(c.OutC), resid: draw(c.N * oh * ow * c.OutC)}
	convOperands[c] = d
	return d
}

// runConvPlan runs steps on the CPU: the gather and scatter as the kernels
// in convSource index, the products as gpu.Matmul defines them, operands
// addressed by the steps' byte offsets.
func runConvPlan(t *testing.T, c gpu.Conv, steps []convStep, budget int64, d *convData) []float64 {
	oh, ow := c.Out()
	rsc := c.R * c.S * c.C
	col := make([]float64, budget/2)
	var out []float64
	switch c.Pass {
	case gpu.ConvForward:
		out = append([]float64(nil), d.resid...)
	case gpu.ConvData:
		out = make([]float64, len(d.x))
	case gpu.ConvFilter:
		out = make([]float64, max(c.Split, 1)*rsc*c.OutC)
	}
	outEs := int64(2)
	if c.OutType() == gpu.F32 {
		outEs = 4
	}
	st := max(c.Stride, 1)
	for _, s := range steps {
		switch c.Pass {
		case gpu.ConvForward, gpu.ConvFilter:
			if n := s.colOff/2 + int64(s.rows*s.ld); n > int64(len(col)) || s.ld < s.taps*c.C || s.ld%8 != 0 || s.colOff%256 != 0 {
				t.Fatalf("a step gathers %d elements, %d a row of %d taps, at byte %d into a workspace of %d", s.rows*s.ld, s.ld, s.taps, s.colOff, len(col))
			}
			patches := col[s.colOff/2:]
			// The padding of a row is zeros in a padded step; elsewhere
			// nothing writes it, and a product reading it gets NaN.
			pad := math.NaN()
			if s.kp > 0 {
				pad = 0
				if s.kp != s.ld || s.taps != c.R*c.S || s.kp%8 != 0 {
					t.Fatalf("a padded step of %d taps, rows of %d, padded to %d", s.taps, s.ld, s.kp)
				}
			}
			for row := range s.rows {
				for j := s.taps * c.C; j < s.ld; j++ {
					patches[row*s.ld+j] = pad
				}
				p := s.row0 + row
				x0, y0, n := p%ow, p/ow%oh, p/ow/oh
				for tl := range s.taps {
					tap := s.tap0 + tl
					ih, iw := y0*st-c.Pad+tap/c.S, x0*st-c.Pad+tap%c.S
					for ch := range c.C {
						v := 0.0
						if ih >= 0 && ih < c.H && iw >= 0 && iw < c.W {
							v = d.x[((n*c.H+ih)*c.W+iw)*c.C+ch]
						}
						patches[row*s.ld+tl*c.C+ch] = v
					}
				}
			}
			switch {
			case c.Pass == gpu.ConvForward && s.kp > 0:
				// The filter padded to kp rows at the workspace's start.
				if int64(s.kp*c.OutC*2) > s.colOff {
					t.Fatalf("a filter of %d rows overlaps the patches at byte %d", s.kp, s.colOff)
				}
				w := make([]float64, s.kp*c.OutC)
				copy(w, d.w)
				matmul(s.m, patches, w, out[s.dOff/2:], d.bias, out[s.dOff/2:])
			case c.Pass == gpu.ConvForward:
				matmul(s.m, patches, d.w, out[s.dOff/2:], d.bias, out[s.dOff/2:])
			case s.kp > 0:
				// nb batches of kp rows at the workspace's start, then their
				// first R·S·C rows copied to D.
				if int64(s.nb*s.kp*c.OutC)*outEs > s.colOff {
					t.Fatalf("%d products of %d rows overlap the patches at byte %d", s.nb, s.kp, s.colOff)
				}
				front := make([]float64, s.nb*s.kp*c.OutC)
				for i := range front {
					front[i] = math.NaN()
				}
				matmul(s.m, patches, d.dy[s.bOff/2:], front, nil, nil)
				dst := out[s.dOff/outEs:]
				for b := range s.nb {
					copy(dst[b*rsc*c.OutC:(b+1)*rsc*c.OutC], front[b*s.kp*c.OutC:])
				}
			default:
				matmul(s.m, patches, d.dy[s.bOff/2:], out[s.dOff/outEs:], nil, nil)
			}
		case gpu.ConvData:
			if n := s.imgs * oh * ow * rsc; n > len(col) {
				t.Fatalf("a step's patch gradients take %d elements of a workspace of %d", n, len(col))
			}
			matmul(s.m, d.dy[s.aOff/2:], d.w, col, nil, nil)
			dx := out[s.dOff/2:]
			for pix := range s.imgs * c.H * c.W {
				w, h, n := pix%c.W, pix/c.W%c.H, pix/c.W/c.H
				for ch := range c.C {
					acc := 0.0
					for r := range c.R {
						y := h + c.Pad - r
						if y < 0 || y%st != 0 || y/st >= oh {
							continue
						}
						for sx := range c.S {
							xx := w + c.Pad - sx
							if xx < 0 || xx%st != 0 || xx/st >= ow {
								continue
							}
							acc += col[((n*oh+y/st)*ow+xx/st)*rsc+(r*c.S+sx)*c.C+ch]
						}
					}
					dx[pix*c.C+ch] = acc
				}
			}
		}
	}
	return out
}

// matmul is gpu.Matmul's definition on row-major float64 operands, A's
// rows LdA apart, batches Stride* apart.
func matmul(m gpu.Matmul, a, b, d, bias, c []float64) {
	lda := m.K
	if m.TransA {
		lda = m.M
	}
	if m.LdA != 0 {
		lda = m.LdA
	}
	for z := range max(m.Batch, 1) {
		za, zb, zd := int64(z)*m.StrideA, int64(z)*m.StrideB, int64(z)*m.StrideD
		res := make([]float64, m.M*m.N)
		for i := range m.M {
			for j := range m.N {
				v := 0.0
				for k := range m.K {
					ai, bi := i*lda+k, k*m.N+j
					if m.TransA {
						ai = k*lda + i
					}
					if m.TransB {
						bi = j*m.K + k
					}
					av, bv := a[za+int64(ai)], b[zb+int64(bi)]
					v += av * bv
				}
				if m.Bias {
					v += bias[j]
				}
				if m.Accumulate {
					v += c[zd+int64(i*m.N+j)]
				}
				if m.Act == gpu.EpiReLU {
					v = max(v, 0)
				}
				res[i*m.N+j] = v
			}
		}
		copy(d[zd:], res)
	}
}

// directConv is c's pass by the definition, as a loop over output pixels
// and taps.
func directConv(c gpu.Conv, d *convData) *convData {
	oh, ow := c.Out()
	st := max(c.Stride, 1)
	rsc := c.R * c.S * c.C
	var out []float64
	switch c.Pass {
	case gpu.ConvForward:
		out = make([]float64, c.N*oh*ow*c.OutC)
	case gpu.ConvData:
		out = make([]float64, len(d.x))
	case gpu.ConvFilter:
		out = make([]float64, max(c.Split, 1)*rsc*c.OutC)
	}
	per := c.N / max(c.Split, 1)
	for n := range c.N {
		for y := range oh {
			for x := range ow {
				p := (n*oh+y)*ow + x
				for r := range c.R {
					for s := range c.S {
						ih, iw := y*st-c.Pad+r, x*st-c.Pad+s
						if ih < 0 || ih >= c.H || iw < 0 || iw >= c.W {
							continue
						}
						for ch := range c.C {
							xi, wi := ((n*c.H+ih)*c.W+iw)*c.C+ch, ((r*c.S+s)*c.C+ch)*c.OutC
							for o := range c.OutC {
								switch c.Pass {
								case gpu.ConvForward:
									out[p*c.OutC+o] += d.x[xi] * d.w[wi+o]
								case gpu.ConvData:
									out[xi] += d.dy[p*c.OutC+o] * d.w[wi+o]
								case gpu.ConvFilter:
									part := 0
									if c.Split > 0 {
										part = n / per
									}
									out[part*rsc*c.OutC+wi+o] += d.x[xi] * d.dy[p*c.OutC+o]
								}
							}
						}
					}
				}
			}
		}
	}
	if c.Pass == gpu.ConvForward {
		for p := range c.N * oh * ow {
			for o := range c.OutC {
				v := out[p*c.OutC+o]
				if c.Bias {
					v += d.bias[o]
				}
				if c.Accumulate {
					v += d.resid[p*c.OutC+o]
				}
				if c.Act == gpu.EpiReLU {
					v = max(v, 0)
				}
				out[p*c.OutC+o] = v
			}
		}
	}
	return &convData{out: out}
}
