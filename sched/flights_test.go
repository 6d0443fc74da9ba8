package sched

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFlightTableMatchesMap drives the table and a map with the same
// random launches and completions and compares every lookup, the count
// and the ordered IDs.
func TestFlightTableMatchesMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var tab flightTable
	ref := map[LaunchID]*flight{}
	next := LaunchID(0)
	for step := range 20000 {
		if len(ref) == 0 || r.IntN(3) > 0 {
			next += LaunchID(1 + r.IntN(2)) // IDs rise, sometimes with gaps
			f := &flight{req: step}
			tab.put(next, f)
			ref[next] = f
		} else {
			// Complete a random one: mostly old, sometimes the newest.
			ids := tab.ids()
			id := ids[r.IntN(len(ids))]
			if r.IntN(4) == 0 {
				id = ids[0]
			}
			tab.del(id)
			delete(ref, id)
		}
		if tab.n != len(ref) {
			t.Fatalf("step %d: %d in flight, want %d", step, tab.n, len(ref))
		}
		for _, id := range []LaunchID{next, next - 1, next - LaunchID(r.IntN(50)), next + 1, tab.base - 1} {
			if got, want := tab.get(id), ref[id]; got != want {
				t.Fatalf("step %d: get(L%d) = %v, want %v", step, id, got, want)
			}
		}
	}
	want := make([]LaunchID, 0, len(ref))
	for id := range ref {
		want = append(want, id)
	}
	slices.Sort(want)
	if got := tab.ids(); !slices.Equal(got, want) {
		t.Fatalf("ids = %v, want %v", got, want)
	}
}
