package standby_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"atoll/models"
	"atoll/server"
	pb "atoll/server/inferencepb"
	"atoll/server/standby"
)

// daemonWorkers starts workers as in-process daemons over the simulator,
// each serving a tiny ResNet as "tiny" (ResNet-50's timings) and allowing
// ResNet-50 training jobs, from the configuration standby.WorkerConfig
// gives them (restarts 0; the fault drill only in the first).
func daemonWorkers(t *testing.T, cfg server.Config, dir string) standby.StartFunc {
	t.Helper()
	tiny, err := models.NewResNet("tiny-resnet", models.ResNetConfig{Blocks: [4]int{1, 1, 1, 1}, Image: 32, Width: 8, Classes: 10})
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, gen int) (*standby.Worker, error) {
		wc := standby.WorkerConfig(cfg, gen, dir)
		ec := wc.Engine()
		ec.Models = []server.EngineModel{{Name: "tiny", Zoo: "resnet50", Model: &tiny, MaxQueue: 64, DefaultClass: server.HP}}
		ec.Workers = 1
		eng, err := server.NewEngine(ctx, ec)
		if err != nil {
			return nil, err
		}
		path := strings.TrimPrefix(wc.Listen, "unix:")
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, err
		}
		rctx, stop := context.WithCancel(context.Background())
		exited := make(chan struct{})
		go func() {
			defer close(exited)
			if err := server.Run(rctx, wc, eng, server.WithListener(ln), server.WithLogger(slog.New(slog.DiscardHandler))); err != nil {
				t.Logf("worker %d: %v", gen, err)
			}
		}()
		w := &standby.Worker{Gen: gen, URL: "http://worker", Client: standby.UnixClient(path), Exited: exited, Stop: stop, Kill: stop}
		if g, ok := strings.CutPrefix(wc.GRPCListen, "unix:"); ok {
			w.GRPCTarget = "unix://" + g
		}
		return w, nil
	}
}

// serve runs standby.Serve with start until the test ends and returns the
// API's base URL, and its gRPC address when cfg serves gRPC.
func serve(t *testing.T, cfg server.Config, start func(dir string) standby.StartFunc) (base, grpcAddr string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opt := standby.ServeOptions{Listener: ln, Logger: slog.New(slog.DiscardHandler)}
	if cfg.GRPCListen != "" {
		if opt.GRPCListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		grpcAddr = opt.GRPCListener.Addr().String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opt.Start = start(t.TempDir())
	go func() { done <- standby.Serve(ctx, cfg, opt) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("Serve did not return 60 s after its context ended")
		}
	})
	base = "http://" + ln.Addr().String()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _ := call(t, http.MethodGet, base+"/v2/health/ready", nil, nil); code == http.StatusOK {
			return base, grpcAddr
		}
		if time.Now().After(deadline) {
			t.Fatal("the supervisor was not ready within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// call sends one request and decodes a JSON answer into out (when not nil).
func call(t *testing.T, method, url string, body []byte, out any) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, b)
		}
	}
	return resp.StatusCode, string(b)
}

func drillConfig() server.Config {
	cfg := server.DefaultConfig()
	cfg.Models = []server.ModelConfig{{Name: "tiny", Zoo: "resnet50", Batch: 1, DefaultClass: server.HP, MaxQueue: 64}}
	cfg.Jobs = []server.JobModelConfig{{Model: "resnet50-train"}}
	// The fault comes a few training iterations in (718 launches each),
	// after both jobs are submitted.
	cfg.FaultDrill = server.FaultDrill{BELaunch: 3000}
	cfg.Standby = true
	return cfg
}

