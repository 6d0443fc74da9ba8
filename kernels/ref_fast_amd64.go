//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"sync"
)

var fastOK = archsimd.X86.AVX512()

// matmulFast: on AVX-512, A's rows converted to float32 once and a 4×32
// micro-kernel over B's packed panels — eight 16-lane accumulators, each
// step two loads of the panel, four broadcasts and eight fused
// multiply-adds — over K blocks of fastKC; panels are split across the
// CPUs.
func matmulFast(c, a []float64, pb *packedB, m int) {
	k, n := pb.k, pb.n
	if m < 4 { // callers come here only when fastOK
		matmulFastGeneric(c, a, pb, m)
		return
	}
	as := getScratch32(m * k)
	defer putScratch32(as)
	a32 := *as
	eachRow(m, 4*m*k, func(i int) { toF32(a32[i*k:(i+1)*k], a[i*k:(i+1)*k]) })
	inParts(pb.panels(), m*n*k, func(p0, p1 int) {
		accs := getScratch32(m * fastNC)
		defer putScratch32(accs)
		acc := *accs
		m4 := m / 4 * 4
		for p := p0; p < p1; p++ {
			j0 := p * fastNC
			w := min(fastNC, n-j0)
			pan := pb.panel(p)
			clear(acc)
			for k0 := 0; k0 < k; k0 += fastKC {
				kc := min(fastKC, k-k0)
				for i := 0; i < m4; i += 4 {
					fastTile4(acc[i*fastNC:], a32[i*k+k0:], pan[k0*fastNC:], k, kc)
				}
				for i := m4; i < m; i++ {
					fastTile1(acc[i*fastNC:], a32[i*k+k0:], pan[k0*fastNC:], kc)
				}
			}
			for i := range m {
				toF64(c[i*n+j0:i*n+j0+w], acc[i*fastNC:i*fastNC+w])
			}
		}
	})
}

// fastTile4 adds a[r][0:kc]·panel to acc's rows r < 4 (each fastNC wide).
func fastTile4(acc, a, pb []float32, lda, kc int) {
	c00, c01 := archsimd.LoadFloat32x16Slice(acc[0:]), archsimd.LoadFloat32x16Slice(acc[16:])
	c10, c11 := archsimd.LoadFloat32x16Slice(acc[32:]), archsimd.LoadFloat32x16Slice(acc[48:])
	c20, c21 := archsimd.LoadFloat32x16Slice(acc[64:]), archsimd.LoadFloat32x16Slice(acc[80:])
	c30, c31 := archsimd.LoadFloat32x16Slice(acc[96:]), archsimd.LoadFloat32x16Slice(acc[112:])
	a0, a1, a2, a3 := a[:kc], a[lda:][:kc], a[2*lda:][:kc], a[3*lda:][:kc]
	pb = pb[:kc*fastNC]
	for p := range kc {
		row := pb[p*fastNC:][:fastNC]
		b0, b1 := archsimd.LoadFloat32x16Slice(row), archsimd.LoadFloat32x16Slice(row[16:])
		x := archsimd.BroadcastFloat32x16(a0[p])
		c00, c01 = b0.MulAdd(x, c00), b1.MulAdd(x, c01)
		x = archsimd.BroadcastFloat32x16(a1[p])
		c10, c11 = b0.MulAdd(x, c10), b1.MulAdd(x, c11)
		x = archsimd.BroadcastFloat32x16(a2[p])
		c20, c21 = b0.MulAdd(x, c20), b1.MulAdd(x, c21)
		x = archsimd.BroadcastFloat32x16(a3[p])
		c30, c31 = b0.MulAdd(x, c30), b1.MulAdd(x, c31)
	}
	c00.StoreSlice(acc[0:])
	c01.StoreSlice(acc[16:])
	c10.StoreSlice(acc[32:])
	c11.StoreSlice(acc[48:])
	c20.StoreSlice(acc[64:])
	c21.StoreSlice(acc[80:])
	c30.StoreSlice(acc[96:])
	c31.StoreSlice(acc[112:])
	archsimd.ClearAVXUpperBits()
}

// fastTile1 is fastTile4 for one row.
func fastTile1(acc, a, pb []float32, kc int) {
	c0, c1 := archsimd.LoadFloat32x16Slice(acc[0:]), archsimd.LoadFloat32x16Slice(acc[16:])
	for p := range kc {
		row := pb[p*fastNC:][:fastNC]
		x := archsimd.BroadcastFloat32x16(a[p])
		c0, c1 = archsimd.LoadFloat32x16Slice(row).MulAdd(x, c0), archsimd.LoadFloat32x16Slice(row[16:]).MulAdd(x, c1)
	}
	c0.StoreSlice(acc[0:])
	c1.StoreSlice(acc[16:])
	archsimd.ClearAVXUpperBits()
}

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
