package sched_test

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/policies"
	"atoll/sched"
	"atoll/sched/schedtest"
)

// TestBELifecycleRandom drives every policy through random workloads in
// which BE clients get random iteration budgets, are paused at random
// moments and restarted (with a fresh random budget) once drained. From
// the decision log alone it checks, after every event:
//   - a run never completes more iterations than its budget;
//   - nothing of a client is launched (own stream or pad) while it is
//     paused or its budget is spent, not even in the step that spent it;
//   - a restarted client's first launch is kernel 0, and a resumable or
//     padded one comes after a progress reset;
//
// and that the core accepts every completion of a paused client's
// launches and the run drains.
func TestBELifecycleRandom(t *testing.T) {
	iters := 60
	if testing.Short() {
		iters = 15
	}
	for _, name := range policies.Names() {
		t.Run(name, func(t *testing.T) {
			var pauses, restarts, spent, launched int
			for seed := int64(0); seed < int64(iters); seed++ {
				r := rand.New(rand.NewSource(seed))
				cfg := sched.Config{Spec: gpu.H100SXM}
				nHP, nBE := 1+r.Intn(2), 1+r.Intn(3)
				var arrivals [][]time.Duration
				stop := time.Duration(2+r.Intn(20)) * time.Millisecond
				for i := 0; i < nHP; i++ {
					cfg.HP = append(cfg.HP, randProfile(r, fmt.Sprintf("hp%d", i), 1+r.Intn(6), 200))
					var a []time.Duration
					mean := time.Duration(200+r.Intn(3000)) * time.Microsecond
					for at := time.Duration(r.Int63n(int64(mean))); at < stop; at += time.Duration(r.ExpFloat64() * float64(mean)) {
						a = append(a, at)
					}
					arrivals = append(arrivals, a)
				}
				budget := make([]int, nBE) // of the current run; 0 = unlimited
				done := make([]int, nBE)   // iterations done in the current run, from the log
				paused := make([]bool, nBE)
				fresh := make([]bool, nBE) // restarted, nothing launched since
				reset := make([]bool, nBE) // a progress reset since the restart
				for i := 0; i < nBE; i++ {
					cfg.BE = append(cfg.BE, randProfile(r, fmt.Sprintf("be%d", i), 1+r.Intn(5), 300))
					budget[i] = r.Intn(4)
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
				ex := &schedtest.Exec{Core: core, Probe: 200 * time.Microsecond, Iterations: budget}
				seen := 0
				ex.Check = func(st *sched.State) error {
					for _, d := range ex.Log[seen:] {
						switch d.Kind {
						case sched.DecResetProgress:
							reset[d.Client.Index] = true
						case sched.DecIterationDone:
							i := d.Iteration.Client.Index
							done[i]++
							if budget[i] > 0 && done[i] > budget[i] {
								return fmt.Errorf("be%d: %d iterations done in a run with a budget of %d", i, done[i], budget[i])
							}
							if budget[i] > 0 && done[i] == budget[i] {
								spent++
							}
						case sched.DecLaunch:
							l := d.Launch
							i := -1
							if l.Client.Class == sched.BE {
								i = l.Client.Index
							} else if l.Form == gpu.Padded {
								i = l.Pad.Client.Index
							}
							if i < 0 {
								continue
							}
							launched++
							if k := l.Kernel; fresh[i] {
								if l.Form == gpu.Padded {
									k = l.Pad.Kernel
								}
								if k != 0 {
									return fmt.Errorf("t=%v: be%d restarted at k%d, want k0", d.Time, i, k)
								}
								if (l.Form == gpu.Resumable || l.Form == gpu.Padded) && !reset[i] {
									return fmt.Errorf("t=%v: be%d restarted with a %s launch and no progress reset", d.Time, i, l.Form)
								}
								fresh[i] = false
							}
							if paused[i] {
								return fmt.Errorf("t=%v: be%d launched (L%d) while paused", d.Time, i, l.ID)
							}
							if budget[i] > 0 && done[i] >= budget[i] {
								return fmt.Errorf("t=%v: be%d launched (L%d) after its %d iterations", d.Time, i, l.ID, budget[i])
							}
						}
					}
					seen = len(ex.Log)
					return nil
				}
				next := time.Duration(r.Intn(1000)) * time.Microsecond
				ex.Control = func(st *sched.State, now time.Duration) []sched.Event {
					if now < next {
						return nil
					}
					next = now + time.Duration(50+r.Intn(1500))*time.Microsecond
					i := r.Intn(nBE)
					b := st.BE()[i]
					switch {
					case b.Ready() && r.Intn(2) == 0:
						paused[i] = true
						pauses++
						return []sched.Event{{Kind: sched.EvPause, Client: b.ID()}}
					case !b.Ready() && b.InFlight() == 0:
						paused[i], budget[i], done[i] = false, r.Intn(4), 0
						fresh[i], reset[i] = true, false
						restarts++
						return []sched.Event{{Kind: sched.EvReady, Client: b.ID(), Iterations: budget[i]}}
					}
					return nil
				}
				if err := ex.Run(arrivals, stop, stop+10*time.Second); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
			// The test only means something if all three happened (no
			// budget is spent under a policy that never runs BE:
			// dedicated).
			if pauses == 0 || restarts == 0 || spent == 0 && launched > 0 {
				t.Fatalf("pauses=%d restarts=%d budgets spent=%d BE launches=%d: the random runs missed a case", pauses, restarts, spent, launched)
			}
			t.Logf("pauses=%d restarts=%d budgets spent=%d BE launches=%d", pauses, restarts, spent, launched)
		})
	}
}
