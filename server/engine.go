package server

import (
	"context"
	"errors"
	"time"

	"atoll/sched"
)

// Engine is what the HTTP layer needs from the scheduling side: the models
// it serves, inference requests, best-effort jobs and counters for metrics.
// The daemon's engine (NewEngine) owns the device and the scheduler core in
// one goroutine; tests use fakes. Every method is safe for concurrent use.
type Engine interface {
	// Models lists the served models, in a stable order.
	Models() []ModelInfo
	// Ready reports whether the engine accepts requests (false while
	// starting or draining).
	Ready() bool
	// Infer runs one request and blocks until its outputs are back, the
	// request fails, or ctx ends. Errors wrap the sentinels below.
	Infer(ctx context.Context, req *InferRequest) (*InferResult, error)

	// SubmitJob starts a best-effort job; Jobs, Job and CancelJob inspect
	// and stop them.
	SubmitJob(spec JobSpec) (JobStatus, error)
	Jobs() []JobStatus
	Job(id string) (JobStatus, bool)
	CancelJob(id string) (JobStatus, error)

	// Stats are cumulative counters and gauges for /metrics.
	Stats() Stats
	// Close stops accepting work, finishes or explicitly fails everything
	// in flight (requests get ErrShuttingDown, jobs end as cancelled), and
	// releases the device. It returns when all of that is done or ctx ends.
	Close(ctx context.Context) error
}

// Sentinel errors the HTTP layer maps to status codes.
var (
	ErrUnknownModel = errors.New("server: unknown model")        // 404
	ErrBadInput     = errors.New("server: bad input")            // 400 (shape, datatype, data)
	ErrQueueFull    = errors.New("server: queue full")           // 503, retry later
	ErrShuttingDown = errors.New("server: shutting down")        // 503
	ErrUnavailable  = errors.New("server: device reopening")     // 503, retry shortly (after a device failure)
	ErrUnknownJob   = errors.New("server: unknown job")          // 404
	ErrJobConflict  = errors.New("server: job not cancellable")  // 409
	ErrTooManyJobs  = errors.New("server: too many active jobs") // 429, retry later
	ErrInternal     = errors.New("server: internal error")       // 500 (device failure)
)

// Class is a request's scheduling class.
type Class string

const (
	HP Class = "HP" // latency-critical
	BE Class = "BE" // best effort
)

// TensorInfo describes one input or output of a model.
type TensorInfo struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"` // Open Inference Protocol names: FP32, FP16, BF16, INT32, INT64 ...
	Shape    []int64 `json:"shape"`    // -1 for the batch dimension where variable
}

// ModelInfo is one served model.
type ModelInfo struct {
	Name         string       `json:"name"`
	Versions     []string     `json:"versions,omitempty"`
	Platform     string       `json:"platform"` // "atoll"
	Inputs       []TensorInfo `json:"inputs"`
	Outputs      []TensorInfo `json:"outputs"`
	DefaultClass Class        `json:"-"`
	Ready        bool         `json:"-"`
}

// Tensor is a request or response tensor. Data holds the values in row-major
// order as float64 (integers are exact up to 2^53).
//
// A request input may instead carry Raw (Raw != nil, Data nil): the values
// in Datatype's raw form (grpc_raw.go's layout: row-major, little-endian,
// fixed size), exactly the bytes a model whose storage type is Datatype
// uploads. The protocol layer sends Raw only to an engine that implements
// RawInputs, only for FP32, FP16, BF16 and INT32, and only where Datatype is
// the model input's datatype; Raw values are then not checked yet (the
// engine checks them: finite floats, integer ranges). Ownership: the Tensor
// owns Raw. The engine may keep it after Infer returns (a request that timed
// out can still be queued for the device), so Raw never aliases a buffer the
// caller reuses (the REST API's pooled bodies are copied out), and nobody
// writes to it once it is passed to Infer.
type Tensor struct {
	Name     string
	Datatype string
	Shape    []int64
	Data     []float64
	Raw      []byte
}

