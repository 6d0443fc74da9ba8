package kernels

import (
	"math"
	"sync"
)

// MatMulFast is c = a·b for row-major a (m×k) and b (k×n) into c, as the
// GPU computes it rather than as the plain loop does: operands rounded to
// float32, products summed in float32 with fused multiply-adds, in blocks.
// It is what a serving executor wants (models.Prepare's fast mode); the
// reference's checks use MatMul, whose sums are the plain loop's bit for
// bit. Results differ from MatMul by float32 accumulation (relative 1e-6
// per element for sums of a few thousand terms). Without AVX-512 (or
// without GOEXPERIMENT=simd) it is MatMul.
func MatMulFast(c, a, b []float64, m, n, k int) {
	if !fastOK {
		// No AVX-512: the reference's own product (vector tiles on AVX2)
		// is faster than a scalar float32 one.
		matmul(c, a, b, m, n, k)
		return
	}
	pb := packBInto(lendPanels(k, n), b, k, n)
	matmulFast(c, a, pb, m)
	returnPanels(pb)
}

// panelPool lends MatMulFast its packed copy of B (an activation, packed
// per call: attention's products), so a serving executor's per-request
// products do not fault in fresh pages.
var panelPool sync.Pool

func lendPanels(k, n int) []float32 {
	size := (n + fastNC - 1) / fastNC * k * fastNC
	if v, ok := panelPool.Get().(*[]float32); ok && cap(*v) >= size {
		return (*v)[:size]
	}
	return make([]float32, size)
}

func returnPanels(pb *packedB) { panelPool.Put(&pb.p) }

// fastNC is the column panel of matmulFast: a panel of B over fastKC rows
// (fastKC·fastNC float32) stays in L1 while rows of A stream past it.
const (
	fastNC = 32
	fastKC = 256
)

// packedB is a k×n matrix as matmulFast reads it: float32 column panels of
// fastNC, each [k][fastNC] contiguous, the last zero-padded.
type packedB struct {
	k, n int
	p    []float32
}

func (pb *packedB) panels() int { return (pb.n + fastNC - 1) / fastNC }

// panel is panel j's [k][fastNC] values.
func (pb *packedB) panel(j int) []float32 { return pb.p[j*pb.k*fastNC : (j+1)*pb.k*fastNC] }

// packB packs row-major b (k×n), the panels split across the CPUs.
func packB(b []float64, k, n int) *packedB {
	return packBInto(make([]float32, (n+fastNC-1)/fastNC*k*fastNC), b, k, n)
}

// packBInto is packB into dst (of the packed size).
func packBInto(dst []float32, b []float64, k, n int) *packedB {
	pb := &packedB{k: k, n: n, p: dst}
	inParts(pb.panels(), 4*k*n, func(j0, j1 int) {
		for j := j0; j < j1; j++ {
			c0 := j * fastNC
			w := min(fastNC, n-c0)
			dst := pb.panel(j)
			for r := range k {
				toF32(dst[r*fastNC:r*fastNC+w], b[r*n+c0:r*n+c0+w])
				clear(dst[r*fastNC+w : (r+1)*fastNC]) // a lent buffer's padding
			}
		}
	})
	return pb
}

// PackCache keeps weights packed for MatMulFast across calls (Buffers.Pack):
// a serving executor multiplies by the same weights every request. A
// weight is known by its backing array, so its values must not change
// while the cache lives.
type PackCache struct{ m sync.Map }

type packKey struct {
	p    *float64
	k, n int
}

// get is b packed, from the cache when it has it.
func (c *PackCache) get(b []float64, k, n int) *packedB {
	key := packKey{&b[0], k, n}
	if v, ok := c.m.Load(key); ok {
		return v.(*packedB)
	}
	v, _ := c.m.LoadOrStore(key, packB(b, k, n))
	return v.(*packedB)
}

// matmulFastGeneric is matmulFast without vector registers: float32 sums
// a row at a time over the packed panels.
func matmulFastGeneric(c, a []float64, pb *packedB, m int) {
	k, n := pb.k, pb.n
	eachRow(m, m*n*k, func(i int) {
		acc := make([]float32, fastNC)
		for j := range pb.panels() {
			clear(acc)
			pan := pb.panel(j)
			for p, av := range a[i*k : (i+1)*k] {
				x := float32(av)
				for q, bv := range pan[p*fastNC : (p+1)*fastNC] {
					acc[q] += x * bv
				}
			}
			for q := range min(fastNC, n-j*fastNC) {
				c[i*n+j*fastNC+q] = float64(acc[q])
			}
		}
	})
}

// RoundBF16 rounds v to bfloat16 in place (as float64 values), split
// across the CPUs when long; eight at a time on AVX-512, the same values.
func RoundBF16(v []float64) {
	const chunk = 1 << 14
	eachRow((len(v)+chunk-1)/chunk, 4*len(v), func(c int) {
		roundBF16Fast(v[c*chunk : min(len(v), (c+1)*chunk)])
	})
}

// roundBF16Generic is roundBF16Fast a value at a time.
func roundBF16Generic(v []float64) {
	for i, x := range v {
		v[i] = float64(BF16ToF32(F32ToBF16(float32(x))))
	}
}

// expShiftGeneric is expShiftFast in float64.
func expShiftGeneric(dst, src []float64, sub float64) float64 {
	sum := 0.0
	for i, x := range src {
		dst[i] = math.Exp(x - sub)
		sum += dst[i]
	}
	return sum
}

// actGeneric is actFast in float64 (act's formulas).
func actGeneric(v []float64, a Act) {
	for i, x := range v {
		v[i] = act(x, a)
	}
}
