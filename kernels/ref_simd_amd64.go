//go:build goexperiment.simd && amd64

package kernels

import "simd/archsimd"

// simdOK: the CPU runs AVX2 (256-bit vectors of four float64).
var simdOK = archsimd.X86.AVX2()

// matmul with AVX2: 4x8 tiles in vector registers (tile4x8); a row at a
// time on a CPU without AVX2.
func matmul(c, a, b []float64, m, n, k int) {
	if !simdOK {
		matmulRows(c, a, b, m, n, k)
		return
	}
	matmulTiled(c, a, b, m, n, k, tile4x8)
}

// tile4x8 is matmul's micro-kernel on AVX2: c[r·n+q] (r < 4, q < 8) plus,
// for p in [0, kc) in order, a[r·lda+k0+p]·b[p·n+q], the tile in eight
// vector registers, each step a broadcast of a[r][p] multiplied by two
// vectors of b's row p, then added — a multiply then an add per element,
// as the plain loop does, so the sums are the same bit for bit.
func tile4x8(c, a, b []float64, n, lda, kc, k0 int) {
	c0, c1, c2, c3 := c[:8], c[n:n+8], c[2*n:2*n+8], c[3*n:3*n+8]
	v00, v01 := archsimd.LoadFloat64x4Slice(c0), archsimd.LoadFloat64x4Slice(c0[4:])
	v10, v11 := archsimd.LoadFloat64x4Slice(c1), archsimd.LoadFloat64x4Slice(c1[4:])
	v20, v21 := archsimd.LoadFloat64x4Slice(c2), archsimd.LoadFloat64x4Slice(c2[4:])
	v30, v31 := archsimd.LoadFloat64x4Slice(c3), archsimd.LoadFloat64x4Slice(c3[4:])
	a0, a1, a2, a3 := a[k0:][:kc], a[lda+k0:][:kc], a[2*lda+k0:][:kc], a[3*lda+k0:][:kc]
	for p := range kc {
		bp := b[p*n:][:8]
		b0, b1 := archsimd.LoadFloat64x4Slice(bp), archsimd.LoadFloat64x4Slice(bp[4:])
		x := archsimd.BroadcastFloat64x4(a0[p])
		v00, v01 = v00.Add(x.Mul(b0)), v01.Add(x.Mul(b1))
		x = archsimd.BroadcastFloat64x4(a1[p])
		v10, v11 = v10.Add(x.Mul(b0)), v11.Add(x.Mul(b1))
		x = archsimd.BroadcastFloat64x4(a2[p])
		v20, v21 = v20.Add(x.Mul(b0)), v21.Add(x.Mul(b1))
		x = archsimd.BroadcastFloat64x4(a3[p])
		v30, v31 = v30.Add(x.Mul(b0)), v31.Add(x.Mul(b1))
	}
	v00.StoreSlice(c0)
	v01.StoreSlice(c0[4:])
	v10.StoreSlice(c1)
	v11.StoreSlice(c1[4:])
	v20.StoreSlice(c2)
	v21.StoreSlice(c2[4:])
	v30.StoreSlice(c3)
	v31.StoreSlice(c3[4:])
	archsimd.ClearAVXUpperBits()
}
