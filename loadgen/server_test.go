package loadgen_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"atoll/loadgen"
	"atoll/server"
)

// engine is a stand-in for the daemon's scheduler behind the real HTTP
// layer (server.NewHandler): it answers after a delay, rejects every
// request whose id ends in 9 with queue full, and records each request's
// class. Methods the HTTP path does not use come from the nil embedded
// interface.
type engine struct {
	server.Engine
	delay time.Duration

	mu      sync.Mutex
	classes map[string]server.Class
	inputs  map[string][]float64 // request id -> its first input's values
}

func (e *engine) Models() []server.ModelInfo {
	return []server.ModelInfo{{
		Name: "resnet50", Platform: "atoll", Ready: true, DefaultClass: server.HP,
		Inputs:  []server.TensorInfo{{Name: "input", Datatype: "FP32", Shape: []int64{-1, 3, 8, 8}}},
		Outputs: []server.TensorInfo{{Name: "logits", Datatype: "FP32", Shape: []int64{-1, 10}}},
	}}
}

func (e *engine) Ready() bool { return true }

func (e *engine) Infer(ctx context.Context, req *server.InferRequest) (*server.InferResult, error) {
	e.mu.Lock()
	e.classes[req.ID] = req.Class
	if e.inputs != nil {
		e.inputs[req.ID] = req.Inputs[0].Data
	}
	e.mu.Unlock()
	if req.ID[len(req.ID)-1] == '9' {
		return nil, server.ErrQueueFull
	}
	select {
	case <-time.After(e.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	n := req.Inputs[0].Shape[0]
	return &server.InferResult{Outputs: []server.Tensor{{Name: "logits", Datatype: "FP32", Shape: []int64{n, 10}, Data: make([]float64, n*10)}}}, nil
}

// The generator's requests pass the daemon's real Open Inference Protocol
// parser (shape from metadata, datatype, id, priority), its priorities
// map to the daemon's classes, and the daemon's 503s are counted as such.
func TestAgainstDaemonHTTPLayer(t *testing.T) {
	eng := &engine{delay: 2 * time.Millisecond, classes: map[string]server.Class{}}
	srv := httptest.NewServer(server.NewHandler(eng, server.Options{}))
	defer srv.Close()
	c, err := loadgen.NewClient(srv.URL, loadgen.ClientOptions{MaxInFlight: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	classes, err := loadgen.ParseMix("hp=0.5,be=0.5", "")
	if err != nil {
		t.Fatal(err)
	}
	sched := make([]time.Duration, 40)
	for i := range sched {
		sched[i] = time.Duration(i) * 2 * time.Millisecond
	}
	res, err := loadgen.Run(context.Background(), c, loadgen.Config{
		Model: "resnet50", Schedule: sched, Span: 100 * time.Millisecond, Batch: 2,
		Classes: classes, MaxInFlight: 64, LateThreshold: time.Second, SLO: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]server.Class{"hp": server.HP, "be": server.BE}
	for i, r := range res.Records {
		id := strconv.Itoa(i)
		wantKind := loadgen.KindOK
		if id[len(id)-1] == '9' {
			wantKind = loadgen.KindHTTP(503)
		}
		if r.Kind != wantKind {
			t.Errorf("request %d: %s, want %s", i, r.Kind, wantKind)
		}
		eng.mu.Lock()
		got, ok := eng.classes[id]
		eng.mu.Unlock()
		if !ok || got != want[classes[r.Class].Name] {
			t.Errorf("request %d of class %s reached the engine as %q (seen %v)", i, classes[r.Class].Name, got, ok)
		}
	}
	rep := loadgen.Summarize(res)
	if rep.Total.Errors["http-503"] != 4 || rep.Total.OK != 36 {
		t.Errorf("totals %+v", rep.Total)
	}
	// The report carries the daemon's reason for each error kind.
	if msg := rep.ErrorMessages["http-503"]; msg == "" {
		t.Errorf("no message for http-503: %v", rep.ErrorMessages)
	} else {
		var b strings.Builder
		if err := loadgen.Table(&b, rep); err != nil || !strings.Contains(b.String(), "http-503: "+msg) {
			t.Errorf("the table does not show the daemon's message %q:\n%s", msg, b.String())
		}
	}

	// An unknown model is the daemon's 404 with its message.
	if _, err := c.Metadata(context.Background(), "bert"); !errors.Is(err, loadgen.ErrUnknownModel) || !strings.Contains(err.Error(), "served models") {
		t.Errorf("unknown model: %v", err)
	}
}

// Both tensor data formats pass the daemon's real parser over loopback,
// the engine gets the same input values from either, and the binary
// responses (binary outputs asked for) are taken as valid.
func TestDataFormatsAgainstDaemonHTTPLayer(t *testing.T) {
	got := map[loadgen.DataFormat]map[string][]float64{}
	for _, data := range []loadgen.DataFormat{loadgen.DataBinary, loadgen.DataJSON} {
		eng := &engine{classes: map[string]server.Class{}, inputs: map[string][]float64{}}
		srv := httptest.NewServer(server.NewHandler(eng, server.Options{}))
		c, err := loadgen.NewClient(srv.URL, loadgen.ClientOptions{MaxInFlight: 16})
		if err != nil {
			t.Fatal(err)
		}
		sched := make([]time.Duration, 9) // ids 0-8: none ends in 9
		for i := range sched {
			sched[i] = time.Duration(i) * 2 * time.Millisecond
		}
		res, err := loadgen.Run(context.Background(), c, loadgen.Config{
			Model: "resnet50", Schedule: sched, Span: 20 * time.Millisecond, Batch: 3, Seed: 5,
			MaxInFlight: 16, LateThreshold: time.Second, Data: data,
		})
		c.Close()
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res.Records {
			if r.Kind != loadgen.KindOK {
				t.Errorf("%s request %d: %s", data, i, r.Kind)
			}
		}
		if len(eng.inputs) != 9 || len(eng.inputs["0"]) != 3*3*8*8 {
			t.Fatalf("%s: engine saw %d requests, %d values in the first", data, len(eng.inputs), len(eng.inputs["0"]))
		}
		got[data] = eng.inputs
	}
	// FP32 input: JSON carries each float32's shortest decimal form, which
	// the daemon keeps as float64; equal once rounded to float32.
	f32 := func(vs []float64) []float32 {
		out := make([]float32, len(vs))
		for i, v := range vs {
			out[i] = float32(v)
		}
		return out
	}
	for id, vals := range got[loadgen.DataJSON] {
		if !slices.Equal(f32(vals), f32(got[loadgen.DataBinary][id])) {
			t.Errorf("request %s: the engine got different values from binary and JSON bodies", id)
		}
	}
}
