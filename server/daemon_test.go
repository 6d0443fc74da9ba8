package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// running is a daemon under test: cancel starts its shutdown; finished is
// closed when Run has returned err.
type running struct {
	cancel   context.CancelFunc
	finished chan struct{}
	err      error
}

// wait waits up to 5 s for Run to return.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-r.finished:
		return r.err
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after shutdown")
		return nil
	}
}

// daemon runs Run over f on 127.0.0.1:0 and returns its base URL, a
// client, and the running daemon.
func daemon(t *testing.T, f *fakeEngine, cfg Config, opts ...RunOption) (string, *http.Client, *running) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{cancel: cancel, finished: make(chan struct{})}
	started := make(chan net.Addr, 1)
	opts = append([]RunOption{WithListener(ln), WithLogger(slog.New(slog.DiscardHandler)), WithVersion("test"),
		WithStarted(func(a net.Addr) { started <- a })}, opts...)
	go func() {
		defer close(run.finished)
		run.err = Run(ctx, cfg, f, opts...)
	}()
	var addr net.Addr
	select {
	case addr = <-started:
	case <-run.finished:
		t.Fatalf("Run returned before serving: %v", run.err)
	}
	c := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	t.Cleanup(func() {
		cancel()
		<-run.finished
		c.CloseIdleConnections()
	})
	return "http://" + addr.String(), c, run
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.ShutdownTimeout = 300 * time.Millisecond
	return cfg
}

