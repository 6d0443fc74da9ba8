package kernels

import (
	"fmt"
	"testing"
)

// BenchmarkMatMulFast: MatMulFast's product on BERT's feed-forward shape
// at sequence 128 and a ResNet-50 3x3 convolution's im2col shape at batch
// 1, with B packed once as a serving executor's weights are (PackCache) —
// GFLOP/s.
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
			pb := packB(w, k, n)
			for b.Loop() {
				matmulFast(c, a, pb, m)
			}
			b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
