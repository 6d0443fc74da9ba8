package main

import (
	"testing"

	"atoll/profiler"
)

// coRunByDuration bins BE kernels by profiled time (a bound goes to the
// bin above it), weighs each by that time, and skips kernels either run
// left unmeasured: hand-computed means.
func TestCoRunByDuration(t *testing.T) {
	r := &profiler.CoRunReport{Kernels: []profiler.CoRunBE{
		{Index: 0, ProfileUs: 5, Passes: 3, HPSlowdown: 1.5},
		{Index: 1, ProfileUs: 5, Passes: 3, HPSlowdown: 1.3},
		{Index: 2, ProfileUs: 10, Passes: 3, HPSlowdown: 1.6}, // 10–50
		{Index: 3, ProfileUs: 30, Passes: 3, HPSlowdown: 2.0},
		{Index: 4, ProfileUs: 50, Passes: 3, HPSlowdown: 2.0}, // ≥ 50
		{Index: 5, ProfileUs: 900, Passes: 0},                 // unmeasured here
		{Index: 6, ProfileUs: 900, Passes: 3, HPSlowdown: 9},  // unmeasured there
	}}
	ref := map[int]profiler.CoRunBE{
		0: {Passes: 3, HPSlowdown: 1.1}, 1: {Passes: 3, HPSlowdown: 1.3},
		2: {Passes: 3, HPSlowdown: 1.8}, 3: {Passes: 3, HPSlowdown: 2.2},
		4: {Passes: 3, HPSlowdown: 2.5}, 5: {Passes: 3, HPSlowdown: 1}, 6: {Passes: 0},
	}
	// < 10: (5·1.5 + 5·1.3)/10 = 1.4 here, 1.2 there; 10–50: (10·1.6 +
	// 30·2.0)/40 = 1.9 here, (10·1.8 + 30·2.2)/40 = 2.1 there; ≥ 50: 2.0,
	// 2.5. Shares of 100 µs: 10, 40, 50 %.
	want := "< 10 µs (10 %) 1.400, 1.200; 10–50 µs (40 %) 1.900, 2.100; ≥ 50 µs (50 %) 2.000, 2.500"
	if got := coRunByDuration(r, ref); got != want {
		t.Errorf("coRunByDuration =\n%s\nwant\n%s", got, want)
	}
	if got := coRunByDuration(&profiler.CoRunReport{}, ref); got != "" {
		t.Errorf("no kernels: %q, want empty", got)
	}
}