func TestMetricsExposition(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	gpus := GPUSourceFunc(func() ([]GPUSample, error) {
		return []GPUSample{{Index: 0, Name: "fake H100", UUID: "GPU-1", UtilGPU: 42, MemoryUsed: 1 << 30, MemoryTotal: 80 << 30, PowerDraw: 300, PowerLimit: 700}}, nil
	})
	u, c, _ := daemon(t, f, testConfig(), WithGPUSource(gpus))

	do(t, c, "POST", u+"/v2/models/echo/infer", goodInfer)
	do(t, c, "POST", u+"/v2/models/echo/infer", goodInfer)
	do(t, c, "POST", u+"/v2/models/echo/infer", `{"parameters":{"priority":2},"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`)
	do(t, c, "POST", u+"/v2/models/echo/infer", `{"inputs":[`)
	do(t, c, "POST", u+"/v2/models/no-such-model-1/infer", goodInfer)
	do(t, c, "POST", u+"/v2/models/no-such-model-2/infer", goodInfer)

	r := do(t, c, "GET", u+"/metrics", "")
	if r.code != 200 {
		t.Fatalf("/metrics: %d %s", r.code, r.raw)
	}
	for _, want := range []string{
		`atoll_requests_total{class="HP",code="200",model="echo"} 2`,
		`atoll_requests_total{class="BE",code="200",model="echo"} 1`,
		`atoll_requests_total{class="_none",code="400",model="echo"} 1`,
		`atoll_request_failures_total{class="_none",code="400",model="echo"} 1`,
		`atoll_request_failures_total{class="_none",code="404",model="_unknown"} 2`,
		`atoll_request_duration_seconds_count{class="HP",model="echo"} 2`,
		`atoll_request_duration_seconds_bucket{class="HP",model="echo",le="+Inf"} 2`,
		`atoll_request_queue_seconds_sum{class="HP",model="echo"} 0.0003`,
		`atoll_request_phase_seconds_count{class="HP",model="echo",phase="compute_infer"} 2`,
		`atoll_request_phase_seconds_count{class="HP",model="echo",phase="decode"} 2`,
		`atoll_request_phase_seconds_count{class="BE",model="echo",phase="queue"} 1`,
		`atoll_request_delay_seconds_sum{cause="co-run",class="HP",model="echo"} 8e-05`,
		`atoll_request_delay_seconds_sum{cause="variance",class="HP",model="echo"} 0`,
		`atoll_request_delay_seconds_count{cause="host",class="HP",model="echo"} 2`,
		`atoll_requests_in_flight{model="echo"} 0`,
		`atoll_preemptions_total 7`,
		`atoll_preemption_latency_seconds_count 2`,
		`atoll_padded_launches_total 3`,
		`atoll_launches_total 100`,
		`atoll_be_iterations_total 12`,
		`atoll_be_work_seconds_total 1.5`,
		`atoll_queue_depth 2`,
		`atoll_ready 1`,
		`atoll_engine_restarts_total 0`,
		`atoll_engine_info{backend="sim",device="fake H100"} 1`,
		`atoll_gpu_utilization_ratio{gpu="0",name="fake H100",uuid="GPU-1"} 0.42`,
		`atoll_gpu_memory_total_bytes{gpu="0",name="fake H100",uuid="GPU-1"} 8.589934592e+10`,
		`atoll_gpu_power_watts{gpu="0",name="fake H100",uuid="GPU-1"} 300`,
		`go_goroutines`,
	} {
		if !strings.Contains(r.raw, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(r.raw, "no-such-model") {
		t.Error("an unknown model name became a label value")
	}
	// Preemption latencies are observed once: a second scrape keeps the count.
	r = do(t, c, "GET", u+"/metrics", "")
	if !strings.Contains(r.raw, `atoll_preemption_latency_seconds_count 2`) {
		t.Error("second scrape changed the preemption latency count")
	}
}

func TestMetricsGPUSourceError(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	gpus := GPUSourceFunc(func() ([]GPUSample, error) { return nil, errors.New("nvml gone") })
	u, c, _ := daemon(t, f, testConfig(), WithGPUSource(gpus))
	r := do(t, c, "GET", u+"/metrics", "")
	if r.code != 200 || !strings.Contains(r.raw, "atoll_preemptions_total") || strings.Contains(r.raw, "atoll_gpu_power_watts{") {
		t.Errorf("/metrics with a failing GPU source: %d\n%s", r.code, r.raw)
	}
}

// TestShutdownAnswersEveryRequest starts requests that block in the engine,
// shuts the daemon down, and checks every one of them got an answer: 200
// when the engine finishes them within the timeout, 503 (shutting down)
// when Close has to fail them.
func TestShutdownAnswersEveryRequest(t *testing.T) {
	for _, finish := range []bool{true, false} {
		t.Run(fmt.Sprintf("finish=%v", finish), func(t *testing.T) {
			leakCheck(t)
			const n = 6
			f := newFakeEngine()
			f.block = make(chan struct{})
			f.entered = make(chan string, n)
			u, c, run := daemon(t, f, testConfig())
			// One job running at shutdown.
			if r := do(t, c, "POST", u+"/v2/jobs", `{"model":"echo","batch":1,"iterations":5}`); r.code != 201 {
				t.Fatalf("submit: %d %s", r.code, r.raw)
			}
			var wg sync.WaitGroup
			replies := make([]reply, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					replies[i] = do(t, c, "POST", u+"/v2/models/echo/infer", goodInfer)
				}()
			}
			for range n {
				<-f.entered
			}
			run.cancel()
			if finish {
				// Release while the HTTP server drains: they finish normally.
				time.Sleep(50 * time.Millisecond)
				close(f.block)
			}
			if err := run.wait(t); err != nil {
				t.Errorf("Run: %v", err)
			}
			wg.Wait()
			for i, r := range replies {
				switch {
				case finish && r.code != 200:
					t.Errorf("request %d: %d %s, want 200", i, r.code, r.raw)
				case !finish && (r.code != 503 || !strings.Contains(r.body["error"].(string), "shutting down")):
					t.Errorf("request %d: %d %s, want 503 shutting down", i, r.code, r.raw)
				}
			}
			select {
			case <-f.closed:
			default:
				t.Error("Run returned without closing the engine")
			}
			// Nothing listens any more.
			if _, err := c.Get(u + "/v2/health/live"); err == nil {
				t.Error("the daemon still answers after Run returned")
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	bad := testConfig()
	bad.Backend = "tpu"
	if err := Run(context.Background(), bad, f); !errors.Is(err, ErrConfig) {
		t.Errorf("Run with a bad config: %v", err)
	}
	select {
	case <-f.closed:
	default:
		t.Error("Run did not close the engine it owns after failing")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := testConfig()
	cfg.Listen = ln.Addr().String()
	err = Run(context.Background(), cfg, newFakeEngine(), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err == nil || !strings.Contains(err.Error(), "--listen") {
		t.Errorf("Run on a busy port: %v", err)
	}

	f = newFakeEngine()
	f.closeErr = errors.New("device lost")
	u, c, run := daemon(t, f, testConfig())
	do(t, c, "GET", u+"/v2", "")
	run.cancel()
	if err := run.wait(t); err == nil || !strings.Contains(err.Error(), "device lost") {
		t.Errorf("Run with a failing Close: %v", err)
	}
}

// TestStreamsWarning: on the GPU, a configuration whose clients reach
// streamsWarnAt streams gets a warning that says why and what to do; fewer
// clients, or the simulator, none.
func TestStreamsWarning(t *testing.T) {
	models := func(n int) []ModelConfig { return make([]ModelConfig, n) }
	jobs := func(n int) []JobModelConfig { return make([]JobModelConfig, n) }
	for _, tc := range []struct {
		cfg  Config
		warn bool
	}{
		{Config{Backend: "cuda", Models: models(6), Jobs: jobs(1)}, false},
		{Config{Backend: "cuda", Models: models(6), Jobs: jobs(2)}, true},
		{Config{Backend: "cuda", Models: models(7)}, true},
		{Config{Backend: "sim", Models: models(20), Jobs: jobs(5)}, false},
	} {
		w := streamsWarning(tc.cfg)
		if (w != "") != tc.warn {
			t.Errorf("%s, %d models, %d job models: warning %q, want one: %v", tc.cfg.Backend, len(tc.cfg.Models), len(tc.cfg.Jobs), w, tc.warn)
		}
		if w != "" && (!strings.Contains(w, "docs/cuda.md") || !strings.Contains(w, "serve fewer models")) {
			t.Errorf("warning %q does not say where to read or what to do", w)
		}
	}
}
