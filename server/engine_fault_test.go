package server_test

// The engine under device failures: requests run again on the reopened
// device, a faulting BE job costs no HP request.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/faulty"
	"atoll/server"
)

func TestEngineDeviceFailureIsInternal(t *testing.T) {
	leakCheck(t)
	var fd *faulty.Device
	e := newTestEngine(t, func(c *server.EngineConfig) {
		c.WrapDevice = func(d gpu.Device) gpu.Device {
			fd = faulty.New(d)
			failNthLaunch(fd, 30)
			return fd
		}
	})
	req, _ := request(t, tinyResNet(t), modelInfo(t, e, "tiny"), 1)
	var err error
	for range 100 {
		if _, err = e.Infer(context.Background(), req); err != nil {
			break
		}
	}
	if !errors.Is(err, server.ErrInternal) {
		t.Fatalf("request during a device failure: %v, want ErrInternal", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.Ready() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if e.Ready() {
		t.Fatal("still ready after the device failed")
	}
	if _, err := e.Infer(context.Background(), req); !errors.Is(err, server.ErrInternal) {
		t.Errorf("Infer after the failure: %v, want ErrInternal", err)
	}
	// No restart is configured: the engine is broken for good (liveness
	// then says so), with the device's error.
	b := e.(server.Breakable)
	for deadline := time.Now().Add(10 * time.Second); b.Broken() == nil && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if err := b.Broken(); err == nil || !errors.Is(err, faulty.ErrInjected) {
		t.Errorf("Broken after a failure with no restart left: %v, want the injected error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Close(ctx); !errors.Is(err, server.ErrInternal) {
		t.Errorf("Close after a failure: %v, want ErrInternal naming it", err)
	}
	if err := b.Broken(); err != nil {
		t.Errorf("Broken after Close: %v, want nil (closed, not broken)", err)
	}
}

// TestEngineReopensTheDeviceAfterAFailure: with Restarts, a device failure
// costs no HP request: the requests in flight, and those arriving while the
// engine reopens the device, run again on the reopened device (inference is
// idempotent); the counters carry across. A device that keeps failing
// exhausts the restarts: requests then fail with ErrInternal saying to
// restart the daemon.
func TestEngineReopensTheDeviceAfterAFailure(t *testing.T) {
	for _, always := range []bool{false, true} {
		t.Run(fmt.Sprintf("always=%v", always), func(t *testing.T) {
			leakCheck(t)
			var opened atomic.Int32
			e := newTestEngine(t, func(c *server.EngineConfig) {
				c.Restarts, c.RestartBackoff = 2, 5*time.Millisecond
				c.WrapDevice = func(d gpu.Device) gpu.Device {
					if opened.Add(1) > 1 && !always {
						return d
					}
					fd := faulty.New(d)
					failNthLaunch(fd, 30)
					return fd
				}
			})
			req, _ := request(t, tinyResNet(t), modelInfo(t, e, "tiny"), 1)
			if always {
				var err error
				for range 200 {
					if _, err = e.Infer(context.Background(), req); err != nil {
						break
					}
				}
				if !errors.Is(err, server.ErrInternal) {
					t.Fatalf("with every device failing: %v, want ErrInternal once the restarts ran out", err)
				}
				if _, err := e.Infer(context.Background(), req); !errors.Is(err, server.ErrInternal) || !strings.Contains(err.Error(), "restart the daemon") {
					t.Errorf("after the restarts ran out: %v, want ErrInternal saying to restart the daemon", err)
				}
				if n := opened.Load(); n != 3 {
					t.Errorf("device opened %d times, want 3 (first + 2 restarts)", n)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := e.Close(ctx); !errors.Is(err, server.ErrInternal) {
					t.Errorf("Close after the restarts ran out: %v, want ErrInternal", err)
				}
				return
			}
			// Four clients, 25 requests each, across the failure.
			failed := clients(t, e, req, 4, 25)
			st := e.Stats()
			if failed != 0 || st.Restarts != 1 || st.Retried == 0 || st.Launches < 29 {
				t.Errorf("%d of 100 requests failed; restarts %d, retried %d, launches %d: want none failed, 1 restart, some retried, counters kept", failed, st.Restarts, st.Retried, st.Launches)
			}
			t.Logf("100 requests across a device failure: restarts %d, retried %d", st.Restarts, st.Retried)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := e.Close(ctx); err != nil {
				t.Errorf("Close after a recovered failure: %v", err)
			}
		})
	}
}

// TestEngineBEFaultCostsNoHPRequest: a fault in one BE kernel's launch (at
// several points of a training job) fails that job with the error, and
// every HP request across it is answered successfully — run again on the
// reopened device where the failure caught it — and a later job runs.
// With sticky, the fault poisons the device as a CUDA kernel fault poisons
// its context: every call after the faulting launch fails, whatever it is.
func TestEngineBEFaultCostsNoHPRequest(t *testing.T) {
	for _, tc := range []struct {
		nth    int
		sticky bool
	}{{1, false}, {16, false}, {1, true}, {16, true}, {64, true}} {
		nth := tc.nth
		t.Run(fmt.Sprintf("nth=%d/sticky=%v", nth, tc.sticky), func(t *testing.T) {
			leakCheck(t)
			e, job, _, req, opened := faultyEngine(t, func(fd *faulty.Device) {
				grad := func(l *gpu.Launch) bool { return strings.Contains(l.Name, "grad") }
				if tc.sticky {
					_ = fd.Poison(grad, nth)
				} else {
					_ = fd.FailLaunch(grad, nth)
				}
			})
			served, failed := hpAcrossJob(t, e, req, job)
			st := waitJob(t, e, job, func(s server.JobStatus) bool { return !s.Ended.IsZero() })
			if st.State != server.JobFailed || !strings.Contains(st.Error, "injected") {
				t.Errorf("the faulting job: %+v, want failed with the injected error", st)
			}
			t.Logf("%d HP requests served across the fault; job %s after %d iterations; restarts %d, retried %d", served, st.State, st.Done, e.Stats().Restarts, e.Stats().Retried)
			// The fault either stops the scheduler loop (the device is
			// reopened once and the requests it caught run again) or, at a
			// run's first launch, only ends that run.
			if failed != 0 || opened.Load() > 2 {
				t.Errorf("%d HP requests failed (%d served), device opened %d times: want none failed and at most one reopen", failed, served, opened.Load())
			}
			// The daemon serves on, and a new job runs.
			if _, err := e.Infer(context.Background(), req); err != nil {
				t.Errorf("after the fault: %v", err)
			}
			next, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 1})
			if err != nil {
				t.Fatal(err)
			}
			if st := waitJob(t, e, next.ID, func(s server.JobStatus) bool { return !s.Ended.IsZero() }); st.State != server.JobDone {
				t.Errorf("a job after the fault: %+v", st)
			}
		})
	}
}

// TestEngineBEFaultSweepCostsNoHPRequest sweeps the failure over the
// device calls around one BE launch: the k-th counted call from the 16th
// weight-gradient launch on (k = 1..6: the launch, its event, the HP and BE
// calls interleaved with them), failing alone or poisoning the device from
// there on. Every HP request across it is answered successfully.
func TestEngineBEFaultSweepCostsNoHPRequest(t *testing.T) {
	for k := 1; k <= 6; k++ {
		for _, sticky := range []bool{false, true} {
			t.Run(fmt.Sprintf("k=%d/sticky=%v", k, sticky), func(t *testing.T) {
				leakCheck(t)
				e, job, fd, req, _ := faultyEngine(t, func(fd *faulty.Device) {
					var grads, after atomic.Int32
					var armed, poisoned atomic.Bool
					_ = fd.FailLaunch(func(l *gpu.Launch) bool {
						if strings.Contains(l.Name, "grad") && grads.Add(1) == 16 {
							armed.Store(true)
						}
						return false
					}, 0)
					fd.FailWhen(func(method string, call, nth int) bool {
						if poisoned.Load() {
							return true
						}
						if !armed.Load() || after.Add(1) != int32(k) {
							return false
						}
						poisoned.Store(sticky)
						return true
					})
				})
				served, failed := hpAcrossJob(t, e, req, job)
				if failed != 0 || served == 0 {
					t.Errorf("%d HP requests failed, %d served", failed, served)
				}
				if len(fd.Injected()) == 0 {
					t.Errorf("no failure was injected")
				}
				if _, err := e.Infer(context.Background(), req); err != nil {
					t.Errorf("after the fault: %v", err)
				}
			})
		}
	}
}

// faultyEngine starts a test engine whose first device is wrapped in a
// faulty.Device that arm sets up (later devices, after reopens, are not),
// submits a long training job, and returns the engine, the job's id, the
// faulty device, an HP request, and how many devices were opened.
func faultyEngine(t *testing.T, arm func(*faulty.Device)) (e server.Engine, job string, fd *faulty.Device, req *server.InferRequest, opened *atomic.Int32) {
	t.Helper()
	opened = new(atomic.Int32)
	e = newTestEngine(t, func(c *server.EngineConfig) {
		c.Virtual = false
		c.Restarts, c.RestartBackoff = 2, 5*time.Millisecond
		c.WrapDevice = func(d gpu.Device) gpu.Device {
			if opened.Add(1) > 1 {
				return d
			}
			fd = faulty.New(d)
			arm(fd)
			return fd
		}
	})
	st, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	req, _ = request(t, tinyResNet(t), modelInfo(t, e, "tiny"), 1)
	return e, st.ID, fd, req, opened
}

// TestFaultDrill: with fault_drill, the chosen BE launch runs the fault
// kernel, which poisons the simulated device as a kernel fault poisons a
// CUDA context; the job ends failed naming it, no HP request fails, the
// engine reopens the device once, and the drill does not fire again.
func TestFaultDrill(t *testing.T) {
	leakCheck(t)
	e := newTestEngine(t, func(c *server.EngineConfig) {
		c.Virtual = false
		c.Restarts, c.RestartBackoff = 2, 5*time.Millisecond
		c.FaultDrill = server.FaultDrill{BELaunch: 40}
	})
	job, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := request(t, tinyResNet(t), modelInfo(t, e, "tiny"), 1)
	_, failed := hpAcrossJob(t, e, req, job.ID)
	st := waitJob(t, e, job.ID, func(s server.JobStatus) bool { return !s.Ended.IsZero() })
	if st.State != server.JobFailed || !strings.Contains(st.Error, "fault_trap") {
		t.Errorf("the drilled job: %+v, want failed naming the fault kernel", st)
	}
	if n := e.Stats().Restarts; n != 1 || failed != 0 {
		t.Errorf("restarts %d, failed HP requests %d: want one reopen and none failed", n, failed)
	}
	next, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 2})
	if err != nil {
		t.Fatal(err)
	}
	if st := waitJob(t, e, next.ID, func(s server.JobStatus) bool { return !s.Ended.IsZero() }); st.State != server.JobDone {
		t.Errorf("a job after the drill: %+v, want done (the drill fires once)", st)
	}
}

