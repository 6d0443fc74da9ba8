package server_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"atoll/gpu"
	"atoll/gpu/faulty"
	"atoll/server"
)

// TestFleetSpreadsAndFailsOver: two simulated GPUs, a replica of the model
// on each. Requests from four clients go to both; when one GPU's device
// fails for good, every request is answered by the other; jobs go to the
// GPU with fewer and are named by it.
func TestFleetSpreadsAndFailsOver(t *testing.T) {
	leakCheck(t)
	var failing atomic.Bool
	mk := func(fail bool) server.Engine {
		return newTestEngine(t, func(c *server.EngineConfig) {
			c.Virtual = false
			if fail {
				c.Restarts = 0
				c.WrapDevice = func(d gpu.Device) gpu.Device {
					fd := faulty.New(d)
					fd.FailWhen(func(method string, _, nth int) bool { return launching(method) && failing.Load() })
					return fd
				}
			}
		})
	}
	f := newFleet(t, mk(true), mk(false))
	req, _ := request(t, tinyResNet(t), modelInfo(t, f, "tiny"), 1)
	serve := func(n int) int32 { return clients(t, f, req, 4, n) }
	if n := serve(10); n != 0 {
		t.Fatalf("%d requests failed with both GPUs up", n)
	}
	e0, e1 := f.Engines()[0].Stats(), f.Engines()[1].Stats()
	if e0.Launches == 0 || e1.Launches == 0 {
		t.Errorf("launches per GPU %d and %d: want both used", e0.Launches, e1.Launches)
	}
	// GPU 0's device fails from now on (no restarts). Routing goes by
	// requests in flight, so a round may send GPU 0 nothing: serve until
	// one has reached it and failed there.
	failing.Store(true)
	for round := 0; round < 50 && f.Engines()[0].Ready(); round++ {
		if n := serve(10); n != 0 {
			t.Errorf("%d requests failed while GPU 0 was down", n)
		}
	}
	if f.Engines()[0].Ready() || !f.Ready() {
		t.Errorf("GPU 0 ready %v, fleet ready %v: want GPU 0 down and the fleet up", f.Engines()[0].Ready(), f.Ready())
	}
	t.Logf("launches per GPU before the failure %d, %d; requests rerouted %d", e0.Launches, e1.Launches, f.Rerouted())

	// Jobs land on the live GPU and carry its name.
	st, err := f.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(st.ID, "gpu1/") {
		t.Errorf("job %q: want it on gpu1, the live one", st.ID)
	}
	if got, ok := f.Job(st.ID); !ok || got.ID != st.ID {
		t.Errorf("Job(%q) = %+v, %v", st.ID, got, ok)
	}
	if jobs := f.Jobs(); len(jobs) != 1 || jobs[0].ID != st.ID {
		t.Errorf("Jobs() = %+v", jobs)
	}
	if c, err := f.CancelJob(st.ID); err != nil || c.ID != st.ID {
		t.Errorf("CancelJob: %+v, %v", c, err)
	}
	if _, err := f.CancelJob("job-1"); !errors.Is(err, server.ErrUnknownJob) {
		t.Errorf("CancelJob without a GPU prefix: %v, want ErrUnknownJob", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.Close(ctx); err == nil || !strings.Contains(err.Error(), "gpu0") {
		t.Errorf("Close: %v, want GPU 0's failure named", err)
	}
}

func TestFleetPlacesModels(t *testing.T) {
	leakCheck(t)
	both := newTestEngine(t, nil)
	onlyTiny := newTestEngine(t, func(c *server.EngineConfig) { c.Models = c.Models[:1] })
	f := newFleet(t, onlyTiny, both)
	var names []string
	for _, m := range f.Models() {
		names = append(names, m.Name)
	}
	if strings.Join(names, ",") != "tiny,tinybert" {
		t.Errorf("fleet models %v, want tiny,tinybert", names)
	}
	// tinybert lives on GPU 1 only: every request goes there.
	req, _ := request(t, tinyBERT(t), modelInfo(t, f, "tinybert"), 1)
	before := f.Engines()[0].Stats().Launches
	for range 5 {
		r := *req
		if _, err := f.Infer(context.Background(), &r); err != nil {
			t.Fatal(err)
		}
	}
	if after := f.Engines()[0].Stats().Launches; after != before {
		t.Errorf("GPU 0, which does not hold tinybert, launched %d kernels for it", after-before)
	}
	unknown := *req
	unknown.Model = "nope"
	if _, err := f.Infer(context.Background(), &unknown); !errors.Is(err, server.ErrUnknownModel) {
		t.Errorf("unknown model: %v, want ErrUnknownModel", err)
	}
	// One name, two different models: refused.
	other := tinyBERT(t)
	clash := newTestEngine(t, func(c *server.EngineConfig) {
		c.Models = []server.EngineModel{{Name: "tiny", Zoo: "distilbert", Model: &other}}
	})
	if f, err := server.NewFleet([]server.Engine{both, clash}); !errors.Is(err, server.ErrConfig) {
		if f != nil {
			f.Close(context.Background())
		}
		t.Errorf("a name serving two different models: %v, want ErrConfig", err)
	}
	if _, err := server.NewFleet(nil); !errors.Is(err, server.ErrConfig) {
		t.Errorf("no engines: %v, want ErrConfig", err)
	}
}

func TestDeviceList(t *testing.T) {
	for _, tc := range []struct {
		in    string
		avail int
		want  []int
		bad   bool
	}{
		{"", 4, []int{0}, false},
		{"0", 4, []int{0}, false},
		{"all", 3, []int{0, 1, 2}, false},
		{"1,3", 4, []int{1, 3}, false},
		{"all", 0, nil, true},
		{"0,0", 2, nil, true},
		{"x", 2, nil, true},
		{"-1", 2, nil, true},
		{"1.5", 2, nil, true},
	} {
		cfg := server.DefaultConfig()
		cfg.Devices = tc.in
		got, err := cfg.DeviceList(tc.avail)
		if (err != nil) != tc.bad || (!tc.bad && !equalInts(got, tc.want)) {
			t.Errorf("Devices %q (available %d): %v, %v; want %v (error %v)", tc.in, tc.avail, got, err, tc.want, tc.bad)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFleetMetricsPerGPU: a multi-GPU daemon's /metrics carries per-GPU
// series beside the totals.
func TestFleetMetricsPerGPU(t *testing.T) {
	leakCheck(t)
	f := newFleet(t, newTestEngine(t, nil), newTestEngine(t, nil))
	reg := prometheus.NewRegistry()
	if err := server.NewMetrics(f, nil).Register(reg); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"atoll_gpu_ready", "atoll_gpu_queue_depth", "atoll_gpu_launches_total", "atoll_gpu_be_work_seconds_total", "atoll_gpu_restarts_total"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 2 {
			t.Errorf("%s: %d series (%v), want one per GPU", name, n, err)
		}
	}
	// Labelled by CUDA ordinal and NVML UUID (what NewEngines sets).
	f.SetDevices([]int{1, 3}, []string{"GPU-aaaa", "GPU-bbbb"})
	if err := testutil.GatherAndCompare(reg, strings.NewReader("# HELP atoll_gpu_ready Per GPU of a multi-GPU daemon: 1 when its engine accepts requests.\n# TYPE atoll_gpu_ready gauge\natoll_gpu_ready{gpu=\"1\",uuid=\"GPU-aaaa\"} 1\natoll_gpu_ready{gpu=\"3\",uuid=\"GPU-bbbb\"} 1\n"), "atoll_gpu_ready"); err != nil {
		t.Error(err)
	}
}

// TestFleetDoesNotWaitForAReopen: with NoWaitOnFailure (what NewEngines
// sets for several GPUs) a request caught by one GPU's failure runs on
// the other at once instead of waiting out that GPU's reopen.
func TestFleetDoesNotWaitForAReopen(t *testing.T) {
	leakCheck(t)
	var failing atomic.Bool
	mk := func(fail bool) server.Engine {
		return newTestEngine(t, func(c *server.EngineConfig) {
			c.Virtual = false
			c.NoWaitOnFailure = true
			c.Restarts, c.RestartBackoff = 2, 3*time.Second
			if fail {
				c.WrapDevice = func(d gpu.Device) gpu.Device {
					fd := faulty.New(d)
					fd.FailWhen(func(method string, _, _ int) bool { return launching(method) && failing.CompareAndSwap(true, false) })
					return fd
				}
			}
		})
	}
	f := newFleet(t, mk(true), mk(false))
	req, _ := request(t, tinyResNet(t), modelInfo(t, f, "tiny"), 1)
	failing.Store(true) // GPU 0's next launch fails; it reopens after 3 s
	start := time.Now()
	failed := clients(t, f, req, 4, 10)
	if failing.Load() || f.Engines()[0].Ready() {
		t.Fatalf("GPU 0's fault not injected (pending %v) or GPU 0 not reopening (ready %v)", failing.Load(), f.Engines()[0].Ready())
	}
	if took := time.Since(start); failed != 0 || took > 2*time.Second {
		t.Errorf("%d failed, 40 requests took %v: want none failed and no wait for GPU 0's 3 s reopen", failed, took)
	}
}

func TestNewEnginesPlacementErrors(t *testing.T) {
	leakCheck(t)
	cfg := server.DefaultConfig()
	cfg.Devices = "0,1"
	cfg.Models = []server.ModelConfig{{Name: "mobilenetv2", Devices: []int{2}}}
	if _, err := server.NewEngines(context.Background(), cfg, 2); !errors.Is(err, server.ErrConfig) || !strings.Contains(err.Error(), "GPU 2") {
		t.Errorf("a model placed on a GPU the daemon does not serve: %v", err)
	}
	cfg.Models[0].Devices = []int{0}
	if _, err := server.NewEngines(context.Background(), cfg, 2); !errors.Is(err, server.ErrConfig) || !strings.Contains(err.Error(), "GPU 1 serves no model") {
		t.Errorf("a GPU with no model: %v", err)
	}
}

// TestFleetJobsSpillOver: a GPU at its max_active_jobs passes the job to
// the next one, and with every GPU full the fleet says so.
func TestFleetJobsSpillOver(t *testing.T) {
	leakCheck(t)
	mk := func(maxJobs int) server.Engine {
		return newTestEngine(t, func(c *server.EngineConfig) { c.Virtual = false; c.MaxActiveJobs = maxJobs })
	}
	e0, e1 := mk(1), mk(2)
	f := newFleet(t, e0, e1)
	long := server.JobSpec{Model: "resnet50-train", Iterations: 1 << 20}
	// One job on each GPU, directly: GPU 0 is now full, GPU 1 has room,
	// and both look equally loaded, so GPU 0 is asked first.
	for _, e := range []server.Engine{e0, e1} {
		if _, err := e.SubmitJob(long); err != nil {
			t.Fatal(err)
		}
	}
	st, err := f.SubmitJob(long)
	if err != nil || !strings.HasPrefix(st.ID, "gpu1/") {
		t.Fatalf("job %q, %v: want it passed on to gpu1", st.ID, err)
	}
	if _, err := f.SubmitJob(long); !errors.Is(err, server.ErrTooManyJobs) {
		t.Errorf("a job with both GPUs full: %v, want ErrTooManyJobs", err)
	}
	for _, j := range f.Jobs() {
		if _, err := f.CancelJob(j.ID); err != nil {
			t.Error(err)
		}
	}
}

// newFleet is NewFleet over engines, closed when the test ends.
func newFleet(t *testing.T, engines ...server.Engine) *server.Fleet {
	t.Helper()
	f, err := server.NewFleet(engines)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = f.Close(ctx)
	})
	return f
}

// TestFleetMovesAJobOffAFailedGPU: a job whose GPU's device fails goes on
// with its iterations left on another GPU, under the same id.
func TestFleetMovesAJobOffAFailedGPU(t *testing.T) {
	leakCheck(t)
	var failing atomic.Bool
	e0 := newTestEngine(t, func(c *server.EngineConfig) {
		c.Virtual = false
		c.WrapDevice = func(d gpu.Device) gpu.Device {
			fd := faulty.New(d)
			fd.FailWhen(func(method string, _, _ int) bool { return launching(method) && failing.Load() })
			return fd
		}
	})
	e1 := newTestEngine(t, func(c *server.EngineConfig) { c.Virtual = false })
	f := newFleet(t, e0, e1)
	st, err := f.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(st.ID, "gpu0/") {
		t.Fatalf("job %q: the test wants it on gpu0 first", st.ID)
	}
	time.Sleep(50 * time.Millisecond)
	failing.Store(true) // GPU 0's device fails for good
	deadline := time.Now().Add(20 * time.Second)
	var now server.JobStatus
	for time.Now().Before(deadline) {
		now, _ = f.Job(st.ID)
		if jobs := e1.Jobs(); len(jobs) == 1 && (now.State == server.JobRunning || now.State == server.JobQueued) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// gpu1 runs what was left: all but the few iterations gpu0 finished.
	if jobs := e1.Jobs(); len(jobs) != 1 || jobs[0].Spec.Iterations > 1<<20 || jobs[0].Spec.Iterations < (1<<20)-100 {
		t.Fatalf("after GPU 0 failed: gpu1 runs %+v; the fleet reports %+v", jobs, now)
	}
	if now.ID != st.ID || now.Spec.Iterations != 1<<20 || (now.State != server.JobRunning && now.State != server.JobQueued) {
		t.Errorf("moved job reported as %+v: want the first id, the whole spec, running", now)
	}
	if all := f.Jobs(); len(all) != 1 || all[0].ID != st.ID {
		t.Errorf("Jobs() = %+v: want the moved job once, under its id", all)
	}
	if c, err := f.CancelJob(st.ID); err != nil {
		t.Errorf("cancel the moved job: %+v, %v", c, err)
	}
	if got, _ := f.Job(st.ID); got.State != server.JobCancelled {
		t.Errorf("after cancel: %+v", got)
	}
}

// TestFleetJobIDsNameTheGPU: job ids carry the GPU's CUDA ordinal, as the
// metrics do.
func TestFleetJobIDsNameTheGPU(t *testing.T) {
	leakCheck(t)
	f := newFleet(t, newTestEngine(t, nil), newTestEngine(t, nil))
	f.SetDevices([]int{2, 5}, nil)
	st, err := f.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(st.ID, "gpu2/") {
		t.Errorf("job %q: want it named by GPU 2", st.ID)
	}
	if got, ok := f.Job(st.ID); !ok || got.ID != st.ID {
		t.Errorf("Job(%q) = %+v, %v", st.ID, got, ok)
	}
	if _, ok := f.Job("gpu0/" + strings.TrimPrefix(st.ID, "gpu2/")); ok {
		t.Error("a job id naming GPU 0, which the fleet does not serve, was found")
	}
	if _, err := f.CancelJob(st.ID); err != nil {
		t.Error(err)
	}
}

// clients runs n concurrent clients of each requests (copies of req, 20 s
// each) against e, reports every failure and returns how many failed.
func clients(t *testing.T, e server.Engine, req *server.InferRequest, n, each int) int32 {
	t.Helper()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				r := *req
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				if _, err := e.Infer(ctx, &r); err != nil {
					failed.Add(1)
					t.Errorf("request: %v", err)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	return failed.Load()
}

// slowEngine counts the requests an engine was given and adds delay to
// each: a replica on a slower (busier) GPU.
type slowEngine struct {
	server.Engine
	delay time.Duration
	n     atomic.Int32
}

func (c *slowEngine) Infer(ctx context.Context, req *server.InferRequest) (*server.InferResult, error) {
	c.n.Add(1)
	time.Sleep(c.delay)
	return c.Engine.Infer(ctx, req)
}

// TestFleetRoutesAroundABusyGPU: two replicas, one much slower per request
// (a GPU busy with other work). Four closed-loop clients send most of their
// requests to the fast one: the fleet predicts each replica's latency from
// its requests in flight and its recent latency per request. (On the
// simulator a BE job's slowdown is hidden by the CPU that computes the
// outputs, so the slowness is added here.)
func TestFleetRoutesAroundABusyGPU(t *testing.T) {
	leakCheck(t)
	e1 := &slowEngine{Engine: newTestEngine(t, nil)}
	req, _ := request(t, tinyResNet(t), modelInfo(t, e1, "tiny"), 1)
	// Slower by ten times a request's own latency here (at least 20 ms), so
	// that the difference holds on a slow machine and under -race.
	var base time.Duration
	for range 3 {
		start := time.Now()
		r := *req
		if _, err := e1.Engine.Infer(context.Background(), &r); err != nil {
			t.Fatal(err)
		}
		base = max(base, time.Since(start))
	}
	e0 := &slowEngine{Engine: newTestEngine(t, nil), delay: max(20*time.Millisecond, 10*base)}
	f := newFleet(t, e0, e1)
	if n := clients(t, f, req, 4, 10); n != 0 {
		t.Fatalf("%d requests failed", n)
	}
	n0, n1 := e0.n.Load(), e1.n.Load()
	t.Logf("requests: slow replica %d, fast replica %d", n0, n1)
	if n0+n1 != 40 || n1 < 3*n0 {
		t.Errorf("slow replica got %d requests, fast one %d: want most on the fast one", n0, n1)
	}
}

// brokenEngine reports a fixed Broken answer.
type brokenEngine struct {
	server.Engine
	err error
}

func (b brokenEngine) Broken() error { return b.err }

// A fleet is broken for good only when every engine is, with their errors.
func TestFleetBrokenWhenEveryGPUIs(t *testing.T) {
	leakCheck(t)
	lost := errors.New("device lost")
	a, b := newTestEngine(t, nil), newTestEngine(t, nil)
	one := newFleet(t, brokenEngine{a, lost}, brokenEngine{b, nil})
	if err := one.Broken(); err != nil {
		t.Errorf("one GPU of two lost: Broken = %v, want nil", err)
	}
	c, d := newTestEngine(t, nil), newTestEngine(t, nil)
	both := newFleet(t, brokenEngine{c, lost}, brokenEngine{d, lost})
	if err := both.Broken(); !errors.Is(err, lost) || !strings.Contains(err.Error(), "gpu1") {
		t.Errorf("both GPUs lost: Broken = %v, want both errors, named by GPU", err)
	}
}

// TestFleetFourGPUs: four simulated GPUs. tinybert placed on GPUs 1 and 3
// only runs there; the replicated model spreads over all four; with two
// GPUs failed for good, every request is answered by the other two.
func TestFleetFourGPUs(t *testing.T) {
	leakCheck(t)
	var failing atomic.Bool
	var engines []server.Engine
	for g := range 4 {
		engines = append(engines, newTestEngine(t, func(c *server.EngineConfig) {
			c.Virtual = false
			if g%2 == 0 {
				c.Models = c.Models[:1] // tiny only: tinybert on GPUs 1 and 3
				c.Restarts = 0
				c.WrapDevice = func(d gpu.Device) gpu.Device {
					fd := faulty.New(d)
					fd.FailWhen(func(method string, _, nth int) bool { return launching(method) && failing.Load() })
					return fd
				}
			}
		}))
	}
	f := newFleet(t, engines...)
	launches := func() []uint64 {
		var l []uint64
		for _, e := range f.Engines() {
			l = append(l, e.Stats().Launches)
		}
		return l
	}
	tiny, _ := request(t, tinyResNet(t), modelInfo(t, f, "tiny"), 1)
	if n := clients(t, f, tiny, 8, 10); n != 0 {
		t.Fatalf("%d requests failed with four GPUs up", n)
	}
	spread := launches()
	for g, l := range spread {
		if l == 0 {
			t.Errorf("GPU %d launched nothing for 80 requests from 8 clients (launches %v)", g, spread)
		}
	}
	bert, _ := request(t, tinyBERT(t), modelInfo(t, f, "tinybert"), 1)
	if n := clients(t, f, bert, 4, 5); n != 0 {
		t.Fatalf("%d tinybert requests failed", n)
	}
	after := launches()
	for _, g := range []int{0, 2} {
		if after[g] != spread[g] {
			t.Errorf("GPU %d, which holds no tinybert, launched %d kernels for it", g, after[g]-spread[g])
		}
	}
	failing.Store(true) // GPUs 0 and 2 fail from now on, no restarts
	if n := clients(t, f, tiny, 8, 10); n != 0 {
		t.Errorf("%d requests failed with GPUs 0 and 2 down", n)
	}
	if !f.Ready() || f.Engines()[0].Ready() || f.Engines()[2].Ready() {
		t.Errorf("fleet ready %v, GPU 0 ready %v, GPU 2 ready %v: want the fleet up on GPUs 1 and 3",
			f.Ready(), f.Engines()[0].Ready(), f.Engines()[2].Ready())
	}
	t.Logf("launches per GPU: %v after spreading, %v at the end; rerouted %d", spread, launches(), f.Rerouted())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = f.Close(ctx) // names GPUs 0 and 2's failures
}
