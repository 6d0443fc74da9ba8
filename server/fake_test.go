package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"atoll/sched"
)

// fakeEngine is an Engine for the HTTP layer's tests. Infer doubles its
// first input into "output0" (and returns the input's sum as "sum"); it can
// block until released, refuse work past a queue bound, fail, or panic.
type fakeEngine struct {
	models []ModelInfo

	ready    atomic.Bool
	broken   atomic.Pointer[error] // Broken's answer (nil: serving)
	queueMax int64                 // > 0: Infer beyond this many concurrent is ErrQueueFull
	inflight atomic.Int64
	calls    atomic.Int64

	// block, when set, makes Infer wait for it to close (or ctx, or Close).
	block   chan struct{}
	entered chan string // when set, receives each blocking request's ID

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error

	mu struct {
		sync.Mutex
		jobs  map[string]*JobStatus
		order []string
		stats Stats
	}
}

func newFakeEngine() *fakeEngine {
	f := &fakeEngine{
		models: []ModelInfo{
			{
				Name: "echo", Platform: "atoll", DefaultClass: HP, Ready: true,
				Inputs:  []TensorInfo{{Name: "input0", Datatype: "FP32", Shape: []int64{-1, 4}}},
				Outputs: []TensorInfo{{Name: "output0", Datatype: "FP32", Shape: []int64{-1, 4}}, {Name: "sum", Datatype: "FP64", Shape: []int64{1}}},
			},
			{ // echo with a fixed shape, as the engine serves its models
				Name: "fixed", Platform: "atoll", DefaultClass: HP, Ready: true,
				Inputs:  []TensorInfo{{Name: "input0", Datatype: "FP32", Shape: []int64{2, 4}}},
				Outputs: []TensorInfo{{Name: "output0", Datatype: "FP32", Shape: []int64{2, 4}}, {Name: "sum", Datatype: "FP64", Shape: []int64{1}}},
			},
			{Name: "be-model", Platform: "atoll", DefaultClass: BE, Ready: true, Versions: []string{"1"}},
			{Name: "loading", Platform: "atoll", DefaultClass: HP, Ready: false},
			{Name: "panics", Platform: "atoll", DefaultClass: HP, Ready: true},
			{Name: "broken", Platform: "atoll", DefaultClass: HP, Ready: true},
			{Name: "nilresult", Platform: "atoll", DefaultClass: HP, Ready: true},
			{Name: "nan", Platform: "atoll", DefaultClass: HP, Ready: true},
			{Name: "bools", Platform: "atoll", DefaultClass: HP, Ready: true},
			{
				Name: "resnet50", Platform: "atoll", DefaultClass: HP, Ready: true,
				Inputs:  []TensorInfo{{Name: "input", Datatype: "FP32", Shape: []int64{-1, 3, 224, 224}}},
				Outputs: []TensorInfo{{Name: "logits", Datatype: "FP32", Shape: []int64{-1, 1000}}},
			},
		},
		closed: make(chan struct{}),
	}
	f.ready.Store(true)
	f.mu.jobs = map[string]*JobStatus{}
	f.mu.stats = Stats{Backend: "sim", Device: "fake H100", Preemptions: 7, PreemptLatency: []time.Duration{20 * time.Microsecond, 3 * time.Millisecond}, PaddedLaunches: 3, Launches: 100, BEIterations: 12, BEWorkSeconds: 1.5, QueueDepth: 2}
	return f
}

func (f *fakeEngine) Models() []ModelInfo { return f.models }
func (f *fakeEngine) Ready() bool         { return f.ready.Load() }

