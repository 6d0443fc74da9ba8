package sched

import (
	"slices"
	"testing"
)

// dropID removes exactly the one launch and keeps the others in launch
// order, wherever the launch sits, as deleting it by value would.
func TestDropID(t *testing.T) {
	for _, tc := range []struct {
		ids  []LaunchID
		drop LaunchID
	}{
		{[]LaunchID{1, 2, 3, 4}, 1},
		{[]LaunchID{1, 2, 3, 4}, 3},
		{[]LaunchID{1, 2, 3, 4}, 4},
		{[]LaunchID{1, 2, 3, 4}, 9},
		{[]LaunchID{7}, 7},
		{nil, 7},
	} {
		want := slices.DeleteFunc(slices.Clone(tc.ids), func(id LaunchID) bool { return id == tc.drop })
		if got := dropID(slices.Clone(tc.ids), tc.drop); !slices.Equal(got, want) {
			t.Errorf("dropID(%v, %d) = %v, want %v", tc.ids, tc.drop, got, want)
		}
	}
	// Dropping the head repeatedly while appending keeps the order.
	var ids []LaunchID
	next := LaunchID(0)
	for range 1000 {
		ids = append(ids, next, next+1)
		next += 2
		ids = dropID(ids, ids[0])
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] != ids[i-1]+1 {
			t.Fatalf("order lost at %d: %v", i, ids[i-1:i+1])
		}
	}
	if len(ids) != 1000 {
		t.Fatalf("%d launches left, want 1000", len(ids))
	}
}
