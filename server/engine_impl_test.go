package server_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"atoll/gpu"
	"atoll/gpu/faulty"
	"atoll/kernels"
	"atoll/models"
	"atoll/profiles"
	"atoll/server"
)

const engSeed = 7

// tinyResNet is a reduced ResNet whose CPU reference takes milliseconds.
func tinyResNet(t testing.TB) models.Model {
	t.Helper()
	m, err := models.NewResNet("tiny-resnet", models.ResNetConfig{Blocks: [4]int{1, 1, 1, 1}, Image: 32, Width: 8, Classes: 10})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func tinyBERT(t testing.TB) models.Model {
	t.Helper()
	m, err := models.NewBERT("tiny-bert", models.BERTConfig{Layers: 1, Hidden: 32, Heads: 2, FFN: 64, Vocab: 50, Positions: 16, Types: 0, Seq: 8})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newTestEngine(t testing.TB, mut func(*server.EngineConfig)) server.Engine {
	t.Helper()
	r := tinyResNet(t)
	b := tinyBERT(t)
	cfg := server.EngineConfig{Virtual: true, Seed: engSeed, Workers: 2,
		Models: []server.EngineModel{
			{Name: "tiny", Zoo: "resnet50", Model: &r, MaxQueue: 16},
			{Name: "tinybert", Zoo: "distilbert", Model: &b, DefaultClass: server.BE},
		},
		Jobs: []server.EngineJobModel{{Zoo: "resnet50-train"}},
	}
	if mut != nil {
		mut(&cfg)
	}
	e, err := server.NewEngine(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	return e
}

// openEngine starts an engine with cfg and closes it when the test ends,
// reporting a failed close.
func openEngine(t *testing.T, cfg server.EngineConfig) server.Engine {
	t.Helper()
	e, err := server.NewEngine(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return e
}

func leakCheck(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// request builds a valid request for a model from its ModelInfo and the
// graph's InitInputs (so the test can compute the expected output).
func request(t testing.TB, m models.Model, info server.ModelInfo, batch int) (*server.InferRequest, []float64) {
	t.Helper()
	g, err := m.Graph(batch)
	if err != nil {
		t.Fatal(err)
	}
	in := models.InitInputs(g, 3)
	req := &server.InferRequest{ID: "r", Model: info.Name, Arrived: time.Now()}
	for _, ti := range info.Inputs {
		d, ok := in.Get(ti.Name)
		if !ok {
			t.Fatalf("graph has no input %s", ti.Name)
		}
		req.Inputs = append(req.Inputs, server.Tensor{Name: ti.Name, Datatype: ti.Datatype, Shape: slices.Clone(ti.Shape), Data: d.Values()})
	}
	acts, err := models.Reference(g, models.InitWeights(g, engSeed), in)
	if err != nil {
		t.Fatal(err)
	}
	return req, acts[g.Output]
}

func modelInfo(t testing.TB, e server.Engine, name string) server.ModelInfo {
	t.Helper()
	for _, m := range e.Models() {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("model %s not served", name)
	return server.ModelInfo{}
}

func TestEngineModelsDescribeGraphs(t *testing.T) {
	leakCheck(t)
	e := newTestEngine(t, nil)
	ms := e.Models()
	if len(ms) != 2 || ms[0].Name != "tiny" || ms[1].Name != "tinybert" {
		t.Fatalf("models: %+v", ms)
	}
	g, _ := tinyResNet(t).Graph(1)
	in, _ := g.Tensor(g.Inputs[0])
	out, _ := g.Tensor(g.Output)
	m := ms[0]
	if len(m.Inputs) != 1 || m.Inputs[0].Name != in.Name || m.Inputs[0].Datatype != "BF16" && m.Inputs[0].Datatype != "FP32" {
		t.Errorf("inputs: %+v (graph: %v)", m.Inputs, in)
	}
	if !slices.Equal(m.Inputs[0].Shape, []int64{int64(in.Shape[0]), int64(in.Shape[1]), int64(in.Shape[2]), int64(in.Shape[3])}) {
		t.Errorf("input shape %v, graph %v", m.Inputs[0].Shape, in.Shape)
	}
	if len(m.Outputs) != 1 || m.Outputs[0].Name != out.Name || m.Outputs[0].Shape[len(out.Shape)-1] != int64(out.Shape[len(out.Shape)-1]) {
		t.Errorf("outputs: %+v (graph: %v)", m.Outputs, out)
	}
	if m.Platform != "atoll" || !m.Ready || m.DefaultClass != server.HP || ms[1].DefaultClass != server.BE {
		t.Errorf("model info: %+v", m)
	}
	if ms[1].Inputs[0].Datatype != "INT32" {
		t.Errorf("BERT token ids: %+v", ms[1].Inputs)
	}
	if !e.Ready() {
		t.Error("not ready after NewEngine")
	}
}

func TestEngineInferComputesReferenceOutputs(t *testing.T) {
	leakCheck(t)
	e := newTestEngine(t, nil)
	for _, tc := range []struct {
		name  string
		model models.Model
		class server.Class
	}{
		{"tiny", tinyResNet(t), server.HP},
		{"tiny", tinyResNet(t), server.BE},
		{"tinybert", tinyBERT(t), ""}, // default class BE
		{"tinybert", tinyBERT(t), server.HP},
	} {
		req, want := request(t, tc.model, modelInfo(t, e, tc.name), 1)
		req.Class = tc.class
		res, err := e.Infer(context.Background(), req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.name, tc.class, err)
		}
		if len(res.Outputs) != 1 || !slices.Equal(res.Outputs[0].Data, want) {
			t.Fatalf("%s %s: outputs differ from the CPU reference", tc.name, tc.class)
		}
		if res.Service <= 0 || res.Queue < 0 {
			t.Errorf("%s %s: service %v queue %v", tc.name, tc.class, res.Service, res.Queue)
		}
	}
	// Asking for the output by name works; the stats saw the requests.
	req, _ := request(t, tinyResNet(t), modelInfo(t, e, "tiny"), 1)
	req.Outputs = []string{modelInfo(t, e, "tiny").Outputs[0].Name}
	if res, err := e.Infer(context.Background(), req); err != nil || len(res.Outputs) != 1 {
		t.Fatalf("named output: %v %+v", err, res)
	}
	st := e.Stats()
	if st.Backend != "sim" || st.Launches == 0 || st.BEIterations < 2 || st.QueueDepth != 0 || st.Device == "" {
		t.Errorf("stats: %+v", st)
	}
}

func TestEngineConcurrentInfer(t *testing.T) {
	leakCheck(t)
	e := newTestEngine(t, nil)
	req, want := request(t, tinyResNet(t), modelInfo(t, e, "tiny"), 1)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3 {
				r := *req
				if (g+i)%3 == 0 {
					r.Class = server.BE
				}
				res, err := e.Infer(context.Background(), &r)
				if err != nil {
					errs <- err
					return
				}
				if !slices.Equal(res.Outputs[0].Data, want) {
					errs <- errors.New("wrong output")
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if d := e.Stats().QueueDepth; d != 0 {
		t.Errorf("queue depth %d after all requests returned", d)
	}
}

func TestEngineBadInput(t *testing.T) {
	leakCheck(t)
	e := newTestEngine(t, nil)
	info := modelInfo(t, e, "tiny")
	good, _ := request(t, tinyResNet(t), info, 1)
	binfo := modelInfo(t, e, "tinybert")
	bgood, _ := request(t, tinyBERT(t), binfo, 1)
	clone := func(r *server.InferRequest) *server.InferRequest {
		c := *r
		c.Inputs = slices.Clone(r.Inputs)
		for i := range c.Inputs {
			c.Inputs[i].Data = slices.Clone(c.Inputs[i].Data)
			c.Inputs[i].Shape = slices.Clone(c.Inputs[i].Shape)
		}
		return &c
	}
	cases := map[string]func() *server.InferRequest{
		"unknown input": func() *server.InferRequest { r := clone(good); r.Inputs[0].Name = "nope"; return r },
		"datatype":      func() *server.InferRequest { r := clone(good); r.Inputs[0].Datatype = "INT64"; return r },
		"shape":         func() *server.InferRequest { r := clone(good); r.Inputs[0].Shape[0] = 2; return r },
		"data length":   func() *server.InferRequest { r := clone(good); r.Inputs[0].Data = r.Inputs[0].Data[1:]; return r },
		"missing input": func() *server.InferRequest { r := clone(good); r.Inputs = nil; return r },
		"twice":         func() *server.InferRequest { r := clone(good); r.Inputs = append(r.Inputs, r.Inputs[0]); return r },
		"NaN":           func() *server.InferRequest { r := clone(good); r.Inputs[0].Data[5] = math.NaN(); return r },
		"output":        func() *server.InferRequest { r := clone(good); r.Outputs = []string{"logits2"}; return r },
		"class":         func() *server.InferRequest { r := clone(good); r.Class = "RT"; return r },
		"token range":   func() *server.InferRequest { r := clone(bgood); r.Inputs[0].Data[0] = 50; return r },
		"token int":     func() *server.InferRequest { r := clone(bgood); r.Inputs[0].Data[0] = 1.5; return r },
		"token sign":    func() *server.InferRequest { r := clone(bgood); r.Inputs[0].Data[0] = -1; return r },
	}
	for name, mk := range cases {
		if _, err := e.Infer(context.Background(), mk()); !errors.Is(err, server.ErrBadInput) {
			t.Errorf("%s: %v, want ErrBadInput", name, err)
		}
	}
	r := clone(good)
	r.Model = "resnet9000"
	if _, err := e.Infer(context.Background(), r); !errors.Is(err, server.ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
	// The engine still serves after all that.
	if _, err := e.Infer(context.Background(), clone(good)); err != nil {
		t.Fatal(err)
	}
}

func waitJob(t *testing.T, e server.Engine, id string, ok func(server.JobStatus) bool) server.JobStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, found := e.Job(id)
		if !found {
			t.Fatalf("job %s vanished", id)
		}
		if ok(st) {
			return st
		}
		time.Sleep(2 * time.Millisecond)
	}
	st, _ := e.Job(id)
	t.Fatalf("job %s: condition not met; last status %+v", id, st)
	return st
}

func TestEngineJobsLifecycle(t *testing.T) {
	leakCheck(t)
	e := newTestEngine(t, func(c *server.EngineConfig) { c.Virtual = false })
	st, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 2})
	if err != nil {
		t.Fatal(err)
	}
	if st.State != server.JobQueued || st.ID == "" || st.Spec.Batch != 32 {
		t.Errorf("submitted: %+v", st)
	}
	st = waitJob(t, e, st.ID, func(s server.JobStatus) bool { return s.State == server.JobDone })
	if st.Done != 2 || st.Throughput <= 0 || st.Started.IsZero() || st.Ended.Before(st.Started) {
		t.Errorf("done job: %+v", st)
	}
	if _, err := e.CancelJob(st.ID); !errors.Is(err, server.ErrJobConflict) {
		t.Errorf("cancel a done job: %v, want ErrJobConflict", err)
	}
	// A long job, cancelled while running.
	long, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Batch: 32, Iterations: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, e, long.ID, func(s server.JobStatus) bool { return s.State == server.JobRunning && s.Done >= 1 })
	// HP requests are still served while it runs.
	req, _ := request(t, tinyResNet(t), modelInfo(t, e, "tiny"), 1)
	if _, err := e.Infer(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	queued, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 5})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := e.Job(queued.ID); s.State != server.JobQueued {
		t.Errorf("second job while the first runs: %s, want queued", s.State)
	}
	c, err := e.CancelJob(long.ID)
	if err != nil || c.State != server.JobCancelled || c.Done < 1 || c.Done >= 1<<20 {
		t.Fatalf("cancel: %+v, %v", c, err)
	}
	// The queued job runs after the cancelled one.
	waitJob(t, e, queued.ID, func(s server.JobStatus) bool { return s.State == server.JobRunning || s.State == server.JobDone })
	if got := len(e.Jobs()); got != 3 {
		t.Errorf("%d jobs listed, want 3", got)
	}
	if _, err := e.CancelJob("job-404"); !errors.Is(err, server.ErrUnknownJob) {
		t.Errorf("unknown job: %v", err)
	}
	for name, spec := range map[string]server.JobSpec{
		"model":      {Model: "gpt-5", Iterations: 1},
		"batch":      {Model: "resnet50-train", Batch: 7, Iterations: 1},
		"iterations": {Model: "resnet50-train", Iterations: 0},
	} {
		if _, err := e.SubmitJob(spec); !errors.Is(err, server.ErrBadInput) {
			t.Errorf("%s: %v, want ErrBadInput", name, err)
		}
	}
	// A job running at Close ends cancelled.
	last, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _ := e.Job(last.ID); s.State != server.JobCancelled {
		t.Errorf("job at close: %+v, want cancelled", s)
	}
	if _, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 1}); !errors.Is(err, server.ErrShuttingDown) {
		t.Errorf("SubmitJob after Close: %v", err)
	}
}

