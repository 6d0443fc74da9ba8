package models

import (
	"math/rand/v2"
	"testing"
)

// TestPCGIsRandV2s: fillUniform's generator draws what math/rand/v2's PCG
// does from the same seeds (the weights of every model and the golden
// files made from them depend on it).
func TestPCGIsRandV2s(t *testing.T) {
	for _, seed := range [][2]uint64{{0, 0}, {1, 2}, {42, 0xcbf29ce484222325}, {^uint64(0), 7}} {
		want := rand.New(rand.NewPCG(seed[0], seed[1]))
		got := pcg{seed[0], seed[1]}
		for i := range 10000 {
			if g, w := got.float64(), want.Float64(); g != w {
				t.Fatalf("seeds %v, draw %d: %v, want %v", seed, i, g, w)
			}
		}
	}
}
