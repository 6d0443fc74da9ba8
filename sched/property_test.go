package sched_test

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/policies"
	"atoll/profiles"
	"atoll/sched"
	"atoll/sched/schedtest"
)

func randProfile(r *rand.Rand, name string, n int, maxDur int) *profiles.Profile {
	p := &profiles.Profile{APIVersion: profiles.APIVersion, Model: name}
	for i := 0; i < n; i++ {
		k := profiles.Kernel{
			Name:       fmt.Sprintf("%s%d", name, i),
			Grid:       [3]int{1 + r.Intn(5000), 1, 1},
			Block:      [3]int{32 << r.Intn(6), 1, 1},
			DurationUs: 1 + float64(r.Intn(maxDur)),
			Class:      []string{profiles.ClassCompute, profiles.ClassMemory, profiles.ClassUnknown}[r.Intn(3)],
		}
		if r.Intn(2) == 0 {
			k.SMsNeeded = 1 + r.Intn(132)
		}
		for m := r.Intn(3); m > 0; m-- {
			k.Scaling = append(k.Scaling, profiles.Point{SMs: 1 + r.Intn(132), DurationUs: 1 + float64(r.Intn(2*maxDur))})
		}
		p.Kernels = append(p.Kernels, k)
	}
	return p
}

// TestInvariantsRandom drives every policy through random workloads on the
// schedtest virtual device and checks the core's invariants after every
// event:
//   - every HP request's kernels are launched exactly once, in order;
//   - no BE client has more own-stream launches in flight than its
//     window (2 for reef, atoll's DefaultBEWindow), its queued work
//     (BEClient.Queued) is zero when nothing of it is in flight, and a
//     Resumable launch is always alone;
//   - once HP has been idle for 1 ms (and the run is not stopping), every
//     flag is down;
//   - every admitted request finishes and the run drains.
func TestInvariantsRandom(t *testing.T) {
	iters := 150
	if testing.Short() {
		iters = 30
	}
	names := append(policies.Names(), "atoll:split=true", "atoll:be-window=2,be-queue=off")
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for seed := int64(0); seed < int64(iters); seed++ {
				r := rand.New(rand.NewSource(seed))
				cfg := sched.Config{Spec: gpu.H100SXM}
				nHP, nBE := 1+r.Intn(2), r.Intn(3)
				var arrivals [][]time.Duration
				stop := time.Duration(1+r.Intn(20)) * time.Millisecond
				for i := 0; i < nHP; i++ {
					cfg.HP = append(cfg.HP, randProfile(r, fmt.Sprintf("hp%d", i), 1+r.Intn(8), 200))
					var a []time.Duration
					mean := time.Duration(100+r.Intn(3000)) * time.Microsecond
					for at := time.Duration(r.Int63n(int64(mean))); at < stop; at += time.Duration(r.ExpFloat64() * float64(mean)) {
						a = append(a, at)
					}
					arrivals = append(arrivals, a)
				}
				for i := 0; i < nBE; i++ {
					cfg.BE = append(cfg.BE, randProfile(r, fmt.Sprintf("be%d", i), 1+r.Intn(6), 600))
				}
				pol, err := policies.ByName(name)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Policy = pol
				core, err := sched.NewCore(cfg)
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				seenHP := false
				ex := &schedtest.Exec{Core: core, Probe: 250 * time.Microsecond, Check: func(st *sched.State) error {
					if st.HPBusy() {
						seenHP = true
					}
					for _, b := range st.BE() {
						window := 2
						if strings.HasPrefix(name, "atoll") && !strings.Contains(name, "be-window=2") {
							window = policies.DefaultBEWindow
						}
						if b.OwnInFlight() > window && name != "streams" && name != "priority" && name != "timeslice" && name != "orion" {
							return fmt.Errorf("%s has %d launches in flight", b.ID(), b.OwnInFlight())
						}
						if q := b.Queued(); q < 0 || q > 0 && b.OwnInFlight() == 0 && !b.ResumableInFlight() {
							return fmt.Errorf("%s: %v queued with %d own launches in flight", b.ID(), q, b.OwnInFlight())
						}
						if b.ResumableInFlight() && b.InFlight() != 1 {
							return fmt.Errorf("%s: a resumable launch shares the client with %d others", b.ID(), b.InFlight()-1)
						}
						idle := !st.HPBusy() && (!seenHP || st.Now()-st.HPIdleSince() > time.Millisecond)
						if idle && !st.Stopping() && b.Raised() && b.InFlight() == 0 {
							return fmt.Errorf("%s: flag still raised with HP idle since %v", b.ID(), st.HPIdleSince())
						}
					}
					return nil
				}}
				if err := ex.Run(arrivals, stop, stop+10*time.Second); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				// HP kernels launched once per request, in order.
				next := make([]int, nHP)
				done := make([]int, nHP)
				for _, d := range ex.Log {
					switch {
					case d.Kind == sched.DecLaunch && d.Launch.Client.Class == sched.HP:
						c := d.Launch.Client.Index
						n := len(cfg.HP[c].Kernels)
						if d.Launch.Kernel != next[c]%n {
							t.Fatalf("seed %d: %s launched k%d, want k%d", seed, d.Launch.Client, d.Launch.Kernel, next[c]%n)
						}
						next[c]++
					case d.Kind == sched.DecRequestDone:
						done[d.Request.Client.Index]++
					}
				}
				for c := range next {
					n := len(cfg.HP[c].Kernels)
					if next[c] != len(arrivals[c])*n || done[c] != len(arrivals[c]) {
						t.Fatalf("seed %d: hp%d: %d kernels launched and %d requests done for %d arrivals of %d kernels",
							seed, c, next[c], done[c], len(arrivals[c]), n)
					}
				}
			}
		})
	}
}
