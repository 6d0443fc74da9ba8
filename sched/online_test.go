package sched_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"atoll/gpu"
	"atoll/gpu/faulty"
	"atoll/gpu/sim"
	"atoll/policies"
	"atoll/profiles"
	"atoll/sched"
)

func onlineProfiles(t *testing.T) (hp, be *profiles.Profile) {
	t.Helper()
	hp, err := profiles.Lookup("H100-SXM", "resnet50", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	be, err = profiles.Lookup("H100-SXM", "resnet50-train", 32, "")
	if err != nil {
		t.Fatal(err)
	}
	return hp, be
}

func simOpener(wrap func(gpu.Device) gpu.Device) func() (gpu.Device, error) {
	return func() (gpu.Device, error) {
		d, err := sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1})
		if err != nil {
			return nil, err
		}
		if wrap != nil {
			return wrap(d), nil
		}
		return d, nil
	}
}

func onlineConfig(t *testing.T, policy string) sched.OnlineConfig {
	t.Helper()
	hp, be := onlineProfiles(t)
	pol, err := policies.ByName(policy)
	if err != nil {
		t.Fatal(err)
	}
	return sched.OnlineConfig{Policy: pol,
		HP: []sched.OnlineClient{{Name: "r50", Profile: hp}, {Name: "r50b", Profile: hp}},
		BE: []sched.OnlineClient{{Name: "train", Profile: be}}}
}

// startOnline runs o in a goroutine and returns a stop function that
// cancels it and waits for Run's result.
func startOnline(t *testing.T, o *sched.Online) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- o.Run(ctx) }()
	<-o.Started()
	if err := o.StartErr(); err != nil {
		cancel()
		t.Fatalf("start: %v (run: %v)", err, <-errc)
	}
	var once sync.Once
	var res error
	return func() error {
		once.Do(func() {
			cancel()
			select {
			case res = <-errc:
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return within 30 s of cancel")
			}
		})
		return res
	}
}

func recv(t *testing.T, ch <-chan sched.OnlineResult) sched.OnlineResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no result within 30 s")
	}
	return sched.OnlineResult{}
}

func TestOnlineServesConcurrentRequests(t *testing.T) {
	defer goleak.VerifyNone(t)
	const hookTime = 200 * time.Microsecond
	cfg := onlineConfig(t, "atoll")
	var mu sync.Mutex
	inFlight := map[int]uint64{} // client -> request between Before and After
	var hookErr error
	cfg.Hooks.BeforeRequest = func(c int, id uint64, _ any) error {
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := inFlight[c]; ok && hookErr == nil {
			hookErr = errors.New("BeforeRequest while another request of the client is in flight")
			_ = prev
		}
		inFlight[c] = id
		time.Sleep(hookTime) // host work the result must account for
		return nil
	}
	cfg.Hooks.AfterRequest = func(c int, id uint64, _ any) error {
		mu.Lock()
		defer mu.Unlock()
		if inFlight[c] != id && hookErr == nil {
			hookErr = errors.New("AfterRequest for a request that is not in flight")
		}
		delete(inFlight, c)
		time.Sleep(hookTime)
		return nil
	}
	o, err := sched.NewOnline(simOpener(nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startOnline(t, o)
	var wg sync.WaitGroup
	results := make(chan sched.OnlineResult, 16)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				ch, err := o.Submit(g%2, g)
				if err != nil {
					t.Error(err)
					return
				}
				results <- recv(t, ch)
			}
		}()
	}
	wg.Wait()
	close(results)
	byClient := map[int][]sched.OnlineResult{}
	for r := range results {
		if r.Err != nil {
			t.Fatalf("request %d: %v", r.ID, r.Err)
		}
		if r.Service <= 0 || r.Start < r.Arrival || r.End <= r.Start || r.Queue != r.Start-r.Arrival {
			t.Errorf("request %d: bad times %+v", r.ID, r)
		}
		if r.Input < hookTime || r.Output < hookTime {
			t.Errorf("request %d: hook times %v / %v, want at least the %v each hook slept", r.ID, r.Input, r.Output, hookTime)
		}
		if r.Tag.(int)%2 != r.Client {
			t.Errorf("request %d: tag %v came back for client %d", r.ID, r.Tag, r.Client)
		}
		byClient[r.Client] = append(byClient[r.Client], r)
	}
	if len(byClient[0])+len(byClient[1]) != 12 {
		t.Fatalf("got %d+%d results, want 12", len(byClient[0]), len(byClient[1]))
	}
	// One request per client in the core at a time: a client's service
	// intervals do not overlap.
	for c, rs := range byClient {
		for i := range rs {
			for j := range rs {
				if i != j && rs[i].Start < rs[j].End && rs[j].Start < rs[i].End {
					t.Errorf("client %d: requests %d and %d overlap on the device", c, rs[i].ID, rs[j].ID)
				}
			}
		}
	}
	if hookErr != nil {
		t.Error(hookErr)
	}
	st := o.Stats()
	if st.Core.Requests != 12 || st.Launches == 0 || st.QueueDepth != 0 || !st.Running || st.Backend != "sim" {
		t.Errorf("stats: %+v", st)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := o.Submit(0, nil); !errors.Is(err, sched.ErrStopped) {
		t.Errorf("Submit after stop: %v, want ErrStopped", err)
	}
	if _, err := o.Submit(7, nil); !errors.Is(err, sched.ErrConfig) {
		t.Errorf("Submit to client 7: %v, want ErrConfig", err)
	}
}

