package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// naiveGEMM is the plain loop nest matmul must equal bit for bit.
func naiveGEMM(a, b []float64, m, n, k int) []float64 {
	c := make([]float64, m*n)
	for i := range m {
		for j := range n {
			v := 0.0
			for p := range k {
				v += a[i*k+p] * b[p*n+j]
			}
			c[i*n+j] = v
		}
	}
	return c
}

// naiveConv skips the padding taps, as the first reference did.
func naiveConv(g convGeom, x, w []float64) []float64 {
	y := make([]float64, g.n*g.oh*g.ow*g.oc)
	for n := 0; n < g.n; n++ {
		for oy := 0; oy < g.oh; oy++ {
			for ox := 0; ox < g.ow; ox++ {
				for o := 0; o < g.oc; o++ {
					v := 0.0
					for ry := 0; ry < g.r; ry++ {
						for sx := 0; sx < g.s; sx++ {
							iy, ix := oy*g.st-g.pad+ry, ox*g.st-g.pad+sx
							if iy < 0 || iy >= g.h || ix < 0 || ix >= g.w {
								continue
							}
							for c := 0; c < g.c; c++ {
								v += x[((n*g.h+iy)*g.w+ix)*g.c+c] * w[((ry*g.s+sx)*g.c+c)*g.oc+o]
							}
						}
					}
					y[((n*g.oh+oy)*g.ow+ox)*g.oc+o] = v
				}
			}
		}
	}
	return y
}

func matRand(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = r.Float64()*2 - 1
	}
	return v
}

func sameBits(t *testing.T, what string, got, want []float64) {
	t.Helper()
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("%s: element %d is %v, the plain loop gives %v", what, i, got[i], want[i])
		}
	}
}

// The blocked reference GEMM (4x8 tiles, K blocks, columns split across
// CPUs, vector registers where the build has them) equals the plain loop
// nest bit for bit, on shapes with ragged edges and K across several blocks.
func TestMatmulIsThePlainLoop(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, sh := range [][3]int{{1, 1, 1}, {3, 7, 5}, {4, 8, 256}, {5, 9, 257}, {33, 70, 600}, {128, 264, 700}, {9, 1000, 64}} {
		m, n, k := sh[0], sh[1], sh[2]
		a, b := matRand(r, m*k), matRand(r, k*n)
		c := make([]float64, m*n)
		matmul(c, a, b, m, n, k)
		sameBits(t, "matmul", c, naiveGEMM(a, b, m, n, k))
	}
}

// The im2col convolution equals the loop that skips the padding taps, bit
// for bit (finite inputs).
func TestConvFwdIsThePlainLoop(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, g := range []convGeom{
		{n: 2, h: 9, w: 9, c: 5, oc: 11, r: 3, s: 3, st: 1, pad: 1},
		{n: 1, h: 15, w: 15, c: 3, oc: 16, r: 7, s: 7, st: 2, pad: 3},
		{n: 1, h: 8, w: 8, c: 16, oc: 24, r: 1, s: 1, st: 2, pad: 0},
	} {
		g.oh, g.ow = (g.h+2*g.pad-g.r)/g.st+1, (g.w+2*g.pad-g.s)/g.st+1
		x, w := matRand(r, g.n*g.h*g.w*g.c), matRand(r, g.r*g.s*g.c*g.oc)
		sameBits(t, "conv", refConvFwd(Buffers{}, g, x, w, nil, nil, ActNone), naiveConv(g, x, w))
	}
}

// tileScalar is a plain-Go micro-kernel for matmulTiled, so that the
// tiling (K blocks, column split, ragged edges) is checked on every build.
func tileScalar(c, a, b []float64, n, lda, kc, k0 int) {
	for r := range 4 {
		for q := range 8 {
			v := c[r*n+q]
			for p := range kc {
				v += a[r*lda+k0+p] * b[p*n+q]
			}
			c[r*n+q] = v
		}
	}
}

func TestMatmulTiledIsThePlainLoop(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, sh := range [][3]int{{4, 8, 256}, {5, 9, 257}, {33, 70, 600}, {128, 264, 700}} {
		m, n, k := sh[0], sh[1], sh[2]
		a, b := matRand(r, m*k), matRand(r, k*n)
		c := make([]float64, m*n)
		matmulTiled(c, a, b, m, n, k, tileScalar)
		sameBits(t, "matmulTiled", c, naiveGEMM(a, b, m, n, k))
	}
}
