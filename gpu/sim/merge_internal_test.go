package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMergeSortedMatchesSort: two sorted runs of SM ids (disjoint, as
// classes' are; either may be empty, come first or interleave) merge into
// what sorting them gives, with the scratch reused across calls.
func TestMergeSortedMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var buf []int16
	for range 2000 {
		perm := rng.Perm(132)
		n := rng.IntN(len(perm) + 1)
		m := rng.IntN(len(perm) - n + 1)
		left, right := make([]int16, n), make([]int16, m)
		for i := range left {
			left[i] = int16(perm[i])
		}
		for i := range right {
			right[i] = int16(perm[n+i])
		}
		slices.Sort(left)
		slices.Sort(right)
		ids := append(append([]int16(nil), left...), right...)
		want := slices.Sorted(slices.Values(ids))
		buf = mergeSorted(ids, n, buf)
		if !slices.Equal(ids, want) {
			t.Fatalf("merge of %v and %v: %v, want %v", left, right, ids, want)
		}
	}
}