func TestOnlineBERunsAndStops(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := onlineConfig(t, "atoll")
	o, err := sched.NewOnline(simOpener(nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startOnline(t, o)
	started := make(chan struct{}, 1)
	var iters atomic.Int32
	run, err := o.StartBE(0, sched.BERun{Iterations: 2,
		Setup:   func() error { started <- struct{}{}; return nil },
		Collect: func(sched.IterationRecord) { iters.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	// An HP request in between must still be served.
	ch, err := o.Submit(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := recv(t, ch); r.Err != nil {
		t.Fatal(r.Err)
	}
	e := awaitEnd(t, run)
	<-started
	if e.Err != nil || e.Done != 2 || iters.Load() != 2 || !e.Started || e.Last.End <= e.Last.Start {
		t.Fatalf("BE run ended with %+v after %d iterations, want 2 done, nil, started, a last iteration", e, iters.Load())
	}
	// A long run, stopped after its first iteration.
	run, err = o.StartBE(0, sched.BERun{Iterations: 1000})
	if err != nil {
		t.Fatal(err)
	}
	awaitIterations(t, run, 1)
	if err := o.StopBE(0, run.ID()); err != nil {
		t.Fatal(err)
	}
	e = awaitEnd(t, run)
	if !errors.Is(e.Err, sched.ErrCancelled) || e.Done < 1 || e.Done >= 1000 {
		t.Fatalf("stopped run: done=%d err=%v, want ErrCancelled after a few iterations", e.Done, e.Err)
	}
	itersBefore := o.Stats().Core.Iterations
	// After the stop the client launches nothing more: HP still works and
	// no iteration is added.
	ch, _ = o.Submit(1, nil)
	if r := recv(t, ch); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := o.Stats().Core.Iterations; got != itersBefore {
		t.Errorf("iterations went from %d to %d after the run was stopped", itersBefore, got)
	}
	// Bad runs.
	if _, err := o.StartBE(0, sched.BERun{}); !errors.Is(err, sched.ErrConfig) {
		t.Errorf("zero iterations: %v, want ErrConfig", err)
	}
	if _, err := o.StartBE(3, sched.BERun{Iterations: 1}); !errors.Is(err, sched.ErrConfig) {
		t.Errorf("BE client 3: %v, want ErrConfig", err)
	}
	// A run still going at shutdown ends with ErrStopped.
	run, err = o.StartBE(0, sched.BERun{Iterations: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if e = awaitEnd(t, run); !errors.Is(e.Err, sched.ErrStopped) {
		t.Errorf("run at shutdown: %v, want ErrStopped", e.Err)
	}
}

func TestOnlineQueueFullAndShutdownFailsQueued(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := onlineConfig(t, "priority")
	cfg.MaxQueue = 2
	gate := make(chan struct{})
	entered := make(chan struct{}, 8)
	cfg.Hooks.BeforeRequest = func(c int, id uint64, _ any) error {
		entered <- struct{}{}
		<-gate // holds the owner goroutine
		return nil
	}
	o, err := sched.NewOnline(simOpener(nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startOnline(t, o)
	a, err := o.Submit(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-entered // the loop is inside BeforeRequest of a
	b, err := o.Submit(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Submit(0, nil); !errors.Is(err, sched.ErrQueueFull) {
		t.Fatalf("third request with MaxQueue 2: %v, want ErrQueueFull", err)
	}
	if d := o.Stats().QueueDepth; d != 2 {
		t.Errorf("queue depth %d, want 2", d)
	}
	// Cancel while a is held in its hook: a is then in the core and must
	// finish; b is still queued and must fail with ErrStopped.
	done := make(chan error, 1)
	go func() { done <- stop() }()
	time.Sleep(20 * time.Millisecond)
	close(gate)
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r := recv(t, a); r.Err != nil {
		t.Errorf("request in the core at shutdown: %v, want it served", r.Err)
	}
	if r := recv(t, b); !errors.Is(r.Err, sched.ErrStopped) {
		t.Errorf("queued request at shutdown: %v, want ErrStopped", r.Err)
	}
	select {
	case <-o.Done():
	default:
		t.Error("Done not closed after Run returned")
	}
}

func TestOnlinePacedFollowsWallClock(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := onlineConfig(t, "atoll")
	cfg.Pace = true
	o, err := sched.NewOnline(simOpener(nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startOnline(t, o)
	defer stop()
	for range 3 {
		t0 := time.Now()
		ch, err := o.Submit(0, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := recv(t, ch)
		wall := time.Since(t0)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		// Paced: the answer cannot come before the simulated service time
		// has passed on the wall clock, less the paced clock's lag behind
		// the wall clock at the arrival (one loop iteration: up to 44 µs
		// of a 2 ms request seen under -race on 2 busy cores). Unpaced, the
		// answer would come within microseconds.
		if wall < r.Service-r.Service/20 {
			t.Errorf("answer after %v of wall time, but the simulated service took %v", wall, r.Service)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// An idle spell longer than the stall guard (paced, so device time moves
// with the wall clock) must not make the next request look stuck: the guard
// counts from when launches were last in flight, not from the last
// completion (seen in `atoll serve`: the first request after 15 s idle failed).
func TestOnlineIdleLongerThanStall(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := onlineConfig(t, "atoll")
	cfg.Pace = true
	cfg.Stall = 300 * time.Millisecond // wide: -race CI on 2 busy cores must not trip it by starvation
	o, err := sched.NewOnline(simOpener(nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startOnline(t, o)
	defer stop()
	for i := range 2 {
		if i > 0 {
			time.Sleep(3 * cfg.Stall)
		}
		ch, err := o.Submit(0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := recv(t, ch); r.Err != nil {
			t.Fatalf("request %d after an idle spell: %v", i, r.Err)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestOnlineHPServedWhileBERuns(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := onlineConfig(t, "atoll")
	o, err := sched.NewOnline(simOpener(nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startOnline(t, o)
	run, err := o.StartBE(0, sched.BERun{Iterations: 3})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		ch, _ := o.Submit(0, nil)
		if r := recv(t, ch); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if e := awaitEnd(t, run); e.Err != nil {
		t.Fatal(e.Err)
	}
	st := o.Stats()
	if st.Core.Iterations != 3 || st.Core.BEWorkByClient[0] <= 0 {
		t.Errorf("stats after 3 iterations: %+v", st.Core)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A device failure fails the affected requests with an error wrapping
// ErrDevice, and Run stops cleanly: it returns the error, closes Done and
// answers everything.
// With HP graphs the request's one LaunchGraph fails; without, its third
// kernel's Launch.
func TestOnlineDeviceFailure(t *testing.T) {
	for _, tc := range []struct {
		graphs bool
		method string
		after  int
	}{{true, "LaunchGraph", 1}, {false, "Launch", 3}} {
		t.Run(tc.method, func(t *testing.T) { testOnlineDeviceFailure(t, !tc.graphs, tc.method, tc.after) })
	}
}

func testOnlineDeviceFailure(t *testing.T, noGraphs bool, method string, after int) {
	defer goleak.VerifyNone(t)
	cfg := onlineConfig(t, "atoll")
	cfg.NoHPGraphs = noGraphs
	var fd *faulty.Device
	o, err := sched.NewOnline(simOpener(func(d gpu.Device) gpu.Device {
		fd = faulty.New(d)
		return fd
	}), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- o.Run(ctx) }()
	<-o.Started()
	if err := o.StartErr(); err != nil {
		t.Fatal(err)
	}
	ch, _ := o.Submit(0, nil)
	if r := recv(t, ch); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := fd.FailMethod(method, fd.Count(method)+after); err != nil {
		t.Fatal(err)
	}
	ch, err = o.Submit(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := recv(t, ch)
	if !errors.Is(r.Err, sched.ErrDevice) || !errors.Is(r.Err, faulty.ErrInjected) {
		t.Fatalf("request during a device failure: %v, want ErrDevice wrapping the injected failure", r.Err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, sched.ErrDevice) {
			t.Fatalf("Run: %v, want ErrDevice", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop after a device failure")
	}
	if !errors.Is(o.Err(), sched.ErrDevice) {
		t.Errorf("Err: %v", o.Err())
	}
	if _, err := o.Submit(0, nil); !errors.Is(err, sched.ErrStopped) {
		t.Errorf("Submit after a failure: %v, want ErrStopped", err)
	}
}

// Sweep the failure point over every device call of a short session: each
// run either serves everything or fails cleanly; none hangs, every
// submitted request gets exactly one answer.
func TestOnlineFaultSweep(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := onlineConfig(t, "atoll")
	hp, _ := onlineProfiles(t)
	cfg.HP = cfg.HP[:1]
	_ = hp
	session := func(fail int) (calls int, runErr error, answered int) {
		var fd *faulty.Device
		o, err := sched.NewOnline(simOpener(func(d gpu.Device) gpu.Device {
			fd = faulty.New(d)
			if fail > 0 {
				_ = fd.FailAt(fail)
			}
			return fd
		}), cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- o.Run(ctx) }()
		<-o.Started()
		var chans []<-chan sched.OnlineResult
		if o.StartErr() == nil {
			_, _ = o.StartBE(0, sched.BERun{Iterations: 1})
			for range 2 {
				if ch, err := o.Submit(0, nil); err == nil {
					chans = append(chans, ch)
				}
			}
		}
		for _, ch := range chans {
			recv(t, ch)
			answered++
		}
		cancel()
		select {
		case runErr = <-errc:
		case <-time.After(30 * time.Second):
			t.Fatalf("fail at call %d: Run hung", fail)
		}
		if answered != len(chans) {
			t.Fatalf("fail at call %d: %d of %d answered", fail, answered, len(chans))
		}
		return fd.Calls(), runErr, answered
	}
	total, err, _ := session(0)
	if err != nil {
		t.Fatalf("clean session: %v", err)
	}
	step := max(1, total/60)
	failed := 0
	for i := 1; i <= total; i += step {
		_, err, _ := session(i)
		if err != nil {
			failed++
			if !errors.Is(err, sched.ErrDevice) && !errors.Is(err, faulty.ErrInjected) {
				t.Errorf("fail at call %d: %v, want a device error", i, err)
			}
		}
	}
	if failed == 0 {
		t.Error("no injected failure surfaced as an error")
	}
}

func ExampleOnline() {
	hp, _ := profiles.Lookup("H100-SXM", "resnet50", 1, "")
	pol, _ := policies.ByName("atoll")
	o, err := sched.NewOnline(func() (gpu.Device, error) { return sim.New(sim.Config{Spec: gpu.H100SXM}) },
		sched.OnlineConfig{Policy: pol, HP: []sched.OnlineClient{{Name: "resnet50", Profile: hp}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	go o.Run(ctx) // the device owner
	<-o.Started()
	ch, err := o.Submit(0, "request tag")
	if err == nil {
		r := <-ch
		fmt.Println(r.Err, r.Tag, r.Service > 0, r.Start >= r.Arrival)
	}
	cancel()
	<-o.Done()
	fmt.Println(o.Err())
	// Output:
	// <nil> request tag true true
	// <nil>
}

// awaitEnd waits (up to 30 s) for run to end and returns its status.
func awaitEnd(t *testing.T, run *sched.BEProgress) sched.BEStatus {
	t.Helper()
	select {
	case <-run.Ended():
	case <-time.After(30 * time.Second):
		t.Fatal("BE run did not end")
	}
	st := run.Status()
	if !st.Ended {
		t.Fatalf("Ended is closed but the status says %+v", st)
	}
	return st
}

// awaitIterations waits (up to 30 s) until run has done n iterations.
func awaitIterations(t *testing.T, run *sched.BEProgress, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); run.Status().Done < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d iterations after 30 s", run.Status().Done, n)
		}
	}
}

// TestOnlineGroupRoutesToLeastBusy: requests submitted to a Group's first
// client go to the member with the fewest requests accepted and not
// finished: a request submitted while the first client's is unfinished
// goes to the second; once both are idle, to the first again.
func TestOnlineGroupRoutesToLeastBusy(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := onlineConfig(t, "atoll")
	cfg.HP[0].Group, cfg.HP[1].Group = "r50", "r50"
	release := make(chan struct{})
	var once sync.Once
	cfg.Hooks.BeforeRequest = func(c int, _ uint64, _ any) error {
		once.Do(func() { <-release }) // the first request stays unfinished until the second is submitted
		return nil
	}
	o, err := sched.NewOnline(simOpener(nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startOnline(t, o)
	defer stop()
	first, err := o.Submit(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := o.Submit(0, nil)
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []<-chan sched.OnlineResult{first, second} {
		if r := recv(t, c); r.Err != nil || r.Client != i {
			t.Errorf("request %d: client %d (%v), want %d", i, r.Client, r.Err, i)
		}
	}
	third, err := o.Submit(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := recv(t, third); r.Err != nil || r.Client != 0 {
		t.Errorf("third request: client %d (%v), want 0: both idle, the first", r.Client, r.Err)
	}

	bad := onlineConfig(t, "atoll")
	other := *bad.HP[1].Profile
	other.Kernels = other.Kernels[:1]
	bad.HP[1].Profile = &other
	bad.HP[0].Group, bad.HP[1].Group = "r50", "r50"
	if _, err := sched.NewOnline(simOpener(nil), bad); !errors.Is(err, sched.ErrConfig) {
		t.Errorf("a group of two profiles: %v, want ErrConfig", err)
	}
}

// A batching client's requests that wait behind a pass are served by the
// next pass together: BeforePass places each in its pass (variant and
// slot, arrival order) before the pass reaches the device, AfterPass reads
// it back with the same place, and each result says how many its pass
// served.
func TestOnlineBatchedPasses(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := onlineConfig(t, "atoll")
	hp := cfg.HP[0].Profile
	for _, b := range []int{2, 4} {
		q := *hp
		q.Batch = b
		q.Kernels = slices.Clone(hp.Kernels)
		for i := range q.Kernels {
			q.Kernels[i].DurationUs *= 1 + 0.2*float64(b)
		}
		cfg.HP[0].Batched = append(cfg.HP[0].Batched, &q)
	}
	type place struct{ variant, slot int }
	var mu sync.Mutex
	before, after := map[uint64]place{}, map[uint64]place{}
	release := make(chan struct{})
	var once sync.Once
	cfg.Hooks.BeforeRequest = func(int, uint64, any) error { t.Error("BeforeRequest called for a batching client"); return nil }
	cfg.Hooks.AfterRequest = func(int, uint64, any) error { t.Error("AfterRequest called for a batching client"); return nil }
	cfg.Hooks.BeforePass = func(c, v, slot int, id uint64, _ any) error {
		once.Do(func() { <-release }) // the first pass waits until the others are submitted
		mu.Lock()
		defer mu.Unlock()
		before[id] = place{v, slot}
		return nil
	}
	cfg.Hooks.AfterPass = func(c, v, slot int, id uint64, _ any) error {
		mu.Lock()
		defer mu.Unlock()
		if b, ok := before[id]; !ok || b != (place{v, slot}) {
			t.Errorf("request %d: after its pass at %+v, placed before at %+v (%v)", id, place{v, slot}, b, ok)
		}
		after[id] = place{v, slot}
		return nil
	}
	o, err := sched.NewOnline(simOpener(nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startOnline(t, o)
	defer stop()
	var chans []<-chan sched.OnlineResult
	for range 6 {
		ch, err := o.Submit(0, nil)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	close(release)
	var batches []int
	for _, ch := range chans {
		r := recv(t, ch)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		batches = append(batches, r.Batch)
	}
	// 1 alone (the others arrive while it runs), then a pass of 4, then 1.
	if want := []int{1, 4, 4, 4, 4, 1}; !slices.Equal(batches, want) {
		t.Errorf("batches %v, want %v", batches, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(after) != 6 {
		t.Errorf("AfterPass ran for %d requests, want 6", len(after))
	}
	for id := uint64(2); id <= 5; id++ {
		if want := (place{2, int(id - 2)}); after[id] != want {
			t.Errorf("request %d at %+v, want the pass of 4 (variant 2) slot %d", id, after[id], id-2)
		}
	}
}
