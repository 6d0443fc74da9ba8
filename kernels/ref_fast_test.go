package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"atoll/kernels"
)

// TestMatMulFastMatchesMatMul: on ragged shapes (rows and columns not
// multiples of the 4×32 tile, K across block boundaries), the float32
// fused product stays within float32 accumulation error of the plain
// loop's float64 one.
func TestMatMulFastMatchesMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range [][3]int{{1, 1, 1}, {3, 5, 7}, {4, 32, 256}, {5, 33, 257}, {37, 70, 600}, {128, 96, 768}, {9, 1000, 3}} {
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

// BenchmarkMatMulFast: BERT's feed-forward product at sequence 128 and a
// ResNet-50 3x3 convolution's im2col product at batch 1 (GFLOP/s).
func BenchmarkMatMulFast(b *testing.B) {
	for _, s := range [][3]int{{128, 3072, 768}, {3136, 64, 576}} {
		m, n, k := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("%dx%dx%d", m, n, k), func(b *testing.B) {
			a, w, c := make([]float64, m*k), make([]float64, k*n), make([]float64, m*n)
			for i := range a {
				a[i] = float64(i%7) - 3
			}
			for i := range w {
				w[i] = float64(i%5) - 2
			}
			for b.Loop() {
				kernels.MatMulFast(c, a, w, m, n, k)
			}
			b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
