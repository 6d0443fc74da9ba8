package sched_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"atoll/gpu"
	"atoll/policies"
	"atoll/profiles"
	"atoll/sched"
)

func TestNewOnlineRejectsBadConfig(t *testing.T) {
	cfg := onlineConfig(t, "atoll")
	if _, err := sched.NewOnline(nil, cfg); !errors.Is(err, sched.ErrConfig) {
		t.Errorf("nil opener: %v", err)
	}
	bad := cfg
	bad.Policy = nil
	if _, err := sched.NewOnline(simOpener(nil), bad); !errors.Is(err, sched.ErrConfig) {
		t.Errorf("nil policy: %v", err)
	}
	bad = cfg
	bad.HP, bad.BE = nil, nil
	if _, err := sched.NewOnline(simOpener(nil), bad); !errors.Is(err, sched.ErrConfig) {
		t.Errorf("no clients: %v", err)
	}
	bad = cfg
	bad.HP = []sched.OnlineClient{{Name: "empty", Profile: &profiles.Profile{}}}
	if _, err := sched.NewOnline(simOpener(nil), bad); err == nil {
		t.Error("empty profile accepted")
	}
	// An opener that fails: Run returns the error, Started is closed.
	o, err := sched.NewOnline(func() (gpu.Device, error) { return nil, gpu.ErrNoDevice }, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Run(context.Background()); !errors.Is(err, gpu.ErrNoDevice) || !errors.Is(err, sched.ErrDevice) {
		t.Errorf("failing opener: %v", err)
	}
	if !errors.Is(o.StartErr(), gpu.ErrNoDevice) {
		t.Errorf("StartErr: %v", o.StartErr())
	}
}

// Every registered policy serves HP requests beside a BE run online,
// without the loop reporting it stuck.
func TestOnlineEveryPolicy(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, name := range policies.Names() {
		t.Run(name, func(t *testing.T) {
			cfg := onlineConfig(t, name)
			o, err := sched.NewOnline(simOpener(nil), cfg)
			if err != nil {
				t.Fatal(err)
			}
			stop := startOnline(t, o)
			run, err := o.StartBE(0, sched.BERun{Iterations: 2})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 4 {
				ch, err := o.Submit(i%2, nil)
				if err != nil {
					t.Fatal(err)
				}
				if r := recv(t, ch); r.Err != nil {
					t.Fatalf("request %d: %v", i, r.Err)
				}
			}
			select {
			case <-run.Ended():
				err := run.Status().Err
				if name == "dedicated" {
					// BE never runs under it: the run ends as stuck and
					// HP keeps being served.
					if !errors.Is(err, sched.ErrStuck) {
						t.Fatalf("BE run under dedicated: %v, want ErrStuck", err)
					}
					if ch, err := o.Submit(0, nil); err != nil || recv(t, ch).Err != nil {
						t.Fatal("HP not served after a stuck BE run")
					}
				} else if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("BE run did not end")
			}
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}

// TestOnlineBERunsLaunchNoMore checks the BE lifecycle from the decisions
// the driver applies: a run of N iterations launches exactly N iterations'
// kernels (the core stops the client in the step that completes the last
// one), a cancelled run launches nothing once it has ended, and the next
// run starts at kernel 0 of a fresh iteration.
func TestOnlineBERunsLaunchNoMore(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, name := range []string{"streams", "reef", "atoll"} {
		t.Run(name, func(t *testing.T) {
			cfg := onlineConfig(t, name)
			nk := len(cfg.BE[0].Profile.Kernels)
			var mu sync.Mutex
			var launches []sched.Launch // BE client 0's own launches and pads
			cfg.OnDecision = func(d sched.Decision) {
				if d.Kind != sched.DecLaunch {
					return
				}
				l := d.Launch
				if l.Client == sched.BEClientID(0) || l.Form == gpu.Padded && l.Pad.Client == sched.BEClientID(0) {
					if l.Form == gpu.Padded {
						l.Kernel = l.Pad.Kernel
					}
					mu.Lock()
					launches = append(launches, l)
					mu.Unlock()
				}
			}
			count := func() int {
				mu.Lock()
				defer mu.Unlock()
				return len(launches)
			}
			o, err := sched.NewOnline(simOpener(nil), cfg)
			if err != nil {
				t.Fatal(err)
			}
			stop := startOnline(t, o)
			defer stop()
			type end struct {
				done, launched int
				err            error
			}
			wait := func(run *sched.BEProgress) end {
				t.Helper()
				st := awaitEnd(t, run)
				return end{st.Done, count(), st.Err}
			}
			serveHP := func() {
				t.Helper()
				for i := range 2 {
					ch, err := o.Submit(i, nil)
					if err != nil {
						t.Fatal(err)
					}
					if r := recv(t, ch); r.Err != nil {
						t.Fatal(r.Err)
					}
				}
			}

			// Exactly 3 iterations, with no HP traffic: nothing is
			// preempted, so each kernel launches once.
			run, err := o.StartBE(0, sched.BERun{Iterations: 3})
			if err != nil {
				t.Fatal(err)
			}
			e := wait(run)
			if e.err != nil || e.done != 3 || e.launched != 3*nk {
				t.Fatalf("run of 3: done=%d err=%v with %d launches, want 3, nil, %d", e.done, e.err, e.launched, 3*nk)
			}
			serveHP()
			if n := count(); n != 3*nk {
				t.Fatalf("%d launches after the run of 3 ended with %d", n, 3*nk)
			}

			// A long run cancelled after its first iteration.
			run, err = o.StartBE(0, sched.BERun{Iterations: 1000})
			if err != nil {
				t.Fatal(err)
			}
			awaitIterations(t, run, 1)
			if err := o.StopBE(0, run.ID()); err != nil {
				t.Fatal(err)
			}
			e = wait(run)
			if !errors.Is(e.err, sched.ErrCancelled) {
				t.Fatalf("cancelled run: %v, want ErrCancelled", e.err)
			}
			serveHP()
			if n := count(); n != e.launched {
				t.Fatalf("%d launches after the cancelled run ended with %d", n, e.launched)
			}

			// The next run starts a fresh iteration at kernel 0, even if
			// the cancel left one half done, and runs exactly once.
			if run, err = o.StartBE(0, sched.BERun{Iterations: 1}); err != nil {
				t.Fatal(err)
			}
			before := e.launched
			e = wait(run)
			if e.err != nil || e.done != 1 {
				t.Fatalf("run of 1: done=%d err=%v", e.done, e.err)
			}
			mu.Lock()
			fresh := launches[before:]
			mu.Unlock()
			if len(fresh) != nk || fresh[0].Kernel != 0 {
				t.Fatalf("run of 1 launched %d kernels starting at k%d, want %d from k0", len(fresh), fresh[0].Kernel, nk)
			}
		})
	}
}
