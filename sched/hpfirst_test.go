package sched_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/policies"
	"atoll/sched"
)

// An HP request that arrives while the host refills BE's queue is launched
// before the refills of its round, and a round's refills stop for it when
// it comes due during them: with 15 µs of host time per launch and BE
// relaunching a short kernel at every completion, HP waits for the host
// less than one launch on average. Sending a round's launches in decision
// order made it wait behind the refills decided before it.
func TestHPLaunchesBeforeBERefills(t *testing.T) {
	var b strings.Builder
	for i := range 60 {
		b.WriteString("k")
		b.WriteString(strings.Repeat("x", i%3))
		b.WriteString(" dur=12us grid=64 block=256 class=memory\n")
	}
	be := mustProfile(t, "short", b.String())
	hp := smallWorkload(t, time.Millisecond, time.Millisecond).HP[0].Profile
	const dur = 40 * time.Millisecond
	var arr []time.Duration
	for a, i := 300*time.Microsecond, 0; a < dur; i++ {
		arr = append(arr, a)
		a += 700*time.Microsecond + time.Duration(i%7)*37*time.Microsecond
	}
	w := sched.Workload{
		HP: []sched.HPWorkload{{Name: "hp", Profile: hp, Arrivals: arr}},
		BE: []sched.BEWorkload{{Name: "short", Profile: be}},
	}
	const cost = 15 * time.Microsecond
	hostWait := func(decisionOrder bool) time.Duration {
		dev, err := sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1, HostLaunchCost: cost})
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		pol, err := policies.ByName("atoll:reserve=off")
		if err != nil {
			t.Fatal(err)
		}
		// BE kernel by kernel: a refill per completion (chunks would make
		// them rarer; TestBEChunkGraphs).
		tr, err := sched.Run(context.Background(), dev, w, sched.Options{Policy: pol, Duration: dur, Warmup: dur / 10, DecisionOrder: decisionOrder, NoBEGraphs: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.Requests) < 40 || tr.BEWork == 0 {
			t.Fatalf("%d requests, BE work %v: the workload did not run", len(tr.Requests), tr.BEWork)
		}
		var host time.Duration
		for _, r := range tr.Requests {
			host += r.Causes[sched.CauseHost]
		}
		return host / time.Duration(len(tr.Requests))
	}
	first, inOrder := hostWait(false), hostWait(true)
	t.Logf("HP waited %v for the host on average, %v with launches in decision order (%v per launch)", first, inOrder, cost)
	if first >= cost {
		t.Errorf("HP waited %v for the host on average, at least one launch's %v: it waits behind BE refills", first, cost)
	}
	if inOrder < 2*cost {
		t.Errorf("in decision order HP waited %v on average, under two launches: the workload does not make HP wait behind refills, so the test proves nothing", inOrder)
	}
}

// Holding BE launches back within a round and stopping their refills for
// an HP arrival keeps every policy's runs whole under host cost: random
// workloads, host times and launch orders, every policy and atoll with
// preemption and padding (whose flags, progress resets and pads act on BE
// launches held back), no error, every request answered, BE work done.
func TestHPFirstRandomRuns(t *testing.T) {
	names := append(policies.Names(), "atoll:preempt=true", "atoll:padding=true", "atoll:split=true", "atoll:be-window=2,be-queue=off")
	seeds := 12
	if testing.Short() {
		seeds = 4
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for seed := range seeds {
				r := rand.New(rand.NewPCG(uint64(seed), 7))
				const dur = 12 * time.Millisecond
				period := time.Duration(200+r.IntN(1500)) * time.Microsecond
				w := smallWorkload(t, period, dur)
				cost := time.Duration(r.IntN(25)) * time.Microsecond
				dev, err := sim.New(sim.Config{Spec: gpu.H100SXM, Seed: uint64(seed), HostLaunchCost: cost})
				if err != nil {
					t.Fatal(err)
				}
				pol, err := policies.ByName(name)
				if err != nil {
					t.Fatal(err)
				}
				order := seed%3 == 2
				tr, err := sched.Run(context.Background(), dev, w, sched.Options{Policy: pol, Duration: dur, DecisionOrder: order})
				dev.Close()
				if err != nil {
					t.Fatalf("seed %d (period %v, host %v per launch, decision order %v): %v", seed, period, cost, order, err)
				}
				if n := len(w.HP[0].Arrivals); len(tr.Requests) != n {
					t.Errorf("seed %d: %d requests answered of %d", seed, len(tr.Requests), n)
				}
				if name != "dedicated" && tr.BEWork == 0 {
					t.Errorf("seed %d: no BE work done", seed)
				}
			}
		})
	}
}