// RawInputs is an optional interface of an Engine: an engine that
// implements it with AcceptsRaw true takes request inputs as Tensor.Raw
// (binary tensor data and gRPC raw_input_contents whose datatype is the
// model input's), checks their values itself, and uploads the bytes without
// a float64 round trip. Other engines get Data, as before.
type RawInputs interface {
	AcceptsRaw() bool
}

// InferRequest is one inference request, already parsed and checked for
// well-formedness (the engine checks it against the model).
type InferRequest struct {
	ID      string
	Model   string
	Class   Class
	Inputs  []Tensor
	Outputs []string // requested output names; empty = all
	// Arrived is when the HTTP layer accepted the request (for queue time).
	Arrived time.Time
	// checked: a decoder has run checkAgainst on it with the model's
	// metadata, so the engine does not run it again.
	checked bool
}

// InferResult is a finished request.
type InferResult struct {
	Outputs []Tensor
	Queue   time.Duration // arrival to first kernel start (Decode and Input included)
	Service time.Duration // first kernel start to last kernel end (device clock)
	// Batch is the requests its pass served together (1: alone;
	// ModelConfig.MaxBatch); they share its Service.
	Batch int
	// The parts of a request's life, like Triton's per-request durations:
	Decode time.Duration // the protocol layer's arrival to submission (body read, parsed, checked)
	Input  time.Duration // inputs uploaded to the device (0 where outputs come from the CPU)
	Output time.Duration // outputs read back from the device
	// Delay is the scheduler's split of the request's time in the core
	// beyond its kernels' solo durations, by sched.Cause (zero where the
	// outputs come from elsewhere).
	Delay sched.Causes
}

// Breakable is an Engine that can stop for good (a device lost with no
// restart left): Broken returns why, and the daemon's liveness endpoints
// then answer "not live", so a supervisor (Kubernetes' liveness probe,
// systemd) restarts the process — on a GPU, a kernel fault's sticky error
// is cleared by nothing less than a new process.
type Breakable interface {
	Broken() error
}

// JobSpec describes a best-effort job: N iterations of a model's training
// step or of closed-loop batch inference.
type JobSpec struct {
	Model      string `json:"model"`           // a zoo name, e.g. "resnet50-train" or "resnet50"
	Batch      int    `json:"batch,omitempty"` // batch size; 0 or absent: the one configured for the model
	Iterations int    `json:"iterations"`      // > 0
	// Resume: when the device fails under the job (a kernel fault, the
	// driver), the job runs its remaining iterations once the engine has
	// reopened the device, up to MaxJobResumes times, instead of ending
	// failed. An iteration cut by the failure runs again from its start.
	Resume bool `json:"resume,omitempty"`
}

// MaxJobResumes is how many device failures a job with Resume outlives.
const MaxJobResumes = 3

// Job states.
const (
	JobQueued    = "queued"
	JobRunning   = "running"
	JobDone      = "done"
	JobCancelled = "cancelled"
	JobFailed    = "failed"
)

// JobStatus is a job's state and progress.
type JobStatus struct {
	ID         string    `json:"id"`
	Spec       JobSpec   `json:"spec"`
	State      string    `json:"state"`
	Done       int       `json:"iterationsDone"`
	Throughput float64   `json:"iterationsPerSec"`
	Resumed    int       `json:"resumed,omitempty"` // runs resumed after a device failure (JobSpec.Resume)
	Created    time.Time `json:"created"`
	Started    time.Time `json:"started,omitzero"`
	Ended      time.Time `json:"ended,omitzero"`
	Error      string    `json:"error,omitempty"`
}

// Stats are the engine's counters for /metrics.
type Stats struct {
	Backend        string // "sim" or "cuda"
	Device         string
	Preemptions    uint64
	PreemptLatency []time.Duration // since the last Stats call (the metrics layer observes them)
	PaddedLaunches uint64
	Launches       uint64
	BEIterations   uint64
	BEWorkSeconds  float64 // profiled solo seconds of BE kernels completed
	QueueDepth     int     // requests accepted and not yet finished
	Restarts       uint64  // device reopens after failures
	Retried        uint64  // HP requests run again after a device failure (inference is idempotent)
}