func TestEngineCloseAnswersEverything(t *testing.T) {
	leakCheck(t)
	e := newTestEngine(t, func(c *server.EngineConfig) { c.Virtual = false })
	req, _ := request(t, tinyResNet(t), modelInfo(t, e, "tiny"), 1)
	var wg sync.WaitGroup
	results := make(chan error, 16)
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := *req
			_, err := e.Infer(context.Background(), &r)
			results <- err
		}()
	}
	time.Sleep(3 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	close(results)
	for err := range results {
		if err != nil && !errors.Is(err, server.ErrShuttingDown) {
			t.Errorf("request at close: %v, want success or ErrShuttingDown", err)
		}
	}
	if e.Ready() {
		t.Error("ready after Close")
	}
	if _, err := e.Infer(context.Background(), req); !errors.Is(err, server.ErrShuttingDown) {
		t.Errorf("Infer after Close: %v", err)
	}
	if err := e.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestNewEngineConfigErrors(t *testing.T) {
	leakCheck(t)
	// "override" must fail on its own ground, not for want of a GPU here.
	defer server.SetCUDAGPUName(func(int) (string, error) { return "NVIDIA H200", nil })()
	r := tinyResNet(t)
	for name, cfg := range map[string]server.EngineConfig{
		"backend":  {Backend: "tpu", Models: []server.EngineModel{{Zoo: "resnet50"}}},
		"no model": {},
		"zoo":      {Models: []server.EngineModel{{Zoo: "resnet9000"}}},
		"training": {Models: []server.EngineModel{{Zoo: "resnet50-train", Batch: 32}}},
		"policy":   {Policy: "fifo-ish", Models: []server.EngineModel{{Zoo: "resnet50"}}},
		"gpu":      {GPU: "Voodoo2", Models: []server.EngineModel{{Zoo: "resnet50"}}},
		"batch":    {Models: []server.EngineModel{{Zoo: "resnet50", Batch: 3}}},
		"class":    {Models: []server.EngineModel{{Zoo: "resnet50", DefaultClass: "RT"}}},
		"dup":      {Models: []server.EngineModel{{Zoo: "resnet50"}, {Zoo: "resnet50"}}},
		"job":      {Models: []server.EngineModel{{Zoo: "resnet50"}}, Jobs: []server.EngineJobModel{{Zoo: "resnet50-train", Batch: 5}}},
		"override": {Backend: "cuda", Models: []server.EngineModel{{Zoo: "resnet50", Model: &r}}},
	} {
		if _, err := server.NewEngine(context.Background(), cfg); !errors.Is(err, server.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// Instances mode runs the GPU path's wiring (model instances, exec.InstanceBinder,
// input upload and output read-back in the scheduler's hooks) on the
// simulator.
func TestEngineInstancesOnSim(t *testing.T) {
	leakCheck(t)
	r := tinyResNet(t)
	e := openEngine(t, server.EngineConfig{Virtual: true, Instances: true, Seed: engSeed,
		Models: []server.EngineModel{{Name: "tiny", Zoo: "resnet50", Model: &r}}})
	info := modelInfo(t, e, "tiny")
	n := 1
	for _, d := range info.Outputs[0].Shape {
		n *= int(d)
	}
	for _, class := range []server.Class{server.HP, server.BE} {
		req, _ := request(t, r, info, 1)
		req.Class = class
		res, err := e.Infer(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: %v", class, err)
		}
		if len(res.Outputs) != 1 || len(res.Outputs[0].Data) != n || res.Service <= 0 {
			t.Fatalf("%s: %d outputs, %d values (want %d), service %v", class, len(res.Outputs), len(res.Outputs[0].Data), n, res.Service)
		}
	}
	// A model whose kernels cannot be loaded on the device is refused at
	// start, with the driver's error, and nothing is left running. (Every
	// zoo inference model now has a kernel for each layer, so the device
	// is made to refuse instead.)
	b := tinyBERT(t)
	_, err := server.NewEngine(context.Background(), server.EngineConfig{Virtual: true, Instances: true,
		Models: []server.EngineModel{{Name: "tinybert", Zoo: "distilbert", Model: &b}},
		WrapDevice: func(d gpu.Device) gpu.Device {
			fd := faulty.New(d)
			_ = fd.FailMethod("LoadModule", 1)
			return fd
		}})
	if err == nil || !strings.Contains(err.Error(), "LoadModule") {
		t.Errorf("a model the device cannot load: %v, want the start to fail naming LoadModule", err)
	}
}

func TestEngineKeepsMaxJobs(t *testing.T) {
	leakCheck(t)
	e := newTestEngine(t, func(c *server.EngineConfig) { c.MaxJobs = 2 })
	var ids []string
	for range 5 {
		st, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, st.ID)
		waitJob(t, e, st.ID, func(s server.JobStatus) bool { return s.State == server.JobDone })
	}
	jobs := e.Jobs()
	if len(jobs) != 2 || jobs[0].ID != ids[3] || jobs[1].ID != ids[4] {
		t.Errorf("kept %+v, want the last two of %v", jobs, ids)
	}
	if _, ok := e.Job(ids[0]); ok {
		t.Error("the oldest ended job is still listed")
	}
}

// TestCUDAEngineUsesTheGPUsOwnProfiles: on cuda the engine takes the GPU
// kind from the device, not from the (simulator's) GPU setting, and refuses
// to serve a model whose only profile for that GPU is a roofline estimate.
func TestCUDAEngineUsesTheGPUsOwnProfiles(t *testing.T) {
	defer server.SetCUDAGPUName(func(int) (string, error) { return "", errors.New("cuda: no device") })()
	_, err := server.NewEngine(context.Background(), server.EngineConfig{Backend: "cuda", Models: []server.EngineModel{{Zoo: "resnet50"}}})
	if !errors.Is(err, server.ErrConfig) || !strings.Contains(err.Error(), "no device") || !strings.Contains(err.Error(), "backend sim") {
		t.Errorf("no GPU: %v", err)
	}
	// A job model whose only profile for the GPU found is a roofline
	// estimate (none is embedded today: the lookup is made to return one)
	// is refused, naming the command that makes a measured one. The GPU
	// setting H200 is ignored on cuda.
	server.SetCUDAGPUName(func(int) (string, error) { return "NVIDIA H100 80GB HBM3", nil })
	defer server.SetProfileLookup(func(g, m string, b int, ph string) (*profiles.Profile, error) {
		p, err := profiles.Lookup(g, m, b, ph)
		if err == nil && m == "bert-base-train" {
			q := *p
			q.Source = profiles.SourceEstimated
			return &q, nil
		}
		return p, err
	})()
	_, err = server.NewEngine(context.Background(), server.EngineConfig{Backend: "cuda", GPU: "H200",
		Models: []server.EngineModel{{Zoo: "resnet50"}}, Jobs: []server.EngineJobModel{{Zoo: "bert-base-train", Batch: 8}}})
	if !errors.Is(err, server.ErrConfig) || !strings.Contains(err.Error(), "H100-SXM") || !strings.Contains(err.Error(), "atoll profile --model bert-base-train --batch 8") {
		t.Errorf("H100, a job whose only profile is estimated (GPU setting H200 ignored): %v", err)
	}
	server.SetCUDAGPUName(func(int) (string, error) { return "NVIDIA A100-SXM4-80GB", nil })
	_, err = server.NewEngine(context.Background(), server.EngineConfig{Backend: "cuda", Models: []server.EngineModel{{Zoo: "resnet50"}}})
	if !errors.Is(err, server.ErrConfig) || !strings.Contains(err.Error(), "atoll profile") {
		t.Errorf("A100 without profiles: %v", err)
	}
}

// TestEngineServesAnONNXFile: a .onnx path as the served model speaks the
// file's input and output (float32 NCHW in, float32 out) and runs the
// file's graph with the file's weights (not the zoo's random ones) on the
// simulator, timed by its roofline estimate until someone profiles it.
func TestEngineServesAnONNXFile(t *testing.T) {
	leakCheck(t)
	const path = "../cmd/atoll/testdata/onnx/tiny-cnn.onnx"
	e := openEngine(t, server.EngineConfig{Virtual: true, Seed: engSeed, Workers: 2,
		Models: []server.EngineModel{{Zoo: path}}})
	m, err := models.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	info := modelInfo(t, e, "tiny-cnn")
	if in, out := info.Inputs[0], info.Outputs[0]; in.Name != "x" || in.Datatype != "FP32" || !slices.Equal(in.Shape, []int64{1, 3, 8, 8}) || out.Name != "logits" {
		t.Fatalf("served as %+v -> %+v; want the file's x FP32 [1 3 8 8] -> logits", in, out)
	}
	nchw := make([]float64, 3*8*8)
	for i := range nchw {
		nchw[i] = float64(i%17)/8 - 1
	}
	req := &server.InferRequest{ID: "r", Model: "tiny-cnn", Arrived: time.Now(),
		Inputs: []server.Tensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 3, 8, 8}, Data: nchw}}}
	res, err := e.Infer(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outputs[0].Name != "logits" {
		t.Errorf("output named %q, want logits", res.Outputs[0].Name)
	}
	g, _ := m.Graph(1)
	nhwc := make([]float64, len(nchw))
	for c := range 3 {
		for y := range 8 {
			for x := range 8 {
				nhwc[(y*8+x)*3+c] = nchw[(c*8+y)*8+x]
			}
		}
	}
	in := &models.Bundle{}
	in.Add(models.NewData("input", kernels.BF16, []int{1, 8, 8, 3}, nhwc))
	own, err := models.Reference(g, m.Weights(), in)
	if err != nil {
		t.Fatal(err)
	}
	random, _ := models.Reference(g, models.InitWeights(g, engSeed), in)
	got := res.Outputs[0].Data
	// The daemon computes with the prepared fast executor (float32 fused
	// products): the reference's output within bf16 rounding.
	if e := models.RelErr(got, own[g.Output]); e > 1e-2 {
		t.Errorf("served output differs from the file's weights' reference by %.4g", e)
	}
	if e := models.RelErr(got, random[g.Output]); e < 1e-3 {
		t.Errorf("served output matches random weights (%.4g): the file's weights were not used", e)
	}
	// The zoo's NHWC input is not what this model takes.
	bad := *req
	bad.Inputs = []server.Tensor{{Name: "input", Datatype: "BF16", Shape: []int64{1, 8, 8, 3}, Data: nhwc}}
	if _, err := e.Infer(context.Background(), &bad); !errors.Is(err, server.ErrBadInput) || !strings.Contains(err.Error(), `inputs are "x"`) {
		t.Errorf("an NHWC request: %v, want ErrBadInput naming x", err)
	}
}

// TestEngineServesAnONNXEncoder: an exported DistilBERT (PyTorch's
// TorchScript exporter, tools/onnx/export.py) is served under its file's
// names — INT64 token ids in, its float32 last hidden states out in the
// file's [N, S, H] shape — and answers what onnxruntime computed for the
// same ids, by JSON and by raw little-endian bytes; an id outside the
// vocabulary is refused naming the range.
func TestEngineServesAnONNXEncoder(t *testing.T) {
	leakCheck(t)
	const path = "../models/testdata/onnx/legacy/tiny-distilbert"
	e := openEngine(t, server.EngineConfig{Virtual: true, Seed: engSeed, Workers: 2,
		Models: []server.EngineModel{{Zoo: path + ".onnx"}}})
	info := modelInfo(t, e, "tiny-distilbert")
	if in, out := info.Inputs[0], info.Outputs[0]; in.Name != "input_ids" || in.Datatype != "INT64" || !slices.Equal(in.Shape, []int64{1, 16}) ||
		out.Name != "last_hidden_state" || !slices.Equal(out.Shape, []int64{1, 16, 32}) {
		t.Fatalf("served as %+v -> %+v; want the file's input_ids INT64 [1 16] -> last_hidden_state [1 16 32]", in, out)
	}
	f, err := os.Open(path + ".ref.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := models.ReadSafetensors(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := ref.Get("input.input_ids")
	want, _ := ref.Get("output.last_hidden_state")
	raw := make([]byte, 8*len(ids.Values()))
	for i, v := range ids.Values() {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(int64(v)))
	}
	for _, in := range []server.Tensor{
		{Name: "input_ids", Datatype: "INT64", Shape: []int64{1, 16}, Data: ids.Values()},
		{Name: "input_ids", Datatype: "INT64", Shape: []int64{1, 16}, Raw: raw},
	} {
		req := &server.InferRequest{ID: "r", Model: "tiny-distilbert", Arrived: time.Now(), Inputs: []server.Tensor{in}}
		res, err := e.Infer(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if e := models.RelErr(res.Outputs[0].Data, want.Values()); e > 2e-2 {
			t.Errorf("served output differs from onnxruntime's by %.3g (raw %v)", e, in.Raw != nil)
		}
	}
	bad := slices.Clone(ids.Values())
	bad[3] = 100 // the vocabulary is 100 ids
	req := &server.InferRequest{ID: "r", Model: "tiny-distilbert", Arrived: time.Now(),
		Inputs: []server.Tensor{{Name: "input_ids", Datatype: "INT64", Shape: []int64{1, 16}, Data: bad}}}
	if _, err := e.Infer(context.Background(), req); !errors.Is(err, server.ErrBadInput) || !strings.Contains(err.Error(), "[0, 100)") {
		t.Errorf("token id 100: %v, want ErrBadInput naming [0, 100)", err)
	}
}

// A model served by several streams (EngineModel.Streams) answers
// concurrent requests on each: with the CPU computing outputs, every output
// is the reference's; with instances on the simulated device (one per
// stream, the hooks reading and writing the routed stream's), every request
// is served. More than MaxStreams is refused.
func TestEngineStreams(t *testing.T) {
	leakCheck(t)
	r := tinyResNet(t)
	for _, instances := range []bool{false, true} {
		e := openEngine(t, server.EngineConfig{Virtual: true, Instances: instances, Seed: engSeed, Workers: 2,
			Models: []server.EngineModel{{Name: "tiny", Zoo: "resnet50", Model: &r, Streams: 3}}})
		req, want := request(t, r, modelInfo(t, e, "tiny"), 1)
		for _, err := range inferConcurrently(e, req, 6, 4, func(res *server.InferResult) error {
			switch {
			case !instances && !slices.Equal(res.Outputs[0].Data, want):
				return errors.New("wrong output")
			case res.Service <= 0:
				return fmt.Errorf("service %v", res.Service)
			}
			return nil
		}) {
			t.Errorf("instances %v: %v", instances, err)
		}
		if s := e.Stats(); s.QueueDepth != 0 {
			t.Errorf("instances %v: queue depth %d after every request returned", instances, s.QueueDepth)
		}
	}
	_, err := server.NewEngine(context.Background(), server.EngineConfig{Virtual: true,
		Models: []server.EngineModel{{Name: "tiny", Zoo: "resnet50", Model: &r, Streams: server.MaxStreams + 1}}})
	if !errors.Is(err, server.ErrConfig) || !strings.Contains(err.Error(), "streams") {
		t.Errorf("streams %d: %v, want ErrConfig naming streams", server.MaxStreams+1, err)
	}
}

// TestEngineMaxBatch: with max_batch, requests that wait behind a pass are
// served together, each still getting its own outputs (on the CPU path,
// the reference's; with device instances, through the pass's slots); a
// max_batch whose profiles are missing, or out of range, is refused.
func TestEngineMaxBatch(t *testing.T) {
	leakCheck(t)
	r := tinyResNet(t)
	for _, instances := range []bool{false, true} {
		// Paced to the wall clock, so that eight clients' requests queue
		// behind each other's passes.
		e := openEngine(t, server.EngineConfig{Instances: instances, Seed: engSeed, Workers: 2,
			Models: []server.EngineModel{{Name: "tiny", Zoo: "resnet50", Model: &r, MaxBatch: 4}}})
		req, want := request(t, r, modelInfo(t, e, "tiny"), 1)
		var mu sync.Mutex
		batches := map[int]int{}
		for _, err := range inferConcurrently(e, req, 8, 4, func(res *server.InferResult) error {
			switch {
			case !instances && !slices.Equal(res.Outputs[0].Data, want):
				return errors.New("wrong output")
			case len(res.Outputs[0].Data) != len(want):
				return fmt.Errorf("%d output values, want %d", len(res.Outputs[0].Data), len(want))
			}
			mu.Lock()
			defer mu.Unlock()
			batches[res.Batch]++
			return nil
		}) {
			t.Errorf("instances %v: %v", instances, err)
		}
		if batches[2]+batches[4] == 0 || batches[0] != 0 {
			t.Errorf("instances %v: requests by the batch of their pass %v; want some served together", instances, batches)
		}
	}
	for _, c := range []struct {
		max  int
		want string
	}{{8, "batch 8"}, {-1, "max_batch"}} {
		_, err := server.NewEngine(context.Background(), server.EngineConfig{Virtual: true,
			Models: []server.EngineModel{{Name: "r", Zoo: "resnet50", MaxBatch: c.max}}})
		if !errors.Is(err, server.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("max_batch %d: %v, want ErrConfig naming %q", c.max, err, c.want)
		}
	}
}

// inferConcurrently sends req from clients goroutines, each times in a row,
// and returns the errors of the requests and of check on their results.
func inferConcurrently(e server.Engine, req *server.InferRequest, clients, each int, check func(*server.InferResult) error) []error {
	var wg sync.WaitGroup
	errs := make(chan error, clients*each)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				rq := *req
				res, err := e.Infer(context.Background(), &rq)
				if err == nil {
					err = check(res)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}
