//go:build goexperiment.simd && amd64

package kernels

import (
	"math"
	"simd/archsimd"
	"sync"
)

var fastOK = archsimd.X86.AVX512()

// matmulFast: on AVX-512, A's rows converted to float32 once (zero rows
// up to a multiple of 8) and an 8×32 micro-kernel in assembly
// (fmaTile8x32: sixteen 16-lane accumulators, 16 fused multiply-adds per
// step) over B's panels, in K blocks of fastKC. The work is (row block,
// panel) pairs split across the CPUs: a block's rows stay in L2 while a
// panel's K block (fastKC·fastNC float32) stays in L1. Sums go to a
// float32 product, widened into c at the end.
func matmulFast(c, a []float64, pb *packedB, m int) {
	k, n := pb.k, pb.n
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:m*n])
		return
	}
	strips := (m + fastMR - 1) / fastMR
	as := getScratch32(strips * fastMR * k)
	defer putScratch32(as)
	a32 := *as
	eachRow(m, 4*m*k, func(i int) { toF32(a32[i*k:(i+1)*k], a[i*k:(i+1)*k]) })
	clear(a32[m*k:])
	panels := pb.panels()
	ldc := panels * fastNC
	cs := getScratch32(strips * fastMR * ldc)
	defer putScratch32(cs)
	cf := *cs
	clear(cf)
	blocks := (strips + fastMCStrips - 1) / fastMCStrips
	inParts(blocks*panels, m*n*k, func(i0, i1 int) {
		for it := i0; it < i1; it++ {
			blk, p := it/panels, it%panels
			s0, s1 := blk*fastMCStrips, min(strips, (blk+1)*fastMCStrips)
			pan := pb.panel(p)
			for k0 := 0; k0 < k; k0 += fastKC {
				kc := min(fastKC, k-k0)
				for s := s0; s < s1; s++ {
					fmaTile8x32(&cf[s*fastMR*ldc+p*fastNC], ldc, &a32[s*fastMR*k+k0], k, &pan[k0*fastNC], kc)
				}
			}
		}
	})
	eachRow(m, m*n, func(i int) { toF64(c[i*n:(i+1)*n], cf[i*ldc:i*ldc+n]) })
}

// fastMR is the micro-kernel's rows; fastMCStrips the strips of a row
// block (192 rows: with fastKC, 192 KiB of float32 A, kept in L2).
const (
	fastMR       = 8
	fastMCStrips = 24
)

// fmaTile8x32 (assembly): c[r·ldc+q] += Σ_{p<kc} a[r·lda+p]·b[p·32+q]
// for r < 8, q < 32, a 8 rows of A, b one panel; kc ≥ 1.
//
//go:noescape
func fmaTile8x32(c *float32, ldc int, a *float32, lda int, b *float32, kc int)

// toF32 rounds src into dst (same length), eight at a time.
func toF32(dst []float32, src []float64) {
	n8 := len(src) / 8 * 8
	for i := 0; i < n8; i += 8 {
		archsimd.LoadFloat64x8Slice(src[i:]).ConvertToFloat32().StoreSlice(dst[i:])
	}
	for i := n8; i < len(src); i++ {
		dst[i] = float32(src[i])
	}
	archsimd.ClearAVXUpperBits()
}

// toF64 widens src into dst (same length), eight at a time.
func toF64(dst []float64, src []float32) {
	n8 := len(src) / 8 * 8
	for i := 0; i < n8; i += 8 {
		archsimd.LoadFloat32x8Slice(src[i:]).ConvertToFloat64().StoreSlice(dst[i:])
	}
	for i := n8; i < len(src); i++ {
		dst[i] = float64(src[i])
	}
	archsimd.ClearAVXUpperBits()
}

// scratch32 lends float32 scratch (matmulFast's converted rows and
// accumulators) so that a serving executor's products do not fault in
// fresh pages each call.
var scratch32 sync.Pool

// getScratch32 is n float32 values, not zeroed; putScratch32 returns them.
func getScratch32(n int) *[]float32 {
	if v, ok := scratch32.Get().(*[]float32); ok && cap(*v) >= n {
		*v = (*v)[:n]
		return v
	}
	s := make([]float32, n)
	return &s
}

func putScratch32(s *[]float32) { scratch32.Put(s) }

