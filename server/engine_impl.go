package server

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"atoll/gpu"
	"atoll/gpu/backend"
	"atoll/gpu/sim"
	"atoll/models"
	"atoll/models/exec"
	"atoll/policies"
	"atoll/profiles"
	"atoll/sched"
)

// EngineConfig configures NewEngine.
type EngineConfig struct {
	// Backend is "sim" (default: the simulated GPU, paced to the wall
	// clock) or "cuda" (a real GPU through the CUDA driver).
	Backend string
	// GPU is the simulated GPU's spec name (gpu.Specs; default
	// "H100-SXM") and the GPU whose embedded profiles give the scheduler
	// its kernel sequences (and the simulator its timings). On cuda set it
	// to the spec matching the real device: the device is opened only in
	// the scheduler goroutine, after the profiles are chosen.
	GPU string
	// Ordinal is the CUDA device number (cuda only).
	Ordinal int
	// Policy is the scheduling policy's name (default "atoll").
	Policy string
	// Models are the served models (at least one).
	Models []EngineModel
	// Jobs are the models BE jobs may run (each model and batch is one BE
	// client of the scheduler; its jobs run one after another).
	Jobs []EngineJobModel
	// Virtual runs the simulator as fast as it can instead of pacing it to
	// the wall clock (tests). Ignored on cuda.
	Virtual bool
	// Workers is the size of the CPU pool that computes outputs on the
	// simulator (default GOMAXPROCS/2, at least 1).
	Workers int
	// Seed draws the models' weights (models.InitWeights).
	Seed uint64
	// Drain bounds how long Close lets accepted requests finish on the
	// device (default 10 s).
	Drain time.Duration
	// MaxJobs is how many ended jobs Jobs keeps (default 1000).
	MaxJobs int
	// MaxActiveJobs bounds the jobs queued or running at once (default
	// 64); SubmitJob beyond it returns ErrTooManyJobs.
	MaxActiveJobs int
	// MaxQueueDelay refuses (ErrQueueFull) an HP request predicted to
	// queue longer than this before its service; 0: no bound.
	MaxQueueDelay time.Duration
	// NoHPGraphs launches HP requests kernel by kernel instead of one
	// graph per request (sched.OnlineConfig.NoHPGraphs).
	NoHPGraphs bool
	// NoWaitOnFailure makes requests caught by a device failure, or
	// arriving while the device reopens, fail at once with ErrUnavailable
	// instead of waiting for the reopen: a Fleet runs them on another GPU.
	NoWaitOnFailure bool
	// Instances, on the simulator, runs the models through models/exec
	// instances and exec.InstanceBinder exactly as on the GPU (inputs uploaded and
	// outputs read back in the scheduler's hooks) instead of computing
	// outputs with the CPU reference. The simulator computes nothing, so
	// the outputs are whatever the output buffer holds (NaN): this mode
	// exists to test the GPU path's wiring without a GPU.
	Instances bool
	// WrapDevice, when set, wraps the opened device (fault injection in
	// tests: gpu/faulty).
	WrapDevice func(gpu.Device) gpu.Device
	// FaultDrill, when set, makes one BE kernel launch fault on purpose
	// (drills only).
	FaultDrill FaultDrill
	// Restarts is how many times the engine reopens the device after the
	// scheduler loop stopped on a device error (0: never; the engine then
	// stays failed until the daemon restarts). Requests and job runs in
	// flight when the device failed get errors; the engine is not ready
	// while it reopens, then serves again.
	Restarts int
	// RestartBackoff is the wait before the first reopen, doubled for each
	// further one up to 30 s (default 1 s).
	RestartBackoff time.Duration
}

// EngineModel is one served model.
type EngineModel struct {
	// Name is the model's name in the API (default: Zoo).
	Name string
	// Zoo is the zoo model (models.Names), e.g. "resnet50".
	Zoo string
	// Batch is the batch size the model is built for (default 1); the
	// inputs' shapes carry it.
	Batch int
	// DefaultClass is the class of requests that give none (default HP).
	DefaultClass Class
	// MaxQueue bounds the requests of each class accepted and not finished
	// (default 64).
	MaxQueue int
	// Model, when set, replaces the zoo model's graph (inputs, outputs and
	// the CPU-computed outputs) with another one, typically a reduced
	// configuration from models.NewResNet for tests; the simulator still
	// times requests with Zoo's profile. Simulator only.
	Model *models.Model
	// Streams is the HP clients serving the model (default 1; at most
	// MaxStreams), each its own stream and, on a GPU, its own instance:
	// a request goes to the one with the fewest requests unfinished
	// (sched.OnlineClient.Group).
	Streams int
	// MaxBatch serves the requests waiting when a stream empties in one
	// pass of up to MaxBatch (ModelConfig.MaxBatch; sched.OnlineClient.Batched).
	MaxBatch int
}

