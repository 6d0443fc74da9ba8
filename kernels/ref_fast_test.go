package kernels_test

import (
	"math/rand/v2"
	"testing"

	"atoll/kernels"
)

// TestMatMulFastMatchesMatMul: on ragged shapes (rows and columns not
// multiples of the 8×32 tile, more than one 192-row block, K across block boundaries), the float32
// fused product stays within float32 accumulation error of the plain
// loop's float64 one.
func TestMatMulFastMatchesMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range [][3]int{{1, 1, 1}, {3, 5, 7}, {4, 32, 256}, {5, 33, 257}, {8, 32, 1}, {37, 70, 600}, {128, 96, 768}, {9, 1000, 3}, {200, 64, 600}, {400, 33, 40}} {
		m, n, k := s[0], s[1], s[2]
		a, b := make([]float64, m*k), make([]float64, k*n)
		for i := range a {
			a[i] = float64(float32(rng.NormFloat64()))
		}
		for i := range b {
			b[i] = float64(float32(rng.NormFloat64()))
		}
		want, got := make([]float64, m*n), make([]float64, m*n)
		kernels.MatMul(want, a, b, m, n, k)
		kernels.MatMulFast(got, a, b, m, n, k)
		if e := kernels.RelErr(got, want); e > 1e-6 {
			t.Errorf("%dx%dx%d: relative error %.3g, want ≤ 1e-6", m, n, k, e)
		}
	}
}
