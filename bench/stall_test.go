package bench

import (
	"strings"
	"testing"
)

// The matrix's stall line names each run's stalls and says nothing where
// no report watched for them (simulated runs, older reports).
func TestStallLine(t *testing.T) {
	rs := []*Report{
		{Policy: "dedicated-1", HostStalls: &StallStat{Count: 3, TotalMs: 52.5, LongestMs: 41.2}},
		{Policy: "orion", HostStalls: &StallStat{}},
		{Policy: "old"},
	}
	got := stallLine(rs)
	want := "dedicated-1 3, 52.5 ms in all, longest 41.2 ms; orion none"
	if got != want {
		t.Errorf("stallLine = %q, want %q", got, want)
	}
	if s := stallLine(rs[2:]); s != "" {
		t.Errorf("no report watched, stallLine = %q, want empty", s)
	}
	slow := []*Report{{Policy: "priority", HostPerLaunch: &HostSplit{SlowLaunches: 12, SlowLaunchMs: 9.25}}, {Policy: "atoll", HostPerLaunch: &HostSplit{}}, {Policy: "old"}}
	if got, want := slowLaunchLine(slow), "priority 12, 9.2 ms in all"; got != want {
		t.Errorf("slowLaunchLine = %q, want %q", got, want)
	}
	if got := slowLaunchLine(slow[1:]); got != "" {
		t.Errorf("no slow launch, slowLaunchLine = %q", got)
	}
	if h := Describe(rs[0]); !strings.Contains(h, "the host stalled 3 times in the dedicated-1 run") {
		t.Errorf("header lacks the stalls:\n%s", h)
	}
	if h := Describe(rs[1]); strings.Contains(h, "stalled") {
		t.Errorf("header of a run without stalls mentions them:\n%s", h)
	}
}

// Where every run watched for stalls they decide whether a cell's runs
// are suspect; the wake-up lateness measured before them only where they
// did not.
func TestStallsSeen(t *testing.T) {
	w := WorkloadInfo{RatePerSec: 900}
	none := &Report{HostStalls: &StallStat{}, HPCompleted: 5000, Workload: w}
	// 1 + 0.0011 s × 900/s ≈ 2 of 5,000 requests: below the tail.
	short := &Report{HostStalls: &StallStat{Count: 1, TotalMs: 1.1, LongestMs: 1.1}, HPCompleted: 5000, Workload: w}
	// 3 + 0.09 s × 900/s = 84 of 5,000: past half the 1 % tail.
	long := &Report{HostStalls: &StallStat{Count: 3, TotalMs: 90, LongestMs: 40}, HPCompleted: 5000, Workload: w}
	old := &Report{}
	for _, c := range []struct {
		rs               []*Report
		watched, stalled bool
	}{
		{[]*Report{none, none}, true, false},
		{[]*Report{none, short}, true, false},
		{[]*Report{none, long}, true, true},
		{[]*Report{none, old}, false, false},
		{nil, false, false},
	} {
		w, s := stallsSeen(c.rs)
		if w != c.watched || s != c.stalled {
			t.Errorf("stallsSeen(%d reports) = %v, %v; want %v, %v", len(c.rs), w, s, c.watched, c.stalled)
		}
	}
}

func TestBusySplitLine(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	rs := []*Report{
		{Policy: "dedicated-1", HPBusyShare: f(0.5), BEBesideBusyHP: f(0), BEWhileHPIdle: f(0)},
		{Policy: "orion", BEWorkPerSec: 0.3, HPBusyShare: f(0.514), BEBesideBusyHP: f(0.05), BEWhileHPIdle: f(0.474)},
		{Policy: "old", BEWorkPerSec: 0.4},
		{Policy: "atoll", BEWorkPerSec: 0.4, HPBusyShare: f(0.54), BEBesideBusyHP: f(0.154), BEWhileHPIdle: f(0.627), BEDryShare: f(0.081),
			BEDryGaps: &Latency{Count: 812, P50: 31.4, P99: 1204.6}},
	}
	if got, want := busySplitLine(rs), "orion 0.05 / 0.47 (51 %); atoll 0.15 / 0.63 (54 %, BE's stream empty 8 % of it in 812 gaps, p50 31 / p99 1205 µs)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := busySplitLine(rs[:1]); got != "" {
		t.Errorf("no BE run: got %q, want none", got)
	}
}