// hpAcrossJob runs three HP clients from before a BE job's fault until ten
// requests each after the job ended and the engine is ready again (for at
// most 20 s), failing the test on each failed request.
func hpAcrossJob(t *testing.T, e server.Engine, req *server.InferRequest, job string) (served, failed int32) {
	t.Helper()
	var wg sync.WaitGroup
	var nFailed, nServed atomic.Int32
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			after := 0
			for deadline := time.Now().Add(20 * time.Second); after < 10 && time.Now().Before(deadline); {
				if st, _ := e.Job(job); !st.Ended.IsZero() && e.Ready() {
					after++
				}
				r := *req
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				if _, err := e.Infer(ctx, &r); err != nil {
					nFailed.Add(1)
					t.Errorf("HP request across the BE fault: %v", err)
				} else {
					nServed.Add(1)
				}
				cancel()
				// A pause between requests: three clients back to back
				// keep HP busy all the time, and a policy that holds BE
				// beside busy HP then starves the job the test needs.
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return nServed.Load(), nFailed.Load()
}

// TestJobsResumeAfterADeviceFailure: two jobs that asked to resume run
// beside a fault drill; the device fails once under them, and both go on
// after the reopen and finish every iteration, with no HP request lost. A
// job without resume ends failed.
func TestJobsResumeAfterADeviceFailure(t *testing.T) {
	leakCheck(t)
	e := newTestEngine(t, func(c *server.EngineConfig) {
		c.Virtual = false
		c.Restarts, c.RestartBackoff = 2, 5*time.Millisecond
		c.FaultDrill = server.FaultDrill{BELaunch: 40}
	})
	var ids []string
	for _, resume := range []bool{true, true, false} {
		st, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 3, Resume: resume})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, st.ID)
	}
	req, _ := request(t, tinyResNet(t), modelInfo(t, e, "tiny"), 1)
	if _, failed := hpAcrossJob(t, e, req, ids[0]); failed != 0 {
		t.Errorf("%d HP requests failed", failed)
	}
	for i, id := range ids {
		st := waitJob(t, e, id, func(s server.JobStatus) bool { return !s.Ended.IsZero() })
		switch {
		case i < 2 && (st.State != server.JobDone || st.Done != 3 || st.Resumed != 1):
			t.Errorf("resumable job %s: %+v, want done with 3 iterations after one resume", id, st)
		case i == 2 && st.State != server.JobFailed:
			t.Errorf("job %s without resume: %+v, want failed", id, st)
		}
	}
	if n := e.Stats().Restarts; n != 1 {
		t.Errorf("restarts %d, want 1", n)
	}
}

// launching reports whether a device method submits kernels: Launch, or
// LaunchGraph for an HP request recorded as a graph.
func launching(method string) bool { return method == "Launch" || method == "LaunchGraph" }

// failNthLaunch makes fd's nth kernel submission (Launch or LaunchGraph)
// fail.
func failNthLaunch(fd *faulty.Device, nth int) {
	var n atomic.Int64
	fd.FailWhen(func(m string, _, _ int) bool { return launching(m) && n.Add(1) == int64(nth) })
}