// EngineJobModel is a model BE jobs may run.
type EngineJobModel struct {
	Zoo   string // e.g. "resnet50-train"
	Batch int    // default: the batch of the only embedded profile of Zoo
}

// NewEngine opens the device, loads the models and starts the scheduler
// loop. ctx bounds the start only; Close stops the engine. Errors name
// the field to fix.
func NewEngine(ctx context.Context, cfg EngineConfig) (Engine, error) {
	e, err := newEngineImpl(cfg)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.stopped = make(chan struct{})
	first := e.loop()
	go e.supervise(runCtx)
	select {
	case <-first.Started():
	case <-ctx.Done():
		cancel()
		<-e.stopped
		e.stopWorkers()
		return nil, fmt.Errorf("server: engine start: %w", ctx.Err())
	}
	if err := first.StartErr(); err != nil {
		cancel()
		<-e.stopped
		e.stopWorkers()
		return nil, fmt.Errorf("server: engine start (%s): %w", e.backend, err)
	}
	e.ready.Store(true)
	return e, nil
}

type engModel struct {
	info     ModelInfo
	graph    *models.Graph
	ref      *models.Prepared // sim: computes outputs on the CPU (weights decoded and packed once; float32 fused products)
	own      *models.Bundle   // an imported model's weights (nil: InitWeights)
	onnx     *models.ONNXIO   // an imported model's file input and output (nil: the graph's)
	hp, be   int              // client indices (hp: the first of streams HP clients)
	streams  int
	maxQueue int
	depth    [2]atomic.Int32 // HP, BE accepted and not finished
	// svc is a moving average of the time each HP request holds the
	// model for (a request's time in the engine over the requests it found
	// there, itself included; ns): admission refuses a request predicted
	// to finish after its deadline (0: nothing measured yet).
	svc    atomic.Int64
	intMax map[string]int   // integer inputs: exclusive bound
	hpInst []*exec.Instance // cuda: per stream (client hp+i)
	beInst *exec.Instance   // cuda
	// batched are the model's graphs at the batches of its passes beyond
	// one (MaxBatch), and batchInst (cuda) each stream's instances of them.
	batched   []*models.Graph
	batchInst [][]*exec.Instance
}

type engJobModel struct {
	zoo   string
	batch int
	be    int
	inst  *exec.Instance
}

type engJob struct {
	// st is what the engine decided (the spec, created, resumed, and the
	// end); status() adds what the current run publishes.
	st     JobStatus
	client int
	run    *sched.BEProgress // the current run
	ended  chan struct{}
	base   int           // iterations done by earlier runs (resumed after a device failure)
	on     *sched.Online // the loop running it
	// resuming: the device failed under it and it waits for the reopen
	// (JobSpec.Resume).
	resuming bool
	endOnce  sync.Once
}

// closeEnded closes j.ended once (a cancel while a resumed run starts may
// end the job before that run's own end).
func (j *engJob) closeEnded() { j.endOnce.Do(func() { close(j.ended) }) }

type engCall struct {
	m      *engModel
	inputs *models.Bundle
	out    []float64 // cuda: read back in AfterRequest
	err    error
}

type engRef struct {
	call *engCall
	done chan struct{}
	out  []float64
	err  error
	// abandoned: the request returned without its outputs (its client
	// gone, an error): a worker that has not started it skips it, so
	// requests given up on cannot pile up CPU work past max_queue.
	abandoned atomic.Bool
}

