package main

import (
	"testing"
	"time"
)

// --sim-launch-cost takes one duration for every launch or three (own
// kernel, product, convolution), and prints back what it holds.
func TestLaunchCostsFlag(t *testing.T) {
	us := time.Microsecond
	for _, c := range []struct {
		in   string
		want launchCosts
		str  string
	}{
		{"8us", launchCosts{8 * us, 8 * us, 8 * us}, "8µs"},
		{"0", launchCosts{}, "0s"},
		{"8us, 11us,17us", launchCosts{8 * us, 11 * us, 17 * us}, "8µs,11µs,17µs"},
	} {
		var got launchCosts
		if err := got.Set(c.in); err != nil {
			t.Fatalf("Set(%q): %v", c.in, err)
		}
		if got != c.want || got.String() != c.str {
			t.Errorf("Set(%q) = %+v (%s), want %+v (%s)", c.in, got, got.String(), c.want, c.str)
		}
	}
	for _, bad := range []string{"", "8us,11us", "8us,11us,17us,1us", "-1us", "8us,-1us,1us", "fast"} {
		var got launchCosts
		if err := got.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted: %+v", bad, got)
		}
	}
	if d := defaultSimLaunchCost; d.kernel >= d.matmul || d.matmul >= d.conv {
		t.Errorf("defaults %v: a product costs the host more than a kernel, a convolution more than a product (results/hostcost-h200)", d.String())
	}
}
