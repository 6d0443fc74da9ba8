package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"atoll/gpu"
	"atoll/policies"
	"atoll/sched"
)

// ErrConfig is wrapped by every configuration error: a YAML syntax error,
// an unknown key (with its line), or a field that fails validation (named
// by its YAML path).
var ErrConfig = errors.New("server: bad config")

// Config is the daemon's configuration: a YAML file (ParseConfig) whose
// fields the command line may override. The YAML keys are the snake_case
// names in the struct tags; docs/api.md is the reference.
type Config struct {
	// Listen is the HTTP address, host:port (":8000"), or unix:PATH for a
	// Unix socket (what a standby supervisor gives its workers).
	Listen string `yaml:"listen"`
	// GRPCListen is the gRPC address (inference.GRPCInferenceService),
	// host:port; empty serves no gRPC.
	GRPCListen string `yaml:"grpc_listen,omitempty"`
	// Backend is "sim" (the simulated GPU, paced to the wall clock) or
	// "cuda" (the real GPU 0).
	Backend string `yaml:"backend"`
	// GPU is the simulated GPU's spec name (gpu.Specs); ignored for cuda,
	// which serves with the profiles of the GPU it finds.
	GPU string `yaml:"gpu"`
	// Policy is the scheduling policy's name (atoll policies).
	Policy string `yaml:"policy"`
	// Models are the models to serve (at least one, for the engine).
	Models []ModelConfig `yaml:"models"`
	// Jobs are the models and batch sizes best-effort jobs may run.
	Jobs []JobModelConfig `yaml:"jobs"`
	// Priority maps the request's "priority" parameter to a class.
	Priority PriorityConfig `yaml:"priority"`
	// BodyLimit is the largest request body accepted, in bytes (413 above).
	BodyLimit int64 `yaml:"body_limit"`
	// RequestTimeout bounds one inference request, queueing included (504
	// after it).
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// ShutdownTimeout bounds each of the two drain phases: in-flight HTTP
	// requests, then the engine's in-flight work.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// Restarts is how many times the daemon reopens the device after the
	// scheduler stopped on a device error, waiting RestartBackoff (doubled
	// each time, at most 30 s) first; 0 never reopens it (the daemon then
	// answers 500 until restarted). Requests in flight at the failure get
	// errors; jobs running then fail.
	Restarts int `yaml:"restarts"`
	// RestartBackoff is the wait before the first reopen.
	RestartBackoff time.Duration `yaml:"restart_backoff"`
	// Log configures log/slog.
	Log LogConfig `yaml:"log"`
	// Restricted guards API groups (jobs, inference, metadata, metrics)
	// with bearer tokens read from a file or an environment variable;
	// health endpoints are never restricted.
	Restricted []RestrictedConfig `yaml:"restricted,omitempty"`
	// TLSCert and TLSKey, both or neither, are PEM files: HTTP and gRPC
	// then serve TLS.
	TLSCert string `yaml:"tls_cert,omitempty"`
	TLSKey  string `yaml:"tls_key,omitempty"`
	// Devices are the GPUs the daemon serves on: "0" (the default), a
	// list "0,1,3", or "all" (every GPU the driver sees; on the simulator,
	// one). With several, each GPU gets its own scheduler and a replica of
	// every model, and requests go to the replica predicting the shortest
	// latency (Fleet).
	Devices string `yaml:"devices"`
	// MaxActiveJobs bounds the jobs queued or running at once; a job
	// submitted beyond it is refused with 429 and Retry-After.
	MaxActiveJobs int `yaml:"max_active_jobs"`
	// MaxQueueDelay refuses with 503 and Retry-After an HP request
	// predicted to queue longer than this (the queue ahead × the model's
	// measured time per request); 0: only request_timeout bounds it.
	MaxQueueDelay time.Duration `yaml:"max_queue_delay"`
	// MaxInflight bounds the inference requests the HTTP and gRPC APIs
	// handle at once; one more is refused with 503 and Retry-After (gRPC:
	// Unavailable) before its body is read (gRPC: decoded). 0: every
	// model's max_queue plus eight per CPU (DefaultMaxInflight).
	MaxInflight int `yaml:"max_inflight,omitempty"`
	// FaultDrill makes one BE kernel launch fault on purpose (fault drills:
	// docs/daemon.md); absent: off.
	FaultDrill FaultDrill `yaml:"fault_drill,omitempty"`
	// NoHPGraphs launches each HP request kernel by kernel instead of as
	// one recorded graph (a CUDA graph on the GPU; sched/graphs.go).
	NoHPGraphs bool `yaml:"no_hp_graphs,omitempty"`
	// Standby serves through two worker processes, the serving one and a
	// warm standby that takes over when the first one's device fails (a BE
	// kernel fault poisons every CUDA context of its process); package
	// server/standby.
	Standby bool `yaml:"standby,omitempty"`
}