// exp8 is e^x in float32 for eight values (Cephes' expf: x = n·ln2 + r,
// |r| ≤ ln2/2, a degree-6 polynomial for e^r, scaled by 2^n; relative
// error about 1e-7; x clamped to [-87.3, 88.7]).
func exp8(x archsimd.Float32x8) archsimd.Float32x8 {
	x = x.Max(archsimd.BroadcastFloat32x8(-87.33654)).Min(archsimd.BroadcastFloat32x8(88.72283))
	n := x.Mul(archsimd.BroadcastFloat32x8(1.442695040888963)).RoundToEvenScaled(0)
	r := n.MulAdd(archsimd.BroadcastFloat32x8(-0.693359375), x)
	r = n.MulAdd(archsimd.BroadcastFloat32x8(2.12194440e-4), r)
	p := archsimd.BroadcastFloat32x8(1.9875691500e-4)
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(1.3981999507e-3))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(8.3334519073e-3))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(4.1665795894e-2))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(1.6666665459e-1))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(5.0000001201e-1))
	p = p.MulAdd(r.Mul(r), r).Add(archsimd.BroadcastFloat32x8(1))
	return p.Scale(n)
}

// expShiftFast sets dst[i] = e^(src[i]-sub), the difference rounded to
// float32 and the exponential in float32 arithmetic, and
// returns their sum (float64, in order of eight-wide partial sums).
func expShiftFast(dst, src []float64, sub float64) float64 {
	if !fastOK {
		return expShiftGeneric(dst, src, sub)
	}
	s := archsimd.BroadcastFloat64x8(sub)
	acc := archsimd.BroadcastFloat32x8(0)
	n8 := len(src) / 8 * 8
	for i := 0; i < n8; i += 8 {
		e := exp8(archsimd.LoadFloat64x8Slice(src[i:]).Sub(s).ConvertToFloat32())
		acc = acc.Add(e)
		e.ConvertToFloat64().StoreSlice(dst[i:])
	}
	var part [8]float32
	acc.Store(&part)
	archsimd.ClearAVXUpperBits()
	sum := 0.0
	for _, v := range part {
		sum += float64(v)
	}
	for i := n8; i < len(src); i++ {
		dst[i] = math.Exp(src[i] - sub)
		sum += dst[i]
	}
	return sum
}

// actFast applies a (GELU's tanh approximation or tanh) to v in place in
// float32 arithmetic: GELU(x) = x / (1 + e^(-2u)) and tanh(u) =
// 2 / (1 + e^(-2u)) - 1, u the tanh's argument.
func actFast(v []float64, a Act) {
	if !fastOK || (a != ActGELU && a != ActTanh) {
		actGeneric(v, a)
		return
	}
	one := archsimd.BroadcastFloat32x8(1)
	two, m2 := archsimd.BroadcastFloat32x8(2), archsimd.BroadcastFloat32x8(-2)
	c0, c1 := archsimd.BroadcastFloat32x8(0.7978845608028654), archsimd.BroadcastFloat32x8(0.044715)
	n8 := len(v) / 8 * 8
	for i := 0; i < n8; i += 8 {
		x := archsimd.LoadFloat64x8Slice(v[i:]).ConvertToFloat32()
		var y archsimd.Float32x8
		if a == ActGELU {
			u := x.Mul(x).Mul(c1).MulAdd(x, x).Mul(c0) // 0.798·(x + 0.044715·x³)
			y = x.Div(one.Add(exp8(u.Mul(m2))))
		} else {
			y = two.Div(one.Add(exp8(x.Mul(m2)))).Sub(one)
		}
		y.ConvertToFloat64().StoreSlice(v[i:])
	}
	archsimd.ClearAVXUpperBits()
	actGeneric(v[n8:], a)
}

// roundBF16Fast rounds v to bfloat16 in place, eight at a time (as
// F32ToBF16: to float32, then to nearest even on the upper 16 bits).
func roundBF16Fast(v []float64) {
	if !fastOK {
		roundBF16Generic(v)
		return
	}
	half, mask := archsimd.BroadcastUint32x8(0x7fff), archsimd.BroadcastUint32x8(0xffff0000)
	one := archsimd.BroadcastUint32x8(1)
	n8 := len(v) / 8 * 8
	for i := 0; i < n8; i += 8 {
		x := archsimd.LoadFloat64x8Slice(v[i:]).ConvertToFloat32().AsUint32x8()
		x = x.Add(half).Add(x.ShiftAllRight(16).And(one)).And(mask)
		x.AsFloat32x8().ConvertToFloat64().StoreSlice(v[i:])
	}
	archsimd.ClearAVXUpperBits()
	roundBF16Generic(v[n8:])
}
