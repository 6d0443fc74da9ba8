package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"atoll/models"
	"atoll/server"
)

// TestDaemonEndToEnd runs the daemon over the real engine (simulated GPU,
// virtual time, reduced models) on loopback: metadata, inference in both
// classes, a bad request beside good ones, a BE job, metrics, shutdown.
func TestDaemonEndToEnd(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })

	addr, stop := startE2E(t, []server.EngineJobModel{{Zoo: "resnet50-train"}})
	defer stop()
	u := "http://" + addr
	c := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	call := func(method, path string, body []byte) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, u+path, bytes.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	code, b := call("GET", "/v2/models/rn", nil)
	var meta server.ModelInfo
	if code != 200 || json.Unmarshal(b, &meta) != nil || len(meta.Inputs) != 1 || len(meta.Outputs) == 0 {
		t.Fatalf("metadata: %d %s", code, b)
	}
	in := meta.Inputs[0]
	n := int64(1)
	for _, d := range in.Shape {
		n *= d
	}
	data := make([]float64, n)
	for i := range data {
		data[i] = float64(i%7) / 8
	}
	body := func(prio int) []byte {
		req := map[string]any{"inputs": []map[string]any{{"name": in.Name, "shape": in.Shape, "datatype": in.Datatype, "data": data}}}
		if prio > 0 {
			req["parameters"] = map[string]any{"priority": prio}
		}
		b, _ := json.Marshal(req)
		return b
	}
	for prio, class := range map[int]string{0: "HP", 1: "HP", 2: "BE"} {
		code, b := call("POST", "/v2/models/rn/infer", body(prio))
		var resp struct {
			Parameters struct {
				Class   string `json:"class"`
				Service int64  `json:"service_time_ns"`
			} `json:"parameters"`
			Outputs []struct {
				Shape []int64     `json:"shape"`
				Data  []float64   `json:"data"`
				Name  interface{} `json:"name"`
			} `json:"outputs"`
		}
		if code != 200 || json.Unmarshal(b, &resp) != nil {
			t.Fatalf("infer priority %d: %d %.300s", prio, code, b)
		}
		if resp.Parameters.Class != class || resp.Parameters.Service <= 0 || len(resp.Outputs) != len(meta.Outputs) {
			t.Errorf("infer priority %d: class %s service %d outputs %d", prio, resp.Parameters.Class, resp.Parameters.Service, len(resp.Outputs))
		}
		for _, o := range resp.Outputs {
			want := int64(1)
			for _, d := range o.Shape {
				want *= d
			}
			if int64(len(o.Data)) != want {
				t.Errorf("output %v: shape %v, %d values", o.Name, o.Shape, len(o.Data))
			}
		}
	}
	// The engine checks what the HTTP layer cannot know: a wrong shape is 400.
	bad := strings.Replace(string(body(0)), fmt.Sprintf(`"shape":[%d`, in.Shape[0]), fmt.Sprintf(`"shape":[%d`, in.Shape[0]+1), 1)
	if code, b := call("POST", "/v2/models/rn/infer", []byte(bad)); code != 400 {
		t.Errorf("wrong shape: %d %s", code, b)
	}

	code, b = call("POST", "/v2/jobs", []byte(`{"model":"resnet50-train","batch":32,"iterations":2}`))
	var job server.JobStatus
	if code != 201 || json.Unmarshal(b, &job) != nil {
		t.Fatalf("submit job: %d %s", code, b)
	}
	deadline := time.Now().Add(20 * time.Second)
	for job.State != server.JobDone && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		_, b = call("GET", "/v2/jobs/"+job.ID, nil)
		json.Unmarshal(b, &job) //nolint:errcheck // checked through State
	}
	if job.State != server.JobDone || job.Done != 2 {
		t.Errorf("job: %+v", job)
	}

	_, b = call("GET", "/metrics", nil)
	for _, re := range []string{
		`atoll_requests_total\{class="HP",code="200",model="rn"\} 2`,
		`atoll_requests_total\{class="BE",code="200",model="rn"\} 1`,
		`atoll_request_failures_total\{class="HP",code="400",model="rn"\} 1`,
		`atoll_be_iterations_total ([2-9]|\d\d)`, // the job's 2, and BE requests count too
		`atoll_launches_total [1-9]`,
		`atoll_engine_info\{backend="sim",device="[^"]+"\} 1`,
	} {
		if !regexp.MustCompile(re).Match(b) {
			t.Errorf("/metrics lacks %s", re)
		}
	}
	if m := regexp.MustCompile(`(?m)^atoll_be_work_seconds_total (\S+)$`).FindSubmatch(b); m == nil {
		t.Error("/metrics lacks atoll_be_work_seconds_total")
	} else if v, _ := strconv.ParseFloat(string(m[1]), 64); v <= 0 {
		t.Errorf("BE work %v after a finished job", v)
	}
}

// startE2E runs the daemon over the real engine — simulated GPU, virtual
// time, a reduced ResNet served as "rn" — on a loopback listener, with the
// given job models and extra run options (a gRPC listener, say). It returns
// the HTTP address and a stop function that shuts the daemon down and
// checks that Run returned cleanly.
func startE2E(t *testing.T, jobs []server.EngineJobModel, opts ...server.RunOption) (addr string, stop func()) {
	t.Helper()
	return startDaemon(t, func(c *server.EngineConfig) { c.Virtual, c.Jobs = true, jobs }, opts...)
}

// startDaemon runs the daemon with default settings on loopback over an
// engine serving a reduced ResNet ("rn", timed as ResNet-50); mut adjusts
// the engine's configuration.
func startDaemon(t *testing.T, mut func(*server.EngineConfig), opts ...server.RunOption) (addr string, stop func()) {
	t.Helper()
	rn, err := models.NewResNet("e2e-resnet", models.ResNetConfig{Blocks: [4]int{1, 1, 1, 1}, Image: 32, Width: 8, Classes: 10})
	if err != nil {
		t.Fatal(err)
	}
	ec := server.EngineConfig{Seed: 3, Workers: 2, Models: []server.EngineModel{{Name: "rn", Zoo: "resnet50", Model: &rn}}}
	mut(&ec)
	eng, err := server.NewEngine(context.Background(), ec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.ShutdownTimeout = 5 * time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts = append([]server.RunOption{server.WithListener(ln), server.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	go func() { done <- server.Run(ctx, cfg, eng, opts...) }()
	return ln.Addr().String(), func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("Run did not return after shutdown")
		}
	}
}