// ModelConfig is one served model.
type ModelConfig struct {
	Name         string `yaml:"name"`          // API name; the zoo name too unless zoo is set
	Zoo          string `yaml:"zoo,omitempty"` // zoo model (atoll models), e.g. "resnet50"
	Batch        int    `yaml:"batch"`         // batch size the model is built for (> 0)
	DefaultClass Class  `yaml:"default_class"` // HP or BE, for requests without a priority
	MaxQueue     int    `yaml:"max_queue"`     // requests queued before 503 (> 0)
	// Streams serves the model's HP requests with this many copies of it
	// (default 1), each its own stream and buffers: up to Streams requests
	// run at once, a request going to the copy with the fewest unfinished.
	// Worth it only where one request leaves the GPU partly idle; measure
	// (atoll bench --hp-streams, docs/kernels.md).
	Streams int `yaml:"streams,omitempty"`
	// MaxBatch serves the HP requests waiting when a stream of the model
	// empties together, in one pass of up to MaxBatch requests (the
	// largest of 2, 4, ... MaxBatch that does not exceed them; each needs
	// the model's profile at that batch; default 1: one request per pass).
	// A queue then drains several times faster (docs/kernels.md,
	// "Requests served together").
	MaxBatch int `yaml:"max_batch,omitempty"`
	// Devices places the model's replicas on these GPUs of the daemon's
	// devices (default: every one).
	Devices []int `yaml:"devices,omitempty"`
}

// JobModelConfig is a model best-effort jobs may run.
type JobModelConfig struct {
	Model string `yaml:"model"`           // zoo name, e.g. "resnet50-train"
	Batch int    `yaml:"batch,omitempty"` // 0: the batch of the model's only profile
}

// PriorityConfig maps Triton-style priority levels (1 is the highest,
// Levels the lowest, 0 or absent the model's default class) to classes:
// levels 1..HPMax are HP, HPMax+1..Levels are BE.
type PriorityConfig struct {
	Levels int `yaml:"levels"`
	HPMax  int `yaml:"hp_max"`
}

// LogConfig is the structured log's level and format.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text or json
}

// DefaultConfig is the configuration with nothing set: every field has a
// usable value.
func DefaultConfig() Config {
	return Config{
		Listen:          ":8000",
		Backend:         "sim",
		GPU:             "H100-SXM",
		Policy:          "atoll",
		Priority:        PriorityConfig{Levels: 2, HPMax: 1},
		BodyLimit:       64 << 20,
		RequestTimeout:  60 * time.Second,
		ShutdownTimeout: 15 * time.Second,
		Restarts:        3,
		RestartBackoff:  time.Second,
		Log:             LogConfig{Level: "info", Format: "text"},
		MaxActiveJobs:   64,
		Devices:         "0",
		MaxQueueDelay:   time.Second,
	}
}

// Defaults for a model entry's optional fields.
const (
	DefaultBatch    = 1
	DefaultMaxQueue = 64
	// MaxStreams bounds a model's streams (each a copy of the model).
	MaxStreams = sched.MaxGroup
)

// ParseConfig reads a YAML configuration over DefaultConfig and validates
// it. Unknown keys are errors that name their line; name (the file name)
// prefixes every message.
func ParseConfig(r io.Reader, name string) (Config, error) {
	cfg := DefaultConfig()
	data, err := io.ReadAll(r)
	if err != nil {
		return cfg, fmt.Errorf("%w: %s: %w", ErrConfig, name, err)
	}
	if len(bytes.TrimSpace(data)) > 0 {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil {
			return cfg, fmt.Errorf("%w: %s: %s", ErrConfig, name, yamlProblem(err))
		}
		var extra any
		if err := dec.Decode(&extra); err != io.EOF {
			return cfg, fmt.Errorf("%w: %s: more than one YAML document; put everything in one", ErrConfig, name)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%w: %s: %s", ErrConfig, name, strings.TrimPrefix(err.Error(), ErrConfig.Error()+": "))
	}
	return cfg, nil
}

var unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)

