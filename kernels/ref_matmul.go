package kernels

// matmulKC is the K block of matmul: a 4x8 tile's strip of B over it stays
// in L1 and the A rows it meets in L2.
const matmulKC = 256

// matmul (ref_simd_amd64.go, ref_rows.go) sets c = a·b for row-major a
// (m×k) and b (k×n), c zeroed. Every element is the sum over p of
// a[i][p]·b[p][j], added in order from zero with a multiply then an add (no
// fused multiply-add), exactly as the plain loop nest computes it: the
// blocking changes which element is computed when, not how, so the result
// is the same bit for bit on every build.

// MatMul is the CPU reference's matrix product (matmul): c = a·b for
// row-major a (m×k) and b (k×n) into a zeroed c, each element summed in
// the plain loop's order, so it is the same bit for bit as
// `for p := range k { v += a[i][p]*b[p][j] }` from zero.
func MatMul(c, a, b []float64, m, n, k int) { matmul(c, a, b, m, n, k) }

// matmulTiled is matmul in tiles of 4 rows × 8 columns run by tile (the
// vector micro-kernel) over K blocks, the rest element by element; column
// tiles are split across the CPUs.
func matmulTiled(c, a, b []float64, m, n, k int, tile func(c, a, b []float64, n, lda, kc, k0 int)) {
	m4, n8 := m/4*4, n/8*8
	tiles := n8 / 8
	inParts(tiles, m*n*k, func(t0, t1 int) {
		for k0 := 0; k0 < k; k0 += matmulKC {
			k1 := min(k, k0+matmulKC)
			for j := t0 * 8; j < t1*8; j += 8 {
				for i := 0; i < m4; i += 4 {
					tile(c[i*n+j:], a[i*k:], b[k0*n+j:], n, k, k1-k0, k0)
				}
			}
		}
		j0, j1 := t0*8, t1*8
		if t1 == tiles {
			j1 = n // the last part: the columns past the last whole tile
		}
		for i := range m {
			for j := j0; j < j1; j++ {
				if i < m4 && j < n8 {
					continue
				}
				v := 0.0
				for p := range k {
					v += a[i*k+p] * b[p*n+j]
				}
				c[i*n+j] = v
			}
		}
	})
}

// matmulRows is matmul a row at a time (each row of c gathers a[i][p]·b's
// row p for p in order), rows split across the CPUs: the scalar build's.
func matmulRows(c, a, b []float64, m, n, k int) {
	eachRow(m, m*n*k, func(i int) {
		row := c[i*n : (i+1)*n]
		for p, av := range a[i*k : (i+1)*k] {
			brow := b[p*n : (p+1)*n]
			for j := range row {
				row[j] += av * brow[j]
			}
		}
	})
}