type engineImpl struct {
	backend string
	online  atomic.Pointer[sched.Online] // the current scheduler loop (a new one after each restart)
	open    func() (gpu.Device, error)
	ocfg    sched.OnlineConfig
	cancel  context.CancelFunc
	stopped chan struct{} // closed when supervise returns
	// drillLaunches counts BE launches for the fault drill (FaultDrill).
	drillLaunches atomic.Int64

	restarts    atomic.Int64 // device reopens so far
	retried     atomic.Int64 // HP requests run again after a device failure
	maxRestarts int
	backoff     time.Duration
	statsMu     sync.Mutex
	past        Stats // counters of the loops that stopped (restarts)
	models      []*engModel
	byName      map[string]*engModel
	jobsM       []*engJobModel
	maxJobs     int
	maxActive   int
	maxDelay    time.Duration
	noWait      bool // EngineConfig.NoWaitOnFailure

	ready   atomic.Bool
	closing atomic.Bool
	failed  atomic.Pointer[error]
	depth   atomic.Int64
	jobSeq  atomic.Uint64
	abort   chan struct{} // closed when Close gives up waiting
	abortMu sync.Once

	refQ    chan *engRef
	workers sync.WaitGroup
	stopRef sync.Once
	refMu   sync.RWMutex // guards sends on refQ against its close
	refDone bool

	jmu struct {
		sync.Mutex
		jobs []*engJob
		byID map[string]*engJob
	}
	hpClients int
}

