package sched_test

import (
	"context"
	"testing"
	"time"

	"atoll/policies"
	"atoll/sched"
)

// TestAttributionSumsExactly: for every policy on the simulator, every
// measured request's latency is its kernels' solo time plus its causes, to
// the nanosecond, and causes that need BE work are zero without BE.
func TestAttributionSumsExactly(t *testing.T) {
	for _, name := range policies.Names() {
		t.Run(name, func(t *testing.T) {
			p, err := policies.ByName(name)
			if err != nil {
				t.Fatal(err)
			}
			w := smallWorkload(t, 700*time.Microsecond, 40*time.Millisecond)
			if name == "dedicated" {
				w.BE = nil
			}
			tr, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: p, Duration: 40 * time.Millisecond, Warmup: 2 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Requests) < 40 {
				t.Fatalf("only %d requests measured", len(tr.Requests))
			}
			var beCaused time.Duration
			for _, r := range tr.Requests {
				if got := r.Solo + r.Causes.Sum(); got != r.Latency() {
					t.Fatalf("request %d: solo %v + causes %v = %v, latency %v", r.ID, r.Solo, r.Causes, got, r.Latency())
				}
				if r.Solo != w.HP[0].Profile.Total() {
					t.Fatalf("request %d: solo %v, profile total %v", r.ID, r.Solo, w.HP[0].Profile.Total())
				}
				for _, c := range []sched.Cause{sched.CauseHPQueue, sched.CausePolicy, sched.CauseHost} {
					if r.Causes[c] < 0 {
						t.Fatalf("request %d: negative %s %v", r.ID, c, r.Causes[c])
					}
				}
				beCaused += r.Causes[sched.CauseCoRun] + r.Causes[sched.CauseDrain] + r.Causes[sched.CausePadded]
			}
			if len(w.BE) == 0 && beCaused != 0 {
				t.Fatalf("no BE client, but %v of delay blamed on BE", beCaused)
			}
			if len(w.BE) == 0 && len(tr.BlameByKernel) != 0 {
				t.Fatalf("no BE client, but kernels blamed: %v", tr.BlameByKernel)
			}
			if name == "streams" && beCaused <= 0 {
				t.Fatalf("plain streams beside two BE clients: no delay blamed on BE (%v)", beCaused)
			}
		})
	}
}

// TestAttributionHPQueue: requests arriving together wait for each other,
// and that wait is the hp-queue cause, not BE's.
func TestAttributionHPQueue(t *testing.T) {
	p, _ := policies.ByName("dedicated")
	w := smallWorkload(t, time.Millisecond, 10*time.Millisecond)
	w.BE = nil
	w.HP[0].Arrivals = []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}
	tr, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: p, Duration: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Requests) != 3 {
		t.Fatalf("%d requests", len(tr.Requests))
	}
	solo := w.HP[0].Profile.Total()
	for i, r := range tr.Requests {
		q := r.Causes[sched.CauseHPQueue]
		// Request i waits for the i before it: about i solo times.
		if want := time.Duration(i) * solo; q < want*9/10 || q > want*11/10+50*time.Microsecond {
			t.Errorf("request %d: hp-queue %v, want about %v (causes %v)", i, q, want, r.Causes)
		}
	}
}

// TestRunHostTime: the driver's rounds hold its launches and polls, and
// the run's wall time holds its rounds (the host split the reports give
// per launch: decideUs is Round less the launches' and polls' parts).
func TestRunHostTime(t *testing.T) {
	p, err := policies.ByName("atoll")
	if err != nil {
		t.Fatal(err)
	}
	w := smallWorkload(t, 700*time.Microsecond, 20*time.Millisecond)
	tr, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: p, Duration: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h := tr.Host
	parts := h.Bind + h.Launch + h.Record + h.Poll
	if h.Wall <= 0 || h.Round <= 0 || h.Round > h.Wall || parts > h.Round || tr.Launches == 0 {
		t.Errorf("host time: wall %v, rounds %v, launches and polls %v (%d launches): want 0 < launches and polls <= rounds <= wall", h.Wall, h.Round, parts, tr.Launches)
	}
}