// yamlProblem rewords yaml.v3's errors: one line, unknown keys named as such.
func yamlProblem(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			msgs[i] = unknownField.ReplaceAllString(m, `unknown key "$1" (docs/api.md lists the keys)`)
		}
		return strings.Join(msgs, "; ")
	}
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// Validate fills the models' optional fields and checks every field,
// naming the first one that is wrong and what it may be.
func (c *Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	if path, ok := strings.CutPrefix(c.Listen, "unix:"); ok {
		if path == "" {
			return bad("listen", "%q names no socket; want unix:PATH", c.Listen)
		}
	} else if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return bad("listen", "%q is not host:port (e.g. \":8000\" or \"127.0.0.1:8000\") or unix:PATH", c.Listen)
	}
	if path, ok := strings.CutPrefix(c.GRPCListen, "unix:"); ok {
		if path == "" {
			return bad("grpc_listen", "%q names no socket; want unix:PATH", c.GRPCListen)
		}
	} else if c.GRPCListen != "" {
		if _, _, err := net.SplitHostPort(c.GRPCListen); err != nil {
			return bad("grpc_listen", "%q is not host:port (e.g. \":8001\"); leave it empty to serve no gRPC", c.GRPCListen)
		}
	}
	switch c.Backend {
	case "sim", "cuda":
	default:
		return bad("backend", "%q is not a backend; use sim or cuda", c.Backend)
	}
	if c.Backend == "sim" {
		if _, err := gpu.LookupSpec(c.GPU); err != nil {
			return bad("gpu", "%s", strings.TrimPrefix(err.Error(), "gpu: "))
		}
	}
	if !slices.Contains(policies.Names(), c.Policy) {
		return bad("policy", "unknown policy %q (known: %s)", c.Policy, strings.Join(policies.Names(), ", "))
	}
	seen := map[string]bool{}
	for i := range c.Models {
		m := &c.Models[i]
		f := fmt.Sprintf("models[%d]", i)
		if m.Name == "" {
			return bad(f+".name", "empty; give a zoo model name (atoll models)")
		}
		if seen[m.Name] {
			return bad(f+".name", "%q is listed twice", m.Name)
		}
		seen[m.Name] = true
		if m.Batch == 0 {
			m.Batch = DefaultBatch
		}
		if m.Batch < 0 {
			return bad(f+".batch", "%d; must be > 0", m.Batch)
		}
		switch m.DefaultClass {
		case "":
			m.DefaultClass = HP
		case HP, BE:
		default:
			return bad(f+".default_class", "%q; use HP or BE", m.DefaultClass)
		}
		if m.MaxQueue == 0 {
			m.MaxQueue = DefaultMaxQueue
		}
		if m.MaxQueue < 0 {
			return bad(f+".max_queue", "%d; must be > 0", m.MaxQueue)
		}
		if m.Streams < 0 || m.Streams > MaxStreams {
			return bad(f+".streams", "%d; must be in 1..%d (0 or absent: 1)", m.Streams, MaxStreams)
		}
		if m.MaxBatch < 0 || len(sched.BatchSizes(m.MaxBatch)) > sched.MaxBatched {
			return bad(f+".max_batch", "%d; must be in 1..%d (0 or absent: 1, one request per pass)", m.MaxBatch, 1<<sched.MaxBatched)
		}
	}
	for i, j := range c.Jobs {
		f := fmt.Sprintf("jobs[%d]", i)
		if j.Model == "" {
			return bad(f+".model", "empty; give a zoo model name (atoll models)")
		}
		if j.Batch < 0 {
			return bad(f+".batch", "%d; must be > 0, or 0 for the profile's batch", j.Batch)
		}
	}
	if c.Priority.Levels < 1 {
		return bad("priority.levels", "%d; must be >= 1", c.Priority.Levels)
	}
	if c.Priority.HPMax < 0 || c.Priority.HPMax > c.Priority.Levels {
		return bad("priority.hp_max", "%d; must be in 0..priority.levels (%d)", c.Priority.HPMax, c.Priority.Levels)
	}
	if c.BodyLimit < 1024 {
		return bad("body_limit", "%d bytes; must be >= 1024", c.BodyLimit)
	}
	if c.RequestTimeout <= 0 {
		return bad("request_timeout", "%v; must be > 0 (e.g. 60s)", c.RequestTimeout)
	}
	if c.ShutdownTimeout <= 0 {
		return bad("shutdown_timeout", "%v; must be > 0 (e.g. 15s)", c.ShutdownTimeout)
	}
	if c.FaultDrill.BELaunch < 0 {
		return bad("fault_drill.be_launch", "%d; want the 1-based BE launch to fault, or 0 (off)", c.FaultDrill.BELaunch)
	}
	if _, err := c.FaultDrill.kind(); err != nil {
		return bad("fault_drill.kind", "%q; want trap or address", c.FaultDrill.Kind)
	}
	if c.Restarts < 0 {
		return bad("restarts", "%d; must be >= 0 (0: never reopen the device after a failure)", c.Restarts)
	}
	if c.Restarts > 0 && c.RestartBackoff <= 0 {
		return bad("restart_backoff", "%v; must be > 0 when restarts > 0 (e.g. 1s)", c.RestartBackoff)
	}
	if _, err := c.Log.level(); err != nil {
		return bad("log.level", "%v", err)
	}
	for i, r := range c.Restricted {
		if err := r.validate(i); err != nil {
			return err
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return bad("tls_cert", "give both tls_cert and tls_key, or neither")
	}
	if _, err := c.DeviceList(1); err != nil {
		return bad("devices", "%v", err)
	}
	if c.MaxInflight < 0 {
		return bad("max_inflight", "%d; must be >= 0 (0: the models' queues plus eight per CPU)", c.MaxInflight)
	}
	if c.MaxQueueDelay < 0 {
		return bad("max_queue_delay", "%v; must be >= 0 (0: no bound)", c.MaxQueueDelay)
	}
	if c.MaxActiveJobs < 1 {
		return bad("max_active_jobs", "%d; must be >= 1", c.MaxActiveJobs)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return bad("log.format", "%q; use text or json", c.Log.Format)
	}
	return nil
}

