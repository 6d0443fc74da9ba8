//go:build !(goexperiment.simd && amd64)

package kernels

// matmul without vector registers: a row at a time.
func matmul(c, a, b []float64, m, n, k int) { matmulRows(c, a, b, m, n, k) }
