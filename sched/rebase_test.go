package sched_test

import (
	"context"
	"testing"
	"time"

	"atoll/policies"
	"atoll/sched"
)

// A real device's clock runs from Open, and setting a run up (compiling,
// uploading weights) takes seconds before Run starts. Arrivals are relative
// to the run's start, so that time must not show up as queueing (it did on
// the H200: the first GPU demo's "isolated" requests were seconds late).
func TestRunArrivalsAreRelativeToItsStart(t *testing.T) {
	lat := func(setup time.Duration) time.Duration {
		dev := newSim(t)
		if err := dev.Wait(context.Background(), setup); err != nil {
			t.Fatal(err)
		}
		w := smallWorkload(t, 2*time.Millisecond, 20*time.Millisecond)
		w.BE = nil
		p, err := policies.ByName("dedicated")
		if err != nil {
			t.Fatal(err)
		}
		tr, err := sched.Run(context.Background(), dev, w, sched.Options{Policy: p, Duration: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if tr.Start < setup {
			t.Fatalf("trace starts at %v, before the device clock at Run (%v)", tr.Start, setup)
		}
		var worst time.Duration
		for _, r := range tr.Requests {
			worst = max(worst, r.End-r.Arrival)
		}
		if len(tr.Requests) == 0 {
			t.Fatal("no requests")
		}
		return worst
	}
	fresh, late := lat(0), lat(5*time.Second)
	if late != fresh {
		t.Fatalf("worst latency %v after 5 s of setup, %v without: setup time leaked into latency", late, fresh)
	}
}
