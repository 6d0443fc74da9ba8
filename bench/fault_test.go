package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/faulty"
	"atoll/gpu/sim"
)

// TestFaultSweepThroughTheStack fails each device call of a small bench
// run in turn — solo calibration, the dedicated and BE-alone baselines and
// the policy's run, through the scheduler's driver loop — and checks that
// every failure comes back as a driver error: no hang, no panic, no report
// made of half a run.
func TestFaultSweepThroughTheStack(t *testing.T) {
	if testing.Short() {
		t.Skip("sweep")
	}
	for _, policy := range []string{"priority", "reef", "atoll"} {
		t.Run(policy, func(t *testing.T) {
			var devs []*faulty.Device
			fail := 0
			c := demoConfig(t, 3*time.Millisecond)
			c.Warmup = time.Millisecond
			// A bench run opens several devices one after another (solo
			// calibration, baselines, the policy); call i of the sweep is
			// the i-th counted call across them.
			callsSoFar := func() int {
				n := 0
				for _, d := range devs {
					n += d.Calls()
				}
				return n
			}
			c.NewDevice = func() (gpu.Device, error) {
				s, err := sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1})
				if err != nil {
					return nil, err
				}
				f := faulty.New(s)
				if base := callsSoFar(); fail > base {
					if err := f.FailAt(fail - base); err != nil {
						t.Fatal(err)
					}
				}
				devs = append(devs, f)
				return f, nil
			}
			run := func() error {
				b, err := Measure(context.Background(), c)
				if err != nil {
					return err
				}
				_, err = RunPolicy(context.Background(), c, b, policy)
				return err
			}
			if err := run(); err != nil {
				t.Fatalf("clean run failed: %v", err)
			}
			total := callsSoFar()
			if total < 500 {
				t.Fatalf("only %d device calls: the sweep would prove little", total)
			}
			step := max(1, total/120) // keep -race CI time bounded; still over a hundred failure points per policy
			failed, tried := 0, 0
			for fail = 1; fail <= total; fail += step {
				devs = nil
				tried++
				done := make(chan error, 1)
				go func() { done <- run() }()
				select {
				case err := <-done:
					if err == nil {
						// Failures in cleanup calls (Destroy*, Free, Close) are
						// ignored by design; anything else must surface.
						continue
					}
					if !errors.Is(err, gpu.ErrDriver) || !errors.Is(err, faulty.ErrInjected) {
						t.Fatalf("failing call %d/%d: error does not wrap the injected driver error: %v", fail, total, err)
					}
					failed++
				case <-time.After(30 * time.Second):
					t.Fatalf("failing call %d/%d: the run hung", fail, total)
				}
			}
			// Only cleanup calls may fail silently; they are a small part.
			if failed < tried*3/4 {
				t.Fatalf("only %d of %d injected failures surfaced", failed, tried)
			}
			t.Logf("%d device calls, %d failure points, %d surfaced as errors", total, tried, failed)
		})
	}
}