// inferBody is a request for the tiny model, built from its metadata as a
// client would.
func inferBody(t *testing.T, base string) []byte {
	t.Helper()
	var meta server.ModelInfo
	if code, msg := call(t, http.MethodGet, base+"/v2/models/tiny", nil, &meta); code != http.StatusOK {
		t.Fatalf("model metadata through the supervisor: %d %s", code, msg)
	}
	in := meta.Inputs[0]
	n := 1
	shape := make([]int64, len(in.Shape))
	for i, d := range in.Shape {
		shape[i] = max(d, 1)
		n *= int(shape[i])
	}
	data := make([]float64, n)
	for i := range data {
		data[i] = float64(i%7) / 7
	}
	b, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": in.Name, "shape": shape, "datatype": in.Datatype, "data": data}}})
	return b
}

// TestFaultFailsOverWithoutLosingHP is issue 18's drill on the simulator
// through worker daemons: a BE kernel of a training job faults in the
// serving worker (the device of that worker is then broken for good, as a
// GPU's is); the standby serves at once, every HP request is answered 200
// (those caught in the fault are sent again), the faulting job ends failed
// naming the fault kernel, the job that asked to resume finishes all its
// iterations under its id, and a new standby starts.
func TestFaultFailsOverWithoutLosingHP(t *testing.T) {
	cfg := drillConfig()
	base, _ := serve(t, cfg, func(dir string) standby.StartFunc { return daemonWorkers(t, cfg, dir) })
	body := inferBody(t, base)

	var faulty, resumed server.JobStatus
	if code, msg := call(t, http.MethodPost, base+"/v2/jobs", []byte(`{"model":"resnet50-train","iterations":1000000}`), &faulty); code != http.StatusCreated {
		t.Fatalf("submit: %d %s", code, msg)
	}
	if code, msg := call(t, http.MethodPost, base+"/v2/jobs", []byte(`{"model":"resnet50-train","iterations":3,"resume":true}`), &resumed); code != http.StatusCreated {
		t.Fatalf("submit: %d %s", code, msg)
	}
	if faulty.ID != "job-1" || resumed.ID != "job-2" || !resumed.Spec.Resume {
		t.Fatalf("submitted %+v and %+v: want job-1, then job-2 with resume", faulty, resumed)
	}

	jobEnded := func(id string) (server.JobStatus, bool) {
		var st server.JobStatus
		code, msg := call(t, http.MethodGet, base+"/v2/jobs/"+id, nil, &st)
		if code != http.StatusOK {
			t.Errorf("GET job %s: %d %s", id, code, msg)
		}
		return st, !st.Ended.IsZero()
	}
	var served, failed atomic.Int32
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			after := 0
			for i := 0; i < 400 && after < 10; i++ {
				if _, ok := jobEnded("job-2"); ok {
					after++
				}
				if code, msg := call(t, http.MethodPost, base+"/v2/models/tiny/infer", body, nil); code != http.StatusOK {
					failed.Add(1)
					t.Errorf("HP request across the fault: %d %s", code, msg)
				} else {
					served.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() != 0 || served.Load() == 0 {
		t.Fatalf("HP: %d served, %d failed", served.Load(), failed.Load())
	}
	st, _ := jobEnded("job-1")
	if st.State != server.JobFailed || !strings.Contains(st.Error, "fault_trap") {
		t.Errorf("the faulting job: %+v, want failed naming the fault kernel", st)
	}
	st, _ = jobEnded("job-2")
	if st.State != server.JobDone || st.Done != 3 || st.Resumed != 1 || st.Spec.Iterations != 3 {
		t.Errorf("the job that asked to resume: %+v, want done, 3 of 3 iterations, resumed once", st)
	}
	if code, msg := call(t, http.MethodDelete, base+"/v2/jobs/job-1", nil, nil); code != http.StatusConflict {
		t.Errorf("cancelling an ended job: %d %s, want 409", code, msg)
	}
	if code, _ := call(t, http.MethodGet, base+"/v2/jobs/job-9", nil, nil); code != http.StatusNotFound {
		t.Errorf("an unknown job: %d, want 404", code)
	}
	var list struct{ Jobs []server.JobStatus }
	call(t, http.MethodGet, base+"/v2/jobs", nil, &list)
	if len(list.Jobs) != 2 || list.Jobs[0].ID != "job-1" || list.Jobs[1].ID != "job-2" {
		t.Errorf("job list %+v, want job-1 and job-2", list.Jobs)
	}

	// A later job runs (on worker 2, the drill fired once), and a new
	// standby (worker 3) gets ready.
	var next server.JobStatus
	if code, msg := call(t, http.MethodPost, base+"/v2/jobs", []byte(`{"model":"resnet50-train","iterations":2}`), &next); code != http.StatusCreated {
		t.Fatalf("submit after the failover: %d %s", code, msg)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, metrics := call(t, http.MethodGet, base+"/metrics", nil, nil)
		st, done := jobEnded(next.ID)
		if done && strings.Contains(metrics, "atoll_standby_ready 1") {
			for _, want := range []string{"atoll_standby_failovers_total 1", "atoll_standby_serving_worker 2", "atoll_requests_total"} {
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
			if st.State != server.JobDone {
				t.Errorf("a job after the failover: %+v, want done", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the failover: job %+v, metrics ready line missing", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fakeWorker is a worker with a scripted HTTP API: live and ready until
// killed; infer answers with its name, or blocks until killed when hang.
type fakeWorker struct {
	gen      int
	hang     bool
	pause    atomic.Pointer[chan struct{}] // when set, infer waits for it to close, then answers
	refuse   atomic.Bool                   // infer answers 503, as a full queue does
	refuseN  atomic.Int32                  // the next N infer requests are answered 503
	received atomic.Int32                  // infer and job requests that reached it
	killed   chan struct{}
	once     sync.Once
	srv      *http.Server
}

func startFake(t *testing.T, dir string, gen int, hang bool) (*standby.Worker, *fakeWorker) {
	t.Helper()
	f := &fakeWorker{gen: gen, hang: hang, killed: make(chan struct{})}
	path := fmt.Sprintf("%s/fake-%d.sock", dir, gen)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/{what}", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "fake_worker %d\n", gen) })
	mux.HandleFunc("POST /v2/models/m/infer", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.received.Add(1)
		if f.hang {
			<-f.killed
			panic(http.ErrAbortHandler) // the connection drops, as when a process dies
		}
		if f.refuse.Load() || f.refuseN.Add(-1) >= 0 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":"server: queue full"}`, http.StatusServiceUnavailable)
			return
		}
		if p := f.pause.Load(); p != nil {
			select {
			case <-*p:
			case <-f.killed:
				panic(http.ErrAbortHandler)
			}
		}
		fmt.Fprintf(w, "worker %d: %s", gen, b)
	})
	mux.HandleFunc("POST /v2/jobs", func(w http.ResponseWriter, r *http.Request) {
		f.received.Add(1)
		<-f.killed
		panic(http.ErrAbortHandler)
	})
	f.srv = &http.Server{Handler: mux}
	exited := make(chan struct{})
	go func() { f.srv.Serve(ln); close(exited) }()
	t.Cleanup(f.kill)
	return &standby.Worker{Gen: gen, URL: "http://fake", Client: standby.UnixClient(path), Exited: exited, Stop: f.kill, Kill: f.kill}, f
}

// kill ends the fake as a process's death would: its connections drop
// (open requests get no answer) and it accepts no more.
func (f *fakeWorker) kill() { f.once.Do(func() { f.srv.Close(); close(f.killed) }) }

// TestWorkerExitResendsInference: the serving worker's process dies with
// requests in it; each inference request is answered by the standby, same
// body; a job submission caught the same way is not sent again (it may have
// been accepted) and says so.
func TestWorkerExitResendsInference(t *testing.T) {
	var mu sync.Mutex
	fakes := map[int]*fakeWorker{}
	cfg := server.DefaultConfig()
	cfg.Models = []server.ModelConfig{{Name: "m", Zoo: "resnet50"}}
	base, _ := serve(t, cfg, func(dir string) standby.StartFunc {
		return func(ctx context.Context, gen int) (*standby.Worker, error) {
			w, f := startFake(t, dir, gen, gen == 1)
			mu.Lock()
			fakes[gen] = f
			mu.Unlock()
			return w, nil
		}
	})
	// Wait for the standby, so that the failover has one to promote.
	for {
		_, m := call(t, http.MethodGet, base+"/metrics", nil, nil)
		mu.Lock()
		n := len(fakes)
		mu.Unlock()
		if n >= 2 || strings.Contains(m, "ready 1") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	type answer struct {
		code int
		msg  string
	}
	answers := make(chan answer, 5)
	for i := range 4 {
		go func() {
			code, msg := call(t, http.MethodPost, base+"/v2/models/m/infer", []byte(fmt.Sprint("req", i)), nil)
			answers <- answer{code, msg}
		}()
	}
	go func() {
		code, msg := call(t, http.MethodPost, base+"/v2/jobs", []byte(`{"model":"x","iterations":1}`), nil)
		answers <- answer{code, msg}
	}()
	mu.Lock()
	first := fakes[1]
	mu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); first.received.Load() < 5; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 5 requests reached worker 1 in 10 s", first.received.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	first.kill()
	var infer, jobs int
	for range 5 {
		a := <-answers
		switch {
		case a.code == http.StatusOK && strings.HasPrefix(a.msg, "worker 2: req"):
			infer++
		case a.code == http.StatusServiceUnavailable && strings.Contains(a.msg, "not sent again"):
			jobs++
		default:
			t.Errorf("answer %d %q", a.code, a.msg)
		}
	}
	if infer != 4 || jobs != 1 {
		t.Errorf("%d inference requests answered by the standby (want 4), %d job submissions refused as not resent (want 1)", infer, jobs)
	}
}

// TestNoStandbyWaitsForTheNext: when the serving worker fails before the
// standby is ready, a request waits for the next worker instead of failing.
func TestNoStandbyWaitsForTheNext(t *testing.T) {
	release := make(chan struct{})
	first := make(chan *fakeWorker, 1)
	cfg := server.DefaultConfig()
	cfg.Models = []server.ModelConfig{{Name: "m", Zoo: "resnet50"}}
	base, _ := serve(t, cfg, func(dir string) standby.StartFunc {
		return func(ctx context.Context, gen int) (*standby.Worker, error) {
			if gen == 2 {
				select { // the standby's start is slow
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			w, f := startFake(t, dir, gen, gen == 1)
			if gen == 1 {
				first <- f
			}
			return w, nil
		}
	})
	got := make(chan string, 1)
	go func() {
		code, msg := call(t, http.MethodPost, base+"/v2/models/m/infer", []byte("x"), nil)
		got <- fmt.Sprint(code, " ", msg)
	}()
	time.Sleep(100 * time.Millisecond)
	f := <-first
	f.kill()
	time.Sleep(300 * time.Millisecond)
	select {
	case a := <-got:
		t.Fatalf("answered before any worker could: %s", a)
	default:
	}
	if code, _ := call(t, http.MethodGet, base+"/v2/health/ready", nil, nil); code != http.StatusServiceUnavailable {
		t.Errorf("readiness with no worker serving: %d, want 503", code)
	}
	close(release)
	select {
	case a := <-got:
		if a != "200 worker 2: x" {
			t.Errorf("answer %q, want worker 2's", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer 10 s after the next worker started")
	}
}

// TestStartFailuresEndLiveness: a standby that fails to start is started
// again; after StartRetries failures in a row liveness fails (a process
// supervisor then restarts the daemon) while the serving worker serves on.
func TestStartFailuresEndLiveness(t *testing.T) {
	dir := t.TempDir()
	var starts atomic.Int32
	sup := standby.New(standby.Options{Logger: slog.New(slog.DiscardHandler), StartRetries: 2,
		Start: func(ctx context.Context, gen int) (*standby.Worker, error) {
			starts.Add(1)
			if gen > 1 {
				return nil, fmt.Errorf("no GPU memory left for worker %d", gen)
			}
			w, _ := startFake(t, dir, gen, false)
			return w, nil
		}})
	if err := sup.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer sup.Close(time.Second)
	srv := httptest.NewServer(sup)
	defer srv.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, msg := call(t, http.MethodGet, srv.URL+"/v2/health/live", nil, nil)
		if code == http.StatusServiceUnavailable {
			if !strings.Contains(msg, "2 workers in a row failed to start") || !strings.Contains(msg, "no GPU memory left for worker 3") {
				t.Errorf("liveness says %s", msg)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("liveness still %d after the standby failed to start %d times", code, starts.Load()-1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, msg := call(t, http.MethodPost, srv.URL+"/v2/models/m/infer", []byte("y"), nil); code != http.StatusOK || msg != "worker 1: y" {
		t.Errorf("the serving worker after its standby failed: %d %q", code, msg)
	}
}

// TestGuardAndLimits: the configured restrictions hold at the supervisor
// (the workers have none), and a body over body_limit is refused there.
func TestGuardAndLimits(t *testing.T) {
	t.Setenv("STANDBY_TEST_TOKEN", "s3cret")
	cfg := server.DefaultConfig()
	cfg.Models = []server.ModelConfig{{Name: "m", Zoo: "resnet50"}}
	cfg.Restricted = []server.RestrictedConfig{{Groups: []string{server.GroupJobs}, TokenEnv: "STANDBY_TEST_TOKEN"}}
	cfg.BodyLimit = 1 << 10
	base, _ := serve(t, cfg, func(dir string) standby.StartFunc {
		return func(ctx context.Context, gen int) (*standby.Worker, error) {
			w, _ := startFake(t, dir, gen, false)
			return w, nil
		}
	})
	if code, msg := call(t, http.MethodGet, base+"/v2/jobs", nil, nil); code != http.StatusUnauthorized || !strings.Contains(msg, "Authorization: Bearer") {
		t.Errorf("jobs without the token: %d %s, want 401", code, msg)
	}
	if code, msg := call(t, http.MethodPost, base+"/v2/models/m/infer", make([]byte, 2<<10), nil); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 2 KiB body over a 1 KiB limit: %d %s, want 413", code, msg)
	}
	if code, msg := call(t, http.MethodPost, base+"/v2/models/m/infer", []byte("z"), nil); code != http.StatusOK || msg != "worker 1: z" {
		t.Errorf("inference (not restricted): %d %q", code, msg)
	}
}

// TestStallHedgesToTheStandby: a serving worker that holds requests and
// answers none for StallAfter (as a GPU worker does between a kernel's
// fault and its report) has them answered by the standby, and new requests
// go there directly; once it answers again, requests go back to it.
func TestStallHedgesToTheStandby(t *testing.T) {
	url, fakes := fakeSupervisor(t, 50*time.Millisecond, nil)
	first := <-fakes
	waitStandby(t, url)
	pause := make(chan struct{})
	first.pause.Store(&pause)
	start := time.Now()
	got := make(chan string, 6)
	for i := range 6 {
		go func() {
			if i >= 3 {
				time.Sleep(150 * time.Millisecond) // after the stall was declared
			}
			code, msg := call(t, http.MethodPost, url+"/v2/models/m/infer", []byte(fmt.Sprint("q", i)), nil)
			got <- fmt.Sprint(code, " ", msg)
		}()
	}
	for range 6 {
		a := <-got
		if !strings.HasPrefix(a, "200 worker 2: q") {
			t.Errorf("answer %q during the stall, want the standby's", a)
		}
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("the stalled worker's requests took %v to be answered", el)
	}
	first.pause.Store(nil)
	close(pause) // worker 1 answers its held requests: it recovered
	hedged := 6
	for deadline := time.Now().Add(5 * time.Second); ; hedged++ {
		code, msg := call(t, http.MethodPost, url+"/v2/models/m/infer", []byte("after"), nil)
		if code == http.StatusOK && msg == "worker 1: after" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the stall ended: %d %q, want worker 1 again", code, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, m := call(t, http.MethodGet, url+"/metrics", nil, nil)
	for _, want := range []string{"atoll_standby_stalls_total 1", fmt.Sprint("atoll_standby_hedged_requests_total ", hedged), "atoll_standby_failovers_total 0"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestRefusalOverflowsToTheStandby: a request the serving worker refuses
// with 503 (a full queue — which a fault also causes, before it shows) is
// answered by the idle standby; with no standby the 503 is the answer.
func TestRefusalOverflowsToTheStandby(t *testing.T) {
	release := make(chan struct{})
	url, fakes := fakeSupervisor(t, 0, func(gen int, ctx context.Context) error {
		if gen == 2 {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	first := <-fakes
	first.refuse.Store(true)
	if code, _ := call(t, http.MethodPost, url+"/v2/models/m/infer", []byte("a"), nil); code != http.StatusServiceUnavailable {
		t.Errorf("a refusal with no standby: %d, want the worker's 503", code)
	}
	close(release)
	<-fakes
	waitStandby(t, url)
	if code, msg := call(t, http.MethodPost, url+"/v2/models/m/infer", []byte("b"), nil); code != http.StatusOK || msg != "worker 2: b" {
		t.Errorf("a refusal with a standby: %d %q, want the standby's answer", code, msg)
	}
	if _, m := call(t, http.MethodGet, url+"/metrics", nil, nil); !strings.Contains(m, "atoll_standby_overflow_requests_total 1") {
		t.Errorf("the overflow is not counted")
	}
}

// TestTakeoverBurstIsRetried: the standby taking over from a stalled worker
// gets its held requests at once and refuses some (503, a full queue); the
// supervisor sends those again as it drains, so every request is answered
// 200.
func TestTakeoverBurstIsRetried(t *testing.T) {
	url, fakes := fakeSupervisor(t, 50*time.Millisecond, nil)
	first, second := <-fakes, <-fakes
	waitStandby(t, url)
	pause := make(chan struct{})
	defer close(pause)
	first.pause.Store(&pause)
	second.refuseN.Store(3)
	got := make(chan string, 5)
	for i := range 5 {
		go func() {
			code, msg := call(t, http.MethodPost, url+"/v2/models/m/infer", []byte(fmt.Sprint("r", i)), nil)
			got <- fmt.Sprint(code, " ", msg)
		}()
	}
	for range 5 {
		if a := <-got; !strings.HasPrefix(a, "200 worker 2: r") {
			t.Errorf("answer %q, want the standby's 200", a)
		}
	}
	if _, m := call(t, http.MethodGet, url+"/metrics", nil, nil); !strings.Contains(m, "atoll_standby_takeover_retries_total 3") {
		t.Errorf("metrics do not count 3 takeover retries")
	}
}

// fakeSupervisor starts a supervisor over fake workers (stallAfter 0: the
// default), serves it, and returns its URL and the fakes as they start.
func fakeSupervisor(t *testing.T, stallAfter time.Duration, gate func(gen int, ctx context.Context) error) (string, chan *fakeWorker) {
	t.Helper()
	dir := t.TempDir()
	fakes := make(chan *fakeWorker, 4)
	sup := standby.New(standby.Options{Logger: slog.New(slog.DiscardHandler), StallAfter: stallAfter,
		Start: func(ctx context.Context, gen int) (*standby.Worker, error) {
			if gate != nil {
				if err := gate(gen, ctx); err != nil {
					return nil, err
				}
			}
			w, f := startFake(t, dir, gen, false)
			fakes <- f
			return w, nil
		}})
	if err := sup.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sup)
	t.Cleanup(func() { srv.Close(); sup.Close(time.Second) })
	return srv.URL, fakes
}

// waitStandby waits until the supervisor at url has a warm standby.
func waitStandby(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, m := call(t, http.MethodGet, url+"/metrics", nil, nil); strings.Contains(m, "atoll_standby_ready 1") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no standby within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGRPCFailsOver: the drill through the supervisor's gRPC API — every
// ModelInfer across the fault answered OK, ServerLive true throughout, and
// a call to a restricted group refused without its token.
func TestGRPCFailsOver(t *testing.T) {
	t.Setenv("STANDBY_GRPC_TOKEN", "tok")
	cfg := drillConfig()
	cfg.GRPCListen = "127.0.0.1:0"
	cfg.Restricted = []server.RestrictedConfig{{Groups: []string{server.GroupJobs}, TokenEnv: "STANDBY_GRPC_TOKEN"}}
	base, grpcAddr := serve(t, cfg, func(dir string) standby.StartFunc { return daemonWorkers(t, cfg, dir) })
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewGRPCInferenceServiceClient(conn)
	meta, err := c.ModelMetadata(context.Background(), &pb.ModelMetadataRequest{Name: "tiny"})
	if err != nil {
		t.Fatalf("ModelMetadata through the supervisor: %v", err)
	}
	in := meta.GetInputs()[0]
	n := int64(1)
	shape := make([]int64, len(in.GetShape()))
	for i, d := range in.GetShape() {
		shape[i] = max(d, 1)
		n *= shape[i]
	}
	size := map[string]int64{"BF16": 2, "FP16": 2, "FP32": 4, "INT32": 4}[in.GetDatatype()]
	req := &pb.ModelInferRequest{ModelName: "tiny", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
		Name: in.GetName(), Datatype: in.GetDatatype(), Shape: shape}}, RawInputContents: [][]byte{make([]byte, n*size)}}
	if _, err := c.ModelInfer(context.Background(), req); err != nil {
		t.Fatalf("ModelInfer: %v", err)
	}
	// The job that faults, then HP calls until the failover is done.
	if code, msg := call(t, http.MethodPost, base+"/v2/jobs", []byte(`{"model":"resnet50-train","iterations":1000000}`), nil); code != http.StatusUnauthorized {
		t.Fatalf("a job without the token: %d %s, want 401", code, msg)
	}
	jreq, _ := http.NewRequest(http.MethodPost, base+"/v2/jobs", strings.NewReader(`{"model":"resnet50-train","iterations":1000000}`))
	jreq.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(jreq)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %v %v", err, resp)
	}
	resp.Body.Close()
	var failed int
	for i := 0; ; i++ {
		if _, err := c.ModelInfer(context.Background(), req); err != nil {
			failed++
			t.Errorf("ModelInfer across the fault: %v", err)
		}
		if live, err := c.ServerLive(context.Background(), &pb.ServerLiveRequest{}); err != nil || !live.GetLive() {
			t.Errorf("ServerLive: %v %v", live, err)
		}
		_, m := call(t, http.MethodGet, base+"/metrics", nil, nil)
		if strings.Contains(m, "atoll_standby_failovers_total 1") {
			break
		}
		if i > 2000 {
			t.Fatal("no failover after 2,000 calls")
		}
	}
	for range 5 {
		if _, err := c.ModelInfer(context.Background(), req); err != nil {
			t.Errorf("ModelInfer after the failover: %v", err)
		}
	}
	if _, err := pb.NewGRPCInferenceServiceClient(conn).ModelInfer(context.Background(), &pb.ModelInferRequest{ModelName: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("an unknown model through the supervisor: %v, want NotFound", err)
	}
}

// TestDeadStandbyIsReplaced: a standby whose process exits while it waits
// is replaced by a new one, so that a failover finds a live worker.
func TestDeadStandbyIsReplaced(t *testing.T) {
	url, fakes := fakeSupervisor(t, 0, nil)
	<-fakes
	second := <-fakes
	waitStandby(t, url)
	second.kill()
	third := <-fakes
	if third.gen != 3 {
		t.Fatalf("the replacement is worker %d, want 3", third.gen)
	}
	waitStandby(t, url)
	if code, msg := call(t, http.MethodPost, url+"/v2/models/m/infer", []byte("x"), nil); code != http.StatusOK || msg != "worker 1: x" {
		t.Errorf("serving after the standby was replaced: %d %q", code, msg)
	}
}
