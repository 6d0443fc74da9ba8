//go:build !(goexperiment.simd && amd64)

package kernels

// fastOK: no AVX-512 path in this build.
const fastOK = false

func matmulFast(c, a []float64, pb *packedB, m int) { matmulFastGeneric(c, a, pb, m) }

func toF32(dst []float32, src []float64) {
	for i, v := range src {
		dst[i] = float32(v)
	}
}
