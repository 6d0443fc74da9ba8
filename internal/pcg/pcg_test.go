package pcg_test

import (
	"math/rand/v2"
	"testing"

	"atoll/internal/pcg"
)

// TestSameDrawsAsRandV2: from the same seeds, every draw is math/rand/v2's
// (PCG with rand.Rand's Float64 and IntN), interleaved as callers mix them,
// for powers of two, small and huge bounds (rejections included).
func TestSameDrawsAsRandV2(t *testing.T) {
	bounds := []int{1, 2, 3, 7, 64, 1000, 4999, 1 << 20, 3 << 61, 1<<63 - 1}
	for _, seed := range [][2]uint64{{0, 0}, {1, 2}, {42, 0xcbf29ce484222325}, {^uint64(0), 7}} {
		want := rand.New(rand.NewPCG(seed[0], seed[1]))
		got := pcg.New(seed[0], seed[1])
		for i := range 30000 {
			switch i % 3 {
			case 0:
				if g, w := got.Float64(), want.Float64(); g != w {
					t.Fatalf("seeds %v, draw %d: Float64 %v, want %v", seed, i, g, w)
				}
			case 1:
				n := bounds[i%len(bounds)]
				if g, w := got.IntN(n), want.IntN(n); g != w {
					t.Fatalf("seeds %v, draw %d: IntN(%d) %v, want %v", seed, i, n, g, w)
				}
			default:
				if g, w := got.Uint64(), want.Uint64(); g != w {
					t.Fatalf("seeds %v, draw %d: Uint64 %v, want %v", seed, i, g, w)
				}
			}
		}
	}
}