// Engine is the engine configuration this daemon configuration asks for.
func (c Config) Engine() EngineConfig {
	ec := EngineConfig{Backend: c.Backend, GPU: c.GPU, Policy: c.Policy, Drain: c.ShutdownTimeout,
		Restarts: c.Restarts, RestartBackoff: c.RestartBackoff, MaxActiveJobs: c.MaxActiveJobs, MaxQueueDelay: c.MaxQueueDelay,
		FaultDrill: c.FaultDrill, NoHPGraphs: c.NoHPGraphs}
	for _, m := range c.Models {
		zoo := m.Zoo
		if zoo == "" {
			zoo = m.Name
		}
		ec.Models = append(ec.Models, EngineModel{Name: m.Name, Zoo: zoo, Batch: m.Batch, DefaultClass: m.DefaultClass, MaxQueue: m.MaxQueue, Streams: m.Streams, MaxBatch: m.MaxBatch})
	}
	for _, j := range c.Jobs {
		ec.Jobs = append(ec.Jobs, EngineJobModel{Zoo: j.Model, Batch: j.Batch})
	}
	return ec
}

// DeviceList resolves Devices to ordinals; available is how many GPUs
// "all" means.
func (c Config) DeviceList(available int) ([]int, error) {
	d := strings.TrimSpace(c.Devices)
	switch d {
	case "", "0":
		return []int{0}, nil
	case "all":
		if available < 1 {
			return nil, errors.New(`"all": no GPU found`)
		}
		out := make([]int, available)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	var out []int
	for _, part := range strings.Split(d, ",") {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(part), "%d", &n); err != nil || n < 0 || fmt.Sprint(n) != strings.TrimSpace(part) {
			return nil, fmt.Errorf("%q: want all, or GPU numbers separated by commas (0,1)", c.Devices)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("%q names GPU %d twice", c.Devices, n)
		}
		out = append(out, n)
	}
	return out, nil
}

// Marshal renders the configuration as YAML (for --print-config).
func (c Config) Marshal() ([]byte, error) {
	return yaml.Marshal(c)
}

func (l LogConfig) level() (slog.Level, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.Level)); err != nil {
		return lv, fmt.Errorf("%q; use debug, info, warn or error", l.Level)
	}
	return lv, nil
}

// NewLogger makes the slog logger the configuration asks for, writing to w.
func (l LogConfig) NewLogger(w io.Writer) (*slog.Logger, error) {
	lv, err := l.level()
	if err != nil {
		return nil, fmt.Errorf("%w: log.level: %v", ErrConfig, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch l.Format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%w: log.format: %q; use text or json", ErrConfig, l.Format)
}

// ClassOf maps a request's priority parameter to its class: 0 is the
// model's default, 1..HPMax is HP, HPMax+1..Levels is BE. Anything else is
// an ErrBadInput error saying which levels exist.
func (p PriorityConfig) ClassOf(priority int64, def Class) (Class, error) {
	switch {
	case priority == 0:
		return def, nil
	case priority < 0 || priority > int64(p.Levels):
		return "", fmt.Errorf("%w: parameter \"priority\" is %d; use 1 (highest) to %d, or 0 for the model's default", ErrBadInput, priority, p.Levels)
	case priority <= int64(p.HPMax):
		return HP, nil
	}
	return BE, nil
}

// InflightLimit is max_inflight, or DefaultMaxInflight of the models' queues
// (Validate has filled in each model's max_queue).
func (c Config) InflightLimit() int {
	if c.MaxInflight > 0 {
		return c.MaxInflight
	}
	queues := make([]int, 0, len(c.Models))
	for _, m := range c.Models {
		queues = append(queues, m.MaxQueue)
	}
	return DefaultMaxInflight(queues)
}