func newEngineImpl(cfg EngineConfig) (*engineImpl, error) {
	if cfg.Backend == "" {
		cfg.Backend = "sim"
	}
	if cfg.Backend != "sim" && cfg.Backend != "cuda" {
		return nil, fmt.Errorf("%w: backend %q; use \"sim\" or \"cuda\"", ErrConfig, cfg.Backend)
	}
	if cfg.Backend == "cuda" {
		// Profiles are per GPU kind: take the kind of the GPU served, never
		// a default that would time this GPU with another's profiles.
		name, err := cudaGPUName(cfg.Ordinal)
		if err != nil {
			return nil, fmt.Errorf("%w: backend cuda: %w (without a GPU: --backend sim, or backend: sim in the config)", ErrConfig, err)
		}
		cfg.GPU = name
	}
	if cfg.GPU == "" {
		cfg.GPU = "H100-SXM"
	}
	if cfg.Policy == "" {
		cfg.Policy = "atoll"
	}
	if len(cfg.Models) == 0 {
		return nil, fmt.Errorf("%w: no models; list at least one zoo model (%s)", ErrConfig, strings.Join(models.Names(), ", "))
	}
	if cfg.Workers <= 0 {
		cfg.Workers = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if cfg.MaxJobs <= 0 {
		cfg.MaxJobs = 1000
	}
	if cfg.MaxActiveJobs <= 0 {
		cfg.MaxActiveJobs = 64
	}
	pol, err := policies.ByName(cfg.Policy)
	if err != nil {
		return nil, fmt.Errorf("%w: policy: %w", ErrConfig, err)
	}
	spec, err := gpu.LookupSpec(cfg.GPU)
	if err != nil {
		return nil, fmt.Errorf("%w: gpu: %w", ErrConfig, err)
	}
	e := &engineImpl{backend: cfg.Backend, byName: map[string]*engModel{}, maxJobs: cfg.MaxJobs, maxActive: cfg.MaxActiveJobs, maxDelay: cfg.MaxQueueDelay, noWait: cfg.NoWaitOnFailure,
		abort: make(chan struct{})}
	e.jmu.byID = map[string]*engJob{}
	// A fault drill counts BE launches as the driver binds them, one by
	// one: BE chunk graphs would bind every kernel before the first job.
	ocfg := sched.OnlineConfig{Policy: pol, Pace: cfg.Backend == "sim" && !cfg.Virtual, Drain: cfg.Drain, NoHPGraphs: cfg.NoHPGraphs,
		NoBEGraphs: cfg.FaultDrill.BELaunch > 0}
	// Served models: an HP client each, and a BE client for BE-class
	// requests (one iteration per request).
	for i, mc := range cfg.Models {
		if err := e.addModel(&cfg, spec, &ocfg, fmt.Sprintf("models[%d]", i), mc); err != nil {
			return nil, err
		}
	}
	ocfg.MaxQueue = 0
	for _, m := range e.models {
		ocfg.MaxQueue = max(ocfg.MaxQueue, m.maxQueue)
	}
	for i, jc := range cfg.Jobs {
		if err := e.addJobModel(&cfg, spec, &ocfg, fmt.Sprintf("jobs[%d]", i), jc); err != nil {
			return nil, err
		}
	}
	e.hpClients = len(ocfg.HP)
	open := backend.Opener(backend.Config{Backend: cfg.Backend, Sim: sim.Defaults(spec, cfg.Seed), Ordinal: cfg.Ordinal})
	if cfg.Backend == "sim" && !cfg.Instances {
		// Outputs come from the CPU reference, off the scheduler loop.
		e.refQ = make(chan *engRef, len(e.models)*2*ocfg.MaxQueue)
		for range cfg.Workers {
			e.workers.Add(1)
			go e.refWorker()
		}
	} else {
		ocfg.Bind = func(dev gpu.Device) (sched.Binder, error) { return e.bindInstances(dev, cfg.Seed) }
		ocfg.Release = func(gpu.Device) { e.releaseCUDA() }
		ocfg.Hooks = sched.OnlineHooks{BeforeRequest: e.beforeRequest, AfterRequest: e.afterRequest,
			BeforePass: e.beforePass, AfterPass: e.afterPass}
	}
	if cfg.FaultDrill.BELaunch > 0 {
		inner := ocfg.Bind
		ocfg.Bind = func(dev gpu.Device) (sched.Binder, error) {
			var b sched.Binder
			var err error
			if inner != nil {
				b, err = inner(dev)
			} else {
				b, err = sched.NewProfileBinder(dev, ocfg.Workload())
			}
			if err != nil {
				return nil, err
			}
			return newDrillBinder(dev, b, cfg.FaultDrill, &e.drillLaunches)
		}
	}
	if wrap := cfg.WrapDevice; wrap != nil {
		inner := open
		open = func() (gpu.Device, error) {
			d, err := inner()
			if err != nil {
				return nil, err
			}
			return wrap(d), nil
		}
	}
	on, err := sched.NewOnline(open, ocfg)
	if err != nil {
		e.stopWorkers()
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	e.online.Store(on)
	e.open, e.ocfg = open, ocfg
	e.maxRestarts, e.backoff = max(cfg.Restarts, 0), cfg.RestartBackoff
	if e.backoff <= 0 {
		e.backoff = time.Second
	}
	return e, nil
}

// loop is the current scheduler loop.
func (e *engineImpl) loop() *sched.Online { return e.online.Load() }

// lookupProfile finds a model's profile (the embedded ones). Tests replace
// it.
var lookupProfile = profiles.Lookup

// beforePass and afterPass are beforeRequest and afterRequest for a model
// whose requests are served in passes (MaxBatch): variant v > 0 is the
// stream's instance at batched[v-1], the request its slot.
func (e *engineImpl) beforePass(client, v, slot int, id uint64, tag any) error {
	if v == 0 {
		return e.beforeRequest(client, id, tag)
	}
	c := tag.(*engCall)
	in, of := c.m.pass(client, v)
	return in.SetInputsAt(slot, of, c.inputs)
}

func (e *engineImpl) afterPass(client, v, slot int, id uint64, tag any) error {
	if v == 0 {
		return e.afterRequest(client, id, tag)
	}
	c := tag.(*engCall)
	in, of := c.m.pass(client, v)
	out, err := in.OutputAt(slot, of)
	c.out = out
	return err
}

// pass is HP client client's instance of m's batched variant v (> 0) and
// the requests a pass of it serves.
func (m *engModel) pass(client, v int) (*exec.Instance, int) {
	in := m.batchInst[client-m.hp][v-1]
	return in, in.Graph().Batch / m.graph.Batch
}

// beforeRequest and afterRequest run in the owner goroutine (cuda).
func (e *engineImpl) beforeRequest(client int, _ uint64, tag any) error {
	c := tag.(*engCall)
	return c.m.hpInst[client-c.m.hp].SetInputs(c.inputs)
}

func (e *engineImpl) afterRequest(client int, _ uint64, tag any) error {
	c := tag.(*engCall)
	out, err := c.m.hpInst[client-c.m.hp].Output()
	c.out = out
	return err
}

// Models implements Engine.
func (e *engineImpl) Models() []ModelInfo {
	out := make([]ModelInfo, len(e.models))
	ready := e.Ready()
	for i, m := range e.models {
		out[i] = m.info
		out[i].Ready = ready
	}
	return out
}

// Ready implements Engine.
func (e *engineImpl) Ready() bool { return e.ready.Load() && !e.closing.Load() }

// mapErr turns the online driver's errors into the Engine's sentinels.
func (e *engineImpl) mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sched.ErrQueueFull):
		return fmt.Errorf("%w: %v", ErrQueueFull, err)
	case errors.Is(err, sched.ErrStopped) && e.failed.Load() == nil:
		return fmt.Errorf("%w: %v", ErrShuttingDown, err)
	case errors.Is(err, ErrInternal), errors.Is(err, ErrBadInput):
		return err
	}
	return fmt.Errorf("%w: %v", ErrInternal, err)
}