// Broken implements Breakable: what a test stored in broken.
func (f *fakeEngine) Broken() error {
	if p := f.broken.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *fakeEngine) Infer(ctx context.Context, req *InferRequest) (*InferResult, error) {
	f.calls.Add(1)
	select {
	case <-f.closed:
		return nil, fmt.Errorf("%w: the engine is closed", ErrShuttingDown)
	default:
	}
	n := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	if f.queueMax > 0 && n > f.queueMax {
		return nil, fmt.Errorf("%w: model %q has %d requests queued; retry later", ErrQueueFull, req.Model, f.queueMax)
	}
	switch req.Model {
	case "panics":
		panic("fake engine panic")
	case "broken":
		return nil, fmt.Errorf("%w: fake device fault", ErrInternal)
	case "nilresult":
		return nil, nil
	case "nan":
		return &InferResult{Outputs: []Tensor{{Name: "x", Datatype: "FP32", Shape: []int64{1}, Data: []float64{nanValue()}}}}, nil
	case "bools":
		return &InferResult{Outputs: []Tensor{{Name: "b", Datatype: "BOOL", Shape: []int64{2}, Data: []float64{1, 0}}}}, nil
	case "resnet50": // ResNet-50's shapes: 1000 logits per image, the first few inputs echoed
		n := req.Inputs[0].Shape[0]
		logits := make([]float64, n*1000)
		copy(logits, req.Inputs[0].Data)
		return &InferResult{Outputs: []Tensor{{Name: "logits", Datatype: "FP32", Shape: []int64{n, 1000}, Data: logits}}}, nil
	}
	if f.block != nil {
		if f.entered != nil {
			f.entered <- req.ID
		}
		select {
		case <-f.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-f.closed:
			return nil, fmt.Errorf("%w: request %s failed by Close", ErrShuttingDown, req.ID)
		}
	}
	in := req.Inputs[0]
	out := make([]float64, len(in.Data))
	sum := 0.0
	for i, v := range in.Data {
		out[i] = 2 * v
		sum += v
	}
	all := []Tensor{
		{Name: "output0", Datatype: in.Datatype, Shape: in.Shape, Data: out},
		{Name: "sum", Datatype: "FP64", Shape: []int64{1}, Data: []float64{sum}},
	}
	res := &InferResult{Queue: 150 * time.Microsecond, Service: time.Millisecond}
	res.Delay[sched.CauseCoRun] = 40 * time.Microsecond
	res.Delay[sched.CauseVariance] = -5 * time.Microsecond
	for _, t := range all {
		if len(req.Outputs) == 0 || contains(req.Outputs, t.Name) {
			res.Outputs = append(res.Outputs, t)
		}
	}
	return res, nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func (f *fakeEngine) SubmitJob(spec JobSpec) (JobStatus, error) {
	if spec.Model != "echo" && spec.Model != "resnet50-train" {
		return JobStatus{}, fmt.Errorf("%w %q for a job", ErrUnknownModel, spec.Model)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id := fmt.Sprintf("job-%d", len(f.mu.order)+1)
	st := &JobStatus{ID: id, Spec: spec, State: JobRunning, Created: time.Unix(1, 0).UTC(), Started: time.Unix(2, 0).UTC()}
	f.mu.jobs[id] = st
	f.mu.order = append(f.mu.order, id)
	return *st, nil
}

func (f *fakeEngine) Jobs() []JobStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []JobStatus
	for _, id := range f.mu.order {
		out = append(out, *f.mu.jobs[id])
	}
	return out
}

func (f *fakeEngine) Job(id string) (JobStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.mu.jobs[id]
	if !ok {
		return JobStatus{}, false
	}
	return *st, true
}

func (f *fakeEngine) CancelJob(id string) (JobStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.mu.jobs[id]
	if !ok {
		return JobStatus{}, fmt.Errorf("%w %q", ErrUnknownJob, id)
	}
	if st.State != JobRunning && st.State != JobQueued {
		return *st, fmt.Errorf("%w: job %s is already %s", ErrJobConflict, id, st.State)
	}
	st.State = JobCancelled
	st.Ended = time.Unix(3, 0).UTC()
	return *st, nil
}

func (f *fakeEngine) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.mu.stats
	f.mu.stats.PreemptLatency = nil // "since the last Stats call"
	return s
}

func (f *fakeEngine) Close(ctx context.Context) error {
	f.closeOnce.Do(func() {
		f.ready.Store(false)
		close(f.closed)
	})
	return f.closeErr
}
