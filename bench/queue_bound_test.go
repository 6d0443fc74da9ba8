package bench

import (
	"slices"
	"testing"
	"time"
)

// TestIdealQueueTailAtLoad09 is the yardstick for "HP alone at load 0.9"
// figures (docs/kernels.md): one FIFO server whose every request takes
// exactly its solo time S, fed this package's Poisson arrivals at 0.9/S,
// has a p50 latency of about 4 S and a p99 of about 23 S (Lindley's
// recursion over 30 minutes of arrivals at S = 1 ms). A p99 within 15 S at
// that load therefore needs requests served concurrently, or faster than
// solo; no launch path alone reaches it.
func TestIdealQueueTailAtLoad09(t *testing.T) {
	const s = time.Millisecond
	arr, err := Arrivals(Poisson, 0.9/s.Seconds(), 30*time.Minute, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	lat := make([]time.Duration, len(arr))
	free := time.Duration(0) // when the server is next idle
	for i, a := range arr {
		start := max(a, free)
		free = start + s
		lat[i] = free - a
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("%d requests: p50 %.2f S, p99 %.2f S", len(lat), float64(p50)/float64(s), float64(p99)/float64(s))
	if p50 < 3*s || p50 > 5*s || p99 < 20*s || p99 > 26*s {
		t.Errorf("p50 %v, p99 %v of an ideal queue at load 0.9 with S = %v: want about 4 S and 23 S", p50, p99, s)
	}
}