// Infer implements Engine.
func (e *engineImpl) Infer(ctx context.Context, req *InferRequest) (*InferResult, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: no request", ErrBadInput)
	}
	m, ok := e.byName[req.Model]
	if !ok {
		names := make([]string, len(e.models))
		for i, m := range e.models {
			names[i] = m.info.Name
		}
		return nil, fmt.Errorf("%w: %q (served: %s)", ErrUnknownModel, req.Model, strings.Join(names, ", "))
	}
	if !e.Ready() && !(e.restarting() && e.awaitRestart(ctx, nil)) {
		return nil, e.unavailable()
	}
	class := req.Class
	if class == "" {
		class = m.info.DefaultClass
	}
	if class != HP && class != BE {
		return nil, fmt.Errorf("%w: class %q; use HP or BE", ErrBadInput, class)
	}
	bundle, err := m.check(req)
	if err != nil {
		return nil, err
	}
	ci := 0
	if class == BE {
		ci = 1
	}
	depth := int(m.depth[ci].Add(1))
	if depth > m.maxQueue {
		m.depth[ci].Add(-1)
		return nil, fmt.Errorf("%w: %s has %d %s requests waiting (limit %d)", ErrQueueFull, m.info.Name, m.maxQueue, class, m.maxQueue)
	}
	if err := m.admit(ctx, class, depth, e.maxDelay); err != nil {
		m.depth[ci].Add(-1)
		return nil, err
	}
	defer m.depth[ci].Add(-1)
	e.depth.Add(1)
	defer e.depth.Add(-1)

	call := &engCall{m: m, inputs: bundle}
	// The CPU reference (sim) runs beside the simulated request.
	var ref *engRef
	if e.refQ != nil {
		ref = &engRef{call: call, done: make(chan struct{})}
		e.refMu.RLock()
		if e.refDone {
			e.refMu.RUnlock()
			return nil, fmt.Errorf("%w: the engine is closing", ErrShuttingDown)
		}
		select {
		case e.refQ <- ref:
			e.refMu.RUnlock()
		default:
			e.refMu.RUnlock()
			return nil, fmt.Errorf("%w: the CPU output pool is full", ErrQueueFull)
		}
		defer ref.abandoned.Store(true) // after its outputs are taken, harmless
	}
	var res sched.OnlineResult
	submitted := time.Now()
	if class == HP {
		// Inference is idempotent: a request caught in a device failure is
		// run again once the engine has reopened the device, within its
		// deadline, instead of failing.
		for {
			on := e.loop()
			ch, err := on.Submit(m.hp, call)
			if err == nil {
				select {
				case res = <-ch:
					err = res.Err
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-e.abort:
					return nil, fmt.Errorf("%w: the engine closed before the request finished", ErrShuttingDown)
				}
			}
			if err == nil {
				break
			}
			if !errors.Is(err, sched.ErrDevice) && !errors.Is(err, sched.ErrStopped) || !e.awaitRestart(ctx, on) {
				return nil, e.mapErr(err)
			}
			e.retried.Add(1)
		}
	} else {
		res, err = e.runBE(ctx, m, call)
		if err != nil {
			return nil, err
		}
	}
	if res.Err != nil {
		return nil, e.mapErr(res.Err)
	}
	out := call.out
	if ref != nil {
		select {
		case <-ref.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-e.abort:
			return nil, fmt.Errorf("%w: the engine closed before the outputs were computed", ErrShuttingDown)
		}
		if ref.err != nil {
			return nil, ref.err
		}
		out = ref.out
	}
	if class == HP {
		// Its time in the engine, shared among the requests it found
		// there: what each request ahead holds the next one for.
		m.observe(time.Since(submitted) / time.Duration(depth))
	}
	o := m.info.Outputs[0]
	result := &InferResult{Queue: res.Queue, Service: res.Service, Batch: res.Batch, Input: res.Input, Output: res.Output, Delay: res.Causes}
	if !req.Arrived.IsZero() {
		// Time between the HTTP layer's arrival and the submission (the
		// device clock measures the rest).
		result.Decode = max(0, submitted.Sub(req.Arrived))
		result.Queue += result.Decode
	}
	if len(req.Outputs) == 0 || slices.Contains(req.Outputs, o.Name) {
		result.Outputs = []Tensor{{Name: o.Name, Datatype: o.Datatype, Shape: slices.Clone(o.Shape), Data: out}}
	}
	return result, nil
}

