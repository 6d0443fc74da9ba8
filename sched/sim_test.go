package sched_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/policies"
	"atoll/profiles"
	"atoll/sched"
	"atoll/sched/schedtest"
)

func mustProfile(t testing.TB, name, text string) *profiles.Profile {
	t.Helper()
	p, err := schedtest.ParseProfile(name, text)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// smallWorkload: an HP model of 8 kernels (≈400 µs solo) arriving every
// period, and two BE clients: one with long multi-wave kernels, one with
// short ones.
func smallWorkload(t testing.TB, period, dur time.Duration) sched.Workload {
	hp := mustProfile(t, "hp", `
conv1 dur=60us grid=132 block=256 class=compute sms=17 scale=66:110us,132:60us
bn1 dur=20us grid=264 block=256 class=memory sms=33
conv2 dur=80us grid=264 block=256 class=compute sms=33 scale=33:250us,66:130us,132:80us
relu dur=10us grid=132 block=256 class=memory
conv3 dur=80us grid=264 block=256 class=compute sms=33
pool dur=30us grid=66 block=256 class=memory sms=9
fc dur=100us grid=132 block=256 class=compute sms=17
softmax dur=20us grid=1 block=256 class=unknown sms=1
`)
	be1 := mustProfile(t, "train", `
fwd dur=400us grid=4224 block=256 class=compute scale=33:1600us,66:800us,99:533us
act dur=20us grid=528 block=256 class=memory scale=33:60us,66:30us
bwd dur=800us grid=8448 block=256 class=compute
opt dur=50us grid=1056 block=256 class=memory scale=33:150us,66:80us
`)
	be2 := mustProfile(t, "batch", `
emb dur=15us grid=66 block=128 class=memory scale=16:30us,33:15us
gemm dur=60us grid=1056 block=256 class=compute scale=33:240us,66:120us,99:80us,115:70us
norm dur=8us grid=132 block=128 class=memory scale=16:20us
`)
	arr := periodic(period/2, period, dur)
	return sched.Workload{
		HP: []sched.HPWorkload{{Name: "hp", Profile: hp, Arrivals: arr}},
		BE: []sched.BEWorkload{{Name: "train", Profile: be1}, {Name: "batch", Profile: be2, Start: 100 * time.Microsecond}},
	}
}

func newSim(t testing.TB) *sim.Device {
	t.Helper()
	d, err := sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func pct(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// TestRunPolicies runs every policy on the simulator and checks the trace
// is sane: every admitted request measured once with arrival <= start <
// end, BE work only where the policy runs BE, preemption records only
// where the policy preempts.
func TestRunPolicies(t *testing.T) {
	const dur = 40 * time.Millisecond
	w := smallWorkload(t, time.Millisecond, dur)
	lat := map[string]time.Duration{}
	work := map[string]time.Duration{}
	for _, name := range policies.Names() {
		t.Run(name, func(t *testing.T) {
			pol, err := policies.ByName(name)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: pol, Duration: dur, Warmup: 5 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for _, a := range w.HP[0].Arrivals {
				if a >= 5*time.Millisecond {
					want++
				}
			}
			if len(tr.Requests) != want {
				t.Errorf("%d requests measured, want %d", len(tr.Requests), want)
			}
			var lats []time.Duration
			seen := map[int]bool{}
			for _, r := range tr.Requests {
				if seen[r.ID] {
					t.Errorf("request %d measured twice", r.ID)
				}
				seen[r.ID] = true
				if !(r.Arrival <= r.Start && r.Start < r.End) {
					t.Errorf("request %+v: want arrival <= start < end", r)
				}
				if r.Service() < w.HP[0].Profile.Total() {
					t.Errorf("request %d served in %v, faster than solo %v", r.ID, r.Service(), w.HP[0].Profile.Total())
				}
				lats = append(lats, r.Latency())
			}
			lat[name] = pct(lats, 0.99)
			work[name] = tr.BEWork
			if (name == "dedicated") != (tr.BEWork == 0) {
				t.Errorf("BE work %v under %s", tr.BEWork, name)
			}
			if name != "dedicated" && len(tr.Iterations) == 0 {
				t.Errorf("no BE iteration finished")
			}
			if tr.BEWork > 2*tr.Window() {
				t.Errorf("BE work %v exceeds 2 clients x window %v", tr.BEWork, tr.Window())
			}
			preempts := name == "reef" // atoll preempts only with preempt=true
			if preempts != (len(tr.Preemptions) > 0) {
				t.Errorf("%d preemption records under %s", len(tr.Preemptions), name)
			}
			for _, p := range tr.Preemptions {
				if p.Latency() < 0 || p.Latency() > 2*time.Millisecond {
					t.Errorf("preemption %+v: latency %v out of range", p, p.Latency())
				}
			}
			if name == "reef" && tr.PaddedLaunches == 0 {
				t.Errorf("no padded launch under %s", name)
			}
			t.Logf("%s: p50 %v p99 %v BE work %v/%v (%.2f) iterations %d preemptions %d padded %d launches %d",
				name, pct(lats, 0.5), pct(lats, 0.99), tr.BEWork, tr.Window(), float64(tr.BEWork)/float64(tr.Window()),
				len(tr.Iterations), len(tr.Preemptions), tr.PaddedLaunches, tr.Launches)
		})
	}
	// Orders that hold by construction of the mechanisms, not by tuning:
	// plain streams hurt HP more than stream priorities, which hurt more
	// than atoll's preemption; dedicated is the floor.
	if !(lat["dedicated"] <= lat["atoll"] && lat["atoll"] < lat["streams"] && lat["priority"] < lat["streams"]) {
		t.Errorf("p99 latencies out of the expected order: %v", lat)
	}
}
