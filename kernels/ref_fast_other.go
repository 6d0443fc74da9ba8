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

func expShiftFast(dst, src []float64, sub float64) float64 { return expShiftGeneric(dst, src, sub) }

func actFast(v []float64, a Act) { actGeneric(v, a) }

func roundBF16Fast(v []float64) { roundBF16Generic(v) }