// Stats implements Engine.
func (e *engineImpl) Stats() Stats {
	on := e.loop()
	s := on.Stats()
	e.statsMu.Lock()
	p := e.past
	e.statsMu.Unlock()
	return Stats{
		Backend:        e.backend,
		Device:         s.Device,
		Preemptions:    p.Preemptions + uint64(s.Core.Preemptions),
		PreemptLatency: on.TakePreemptionLatencies(),
		PaddedLaunches: p.PaddedLaunches + uint64(s.PaddedLaunches),
		Launches:       p.Launches + uint64(s.Launches),
		BEIterations:   p.BEIterations + uint64(s.Core.Iterations),
		BEWorkSeconds:  p.BEWorkSeconds + s.Core.BEWork.Seconds(),
		QueueDepth:     int(e.depth.Load()),
		Restarts:       uint64(e.restarts.Load()),
		Retried:        uint64(e.retried.Load()),
	}
}

// Close implements Engine.
func (e *engineImpl) Close(ctx context.Context) error {
	e.closing.Store(true)
	e.cancel()
	select {
	case <-e.stopped:
	case <-ctx.Done():
		e.abortMu.Do(func() { close(e.abort) })
		return fmt.Errorf("server: engine close: %w", ctx.Err())
	}
	// Outputs still being computed on the CPU are waited for, within ctx.
	wd := make(chan struct{})
	go func() {
		e.stopWorkers()
		close(wd)
	}()
	select {
	case <-wd:
	case <-ctx.Done():
		e.abortMu.Do(func() { close(e.abort) })
		return fmt.Errorf("server: engine close (CPU outputs): %w", ctx.Err())
	}
	if err := e.loop().Err(); err != nil {
		return fmt.Errorf("%w: the scheduler loop stopped with: %w", ErrInternal, err)
	}
	return nil
}

// admit refuses an HP request that, behind the depth−1 requests of its
// model already accepted, is predicted to finish after ctx's deadline, or
// to wait longer than maxDelay (0: no bound) before its own service: an
// explicit 503 now instead of a time-out later (a client's own time-out
// is not sent over HTTP; max_queue_delay stands for it).
func (m *engModel) admit(ctx context.Context, class Class, depth int, maxDelay time.Duration) error {
	svc := time.Duration(m.svc.Load())
	if class != HP || svc <= 0 {
		return nil
	}
	wait := time.Duration(depth) * svc
	if deadline, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(deadline) {
		return fmt.Errorf("%w: %s would finish in about %v (%d requests ahead at %v each), after the request's deadline in %v",
			ErrQueueFull, m.info.Name, wait.Round(time.Microsecond), depth-1, svc.Round(time.Microsecond), time.Until(deadline).Round(time.Microsecond))
	}
	if queued := wait - svc; maxDelay > 0 && queued > maxDelay {
		return fmt.Errorf("%w: %s would queue for about %v (%d requests ahead at %v each), over max_queue_delay %v",
			ErrQueueFull, m.info.Name, queued.Round(time.Microsecond), depth-1, svc.Round(time.Microsecond), maxDelay)
	}
	return nil
}

// observe folds one request's holding time into svc (weight 1/8).
func (m *engModel) observe(d time.Duration) {
	for {
		old := m.svc.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/8
		}
		if m.svc.CompareAndSwap(old, next) {
			return
		}
	}
}
