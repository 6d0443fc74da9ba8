package kernels

import (
	"fmt"
	"math"
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

// TestVectorMathMatchesScalar: the serving executor's float32 vector
// functions against their float64 (or bit-exact) scalar definitions,
// over a sweep that covers both tails and every remainder length.
func TestVectorMathMatchesScalar(t *testing.T) {
	var xs []float64
	for x := -30.0; x <= 30; x += 0.0137 {
		xs = append(xs, x)
	}
	xs = append(xs, 0, -0.0, 1e-30, -1e-30, 100, -100, 1e6, -1e6)
	for _, a := range []Act{ActGELU, ActTanh} {
		got := append([]float64(nil), xs...)
		actFast(got, a)
		for i, x := range xs {
			want := act(x, a)
			if d := math.Abs(got[i] - want); d > 2e-6*math.Max(1, math.Abs(want)) {
				t.Errorf("act %d of %g: %g, want %g", a, x, got[i], want)
			}
		}
	}
	for n := range 20 {
		src := xs[:len(xs)-8-n] // finite shifted exponents
		dst := make([]float64, len(src))
		sum := expShiftFast(dst, src, 30)
		want := 0.0
		for i, x := range src {
			e := math.Exp(x - 30)
			want += e
			// float32: the argument's rounding (6e-8 of it) and the polynomial's 2e-7
			if math.Abs(dst[i]-e) > e*(3e-7+1e-7*math.Abs(x-30)) {
				t.Fatalf("e^(%g-30) = %g, want %g", x, dst[i], e)
			}
		}
		if math.Abs(sum-want) > 1e-6*want {
			t.Errorf("sum of %d: %g, want %g", len(src), sum, want)
		}
	}
	special := []float64{math.Inf(1), math.Inf(-1), math.NaN(), 3.4e38, -3.4e38, 1e-45, 1.00390625, 1.01171875, -2.5e-39}
	vals := append(append([]float64(nil), xs...), special...)
	got, want := append([]float64(nil), vals...), append([]float64(nil), vals...)
	roundBF16Fast(got)
	roundBF16Generic(want)
	for i := range got {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
			t.Errorf("bf16 of %g: %g, want %g", vals[i], got[i], want[i])
		}
	}
}
