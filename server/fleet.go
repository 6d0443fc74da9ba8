package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Fleet is one Engine over several: one per GPU of a node, each with its own
// device, scheduler loop and copy (replica) of every served model. It
// routes each request to the ready replica that predicts the shortest
// latency (requests in flight times its recent latency per request), runs
// a request again on another replica when the one it went to fails or
// stops (inference is idempotent), places a job on the engine with the
// fewest active jobs, and names jobs by engine ("gpu1/job-3").
// Every method is safe for concurrent use.
type Fleet struct {
	engines  []Engine
	inflight []atomic.Int64
	latency  []atomic.Int64 // moving average of a served request's latency, ns (0: none yet)
	rerouted atomic.Uint64
	models   []ModelInfo      // every model, in first-served order
	byModel  map[string][]int // engines serving each model
	jobs     struct {
		sync.Mutex
		byID  map[string]*fleetJob // by fleet id
		order []string
	}
	stop    chan struct{}
	watched sync.WaitGroup
	closing sync.Once
	// ordinals and uuids label each engine's GPU in metrics (default: its
	// index, no UUID).
	ordinals []int
	uuids    []string
}

// SetDevices names the engines' GPUs: CUDA ordinals and (where NVML
// answers) UUIDs, for the per-GPU metrics' labels.
func (f *Fleet) SetDevices(ordinals []int, uuids []string) {
	f.ordinals, f.uuids = slices.Clone(ordinals), slices.Clone(uuids)
}

// DeviceLabel is engine i's GPU: its ordinal and UUID ("" unknown).
func (f *Fleet) DeviceLabel(i int) (ordinal int, uuid string) {
	ordinal = i
	if i < len(f.ordinals) {
		ordinal = f.ordinals[i]
	}
	if i < len(f.uuids) {
		uuid = f.uuids[i]
	}
	return ordinal, uuid
}

var _ Engine = (*Fleet)(nil)

// NewFleet serves engines as one. A model may be served by several of
// them (replicas) or one; the replicas of a model must agree (inputs and
// outputs).
func NewFleet(engines []Engine) (*Fleet, error) {
	if len(engines) == 0 {
		return nil, fmt.Errorf("%w: a fleet needs at least one engine", ErrConfig)
	}
	f := &Fleet{engines: engines, inflight: make([]atomic.Int64, len(engines)), latency: make([]atomic.Int64, len(engines)), byModel: map[string][]int{}, stop: make(chan struct{})}
	f.jobs.byID = map[string]*fleetJob{}
	first := map[string]ModelInfo{}
	for i, e := range engines {
		for _, m := range e.Models() {
			if o, seen := first[m.Name]; seen && !sameModels([]ModelInfo{o}, []ModelInfo{m}) {
				return nil, fmt.Errorf("%w: model %q differs between GPUs (inputs or outputs); replicas must be the same model", ErrConfig, m.Name)
			} else if !seen {
				first[m.Name] = m
				f.models = append(f.models, m)
			}
			f.byModel[m.Name] = append(f.byModel[m.Name], i)
		}
	}
	f.watched.Add(1)
	go f.watchJobs()
	return f, nil
}

func sameModels(a, b []ModelInfo) bool {
	return slices.EqualFunc(a, b, func(x, y ModelInfo) bool {
		return x.Name == y.Name && slices.EqualFunc(x.Inputs, y.Inputs, sameTensor) && slices.EqualFunc(x.Outputs, y.Outputs, sameTensor)
	})
}

func sameTensor(x, y TensorInfo) bool {
	return x.Name == y.Name && x.Datatype == y.Datatype && slices.Equal(x.Shape, y.Shape)
}

// Engines are the fleet's engines, by device index.
func (f *Fleet) Engines() []Engine { return f.engines }

// Rerouted counts requests run again on another engine after theirs failed.
func (f *Fleet) Rerouted() uint64 { return f.rerouted.Load() }

// Models implements Engine: every model of every engine, ready when any
// of its replicas is.
func (f *Fleet) Models() []ModelInfo {
	out := slices.Clone(f.models)
	for i := range out {
		out[i].Ready = false
		for _, e := range f.byModel[out[i].Name] {
			out[i].Ready = out[i].Ready || f.engines[e].Ready()
		}
	}
	return out
}

// Broken implements Breakable: every engine broken for good (their errors
// joined); nil while one serves or may serve again.
func (f *Fleet) Broken() error {
	var errs []error
	for i, e := range f.engines {
		b, ok := e.(Breakable)
		if !ok {
			return nil
		}
		err := b.Broken()
		if err == nil {
			return nil
		}
		ordinal, _ := f.DeviceLabel(i)
		errs = append(errs, fmt.Errorf("gpu%d: %w", ordinal, err))
	}
	return errors.Join(errs...)
}

// Ready implements Engine: any engine ready.
func (f *Fleet) Ready() bool {
	for _, e := range f.engines {
		if e.Ready() {
			return true
		}
	}
	return false
}

// pick is the ready engine among those serving model, not in tried, that
// predicts the shortest latency for one more request: its requests in
// flight plus this one, times its recent latency per request (so a GPU
// slowed by its BE work, or by a longer queue, gets fewer). An engine that
// has served nothing yet is taken to be as fast as the fastest that has;
// ties go to the fewer in flight, then the lower index. -1 when none.
func (f *Fleet) pick(model string, tried []bool) int {
	var fastest int64
	for _, i := range f.byModel[model] {
		if l := f.latency[i].Load(); l > 0 && (fastest == 0 || l < fastest) {
			fastest = l
		}
	}
	best, bestCost, bestN := -1, int64(0), int64(0)
	for _, i := range f.byModel[model] {
		if tried[i] || !f.engines[i].Ready() {
			continue
		}
		n, l := f.inflight[i].Load(), f.latency[i].Load()
		if l == 0 {
			l = fastest
		}
		cost := (n + 1) * l
		if best < 0 || cost < bestCost || (cost == bestCost && n < bestN) {
			best, bestCost, bestN = i, cost, n
		}
	}
	return best
}

// observe folds a served request's latency into engine i's moving average
// (weight 1/8 for the newest; the first sets it).
func (f *Fleet) observe(i int, d time.Duration) {
	for {
		old := f.latency[i].Load()
		v := int64(d)
		if old > 0 {
			v = old + (int64(d)-old)/8
		}
		if f.latency[i].CompareAndSwap(old, max(v, 1)) {
			return
		}
	}
}

// Infer implements Engine.
func (f *Fleet) Infer(ctx context.Context, req *InferRequest) (*InferResult, error) {
	serving := f.byModel[req.Model]
	if len(serving) == 0 {
		return nil, fmt.Errorf("%w: %q (served: %s)", ErrUnknownModel, req.Model, strings.Join(f.modelNames(), ", "))
	}
	tried := make([]bool, len(f.engines))
	var last error
	for {
		i := f.pick(req.Model, tried)
		if i < 0 {
			if last != nil {
				return nil, last
			}
			// No replica ready: the first says why.
			return f.engines[serving[0]].Infer(ctx, req)
		}
		tried[i] = true
		f.inflight[i].Add(1)
		r := *req
		start := time.Now()
		res, err := f.engines[i].Infer(ctx, &r)
		f.inflight[i].Add(-1)
		if err == nil {
			f.observe(i, time.Since(start))
		}
		if err == nil || !rerouteable(err) || ctx.Err() != nil {
			return res, err
		}
		last = err
		f.rerouted.Add(1)
	}
}

func (f *Fleet) modelNames() []string {
	var names []string
	for _, m := range f.models {
		names = append(names, m.Name)
	}
	return names
}

// rerouteable errors are the engine's, not the request's: another replica
// may serve it.
func rerouteable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrInternal) || errors.Is(err, ErrShuttingDown) || errors.Is(err, ErrQueueFull)
}

// SubmitJob implements Engine: on the ready engine with the most BE
// headroom — the fewest active jobs, then the fewest HP requests in
// flight — or the next one when it refuses for want of room (too many
// jobs, reopening); the job's id names its engine.
func (f *Fleet) SubmitJob(spec JobSpec) (JobStatus, error) {
	type cand struct{ i, active int }
	var cands []cand
	for i, e := range f.engines {
		if !e.Ready() {
			continue
		}
		active := 0
		for _, j := range e.Jobs() {
			if j.Ended.IsZero() {
				active++
			}
		}
		cands = append(cands, cand{i, active})
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		if a.active != b.active {
			return a.active - b.active
		}
		return int(f.inflight[a.i].Load() - f.inflight[b.i].Load())
	})
	if len(cands) == 0 {
		return f.engines[0].SubmitJob(spec)
	}
	var st JobStatus
	var err error
	for _, c := range cands {
		restarts := f.engines[c.i].Stats().Restarts
		st, err = f.engines[c.i].SubmitJob(spec)
		if err == nil {
			id := f.fleetJobID(c.i, st.ID)
			f.jobs.Lock()
			f.jobs.byID[id] = &fleetJob{engine: c.i, id: st.ID, spec: spec, restarts: restarts}
			f.jobs.order = append(f.jobs.order, id)
			f.jobs.Unlock()
			st.ID = id
			return st, nil
		}
		if !(errors.Is(err, ErrTooManyJobs) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrShuttingDown)) {
			return st, err
		}
	}
	return st, err
}

// fleetJobID names engine i's job id by its GPU's ordinal ("gpu3/job-1").
func (f *Fleet) fleetJobID(i int, id string) string {
	if id == "" {
		return ""
	}
	ordinal, _ := f.DeviceLabel(i)
	return fmt.Sprintf("gpu%d/%s", ordinal, id)
}

// splitJobID finds a fleet job id's engine.
func (f *Fleet) splitJobID(id string) (int, string, bool) {
	dev, rest, ok := strings.Cut(id, "/")
	var ordinal int
	if !ok || !strings.HasPrefix(dev, "gpu") {
		return 0, "", false
	}
	if _, err := fmt.Sscanf(dev, "gpu%d", &ordinal); err != nil || dev != fmt.Sprintf("gpu%d", ordinal) {
		return 0, "", false
	}
	for i := range f.engines {
		if o, _ := f.DeviceLabel(i); o == ordinal {
			return i, rest, true
		}
	}
	return 0, "", false
}

// Jobs implements Engine: the fleet's jobs in submission order (a moved
// job once, under its first id), then any an engine ran that the fleet did
// not place.
func (f *Fleet) Jobs() []JobStatus {
	f.jobs.Lock()
	ids := slices.Clone(f.jobs.order)
	placed := map[string]bool{}
	for _, j := range f.jobs.byID {
		for _, h := range j.history {
			placed[h] = true
		}
		placed[f.fleetJobID(j.engine, j.id)] = true
	}
	f.jobs.Unlock()
	var out []JobStatus
	for _, id := range ids {
		if st, ok := f.Job(id); ok {
			out = append(out, st)
		}
	}
	for i, e := range f.engines {
		for _, j := range e.Jobs() {
			if id := f.fleetJobID(i, j.ID); !placed[id] {
				j.ID = id
				out = append(out, j)
			}
		}
	}
	return out
}

// Job implements Engine.
func (f *Fleet) Job(id string) (JobStatus, bool) {
	f.jobs.Lock()
	j := f.jobs.byID[id]
	f.jobs.Unlock()
	if j != nil {
		return f.jobStatus(id, j), true
	}
	i, rest, ok := f.splitJobID(id)
	if !ok {
		return JobStatus{}, false
	}
	st, found := f.engines[i].Job(rest)
	st.ID = f.fleetJobID(i, st.ID)
	return st, found
}

// CancelJob implements Engine.
func (f *Fleet) CancelJob(id string) (JobStatus, error) {
	f.jobs.Lock()
	j := f.jobs.byID[id]
	var engine int
	var engID string
	if j != nil {
		engine, engID = j.engine, j.id
	}
	f.jobs.Unlock()
	if j != nil {
		_, err := f.engines[engine].CancelJob(engID)
		return f.jobStatus(id, j), err
	}
	i, rest, ok := f.splitJobID(id)
	if !ok {
		return JobStatus{}, fmt.Errorf("%w: %q (a fleet's job ids look like gpu0/job-1)", ErrUnknownJob, id)
	}
	st, err := f.engines[i].CancelJob(rest)
	st.ID = f.fleetJobID(i, st.ID)
	return st, err
}

// Stats implements Engine: the engines' counters added up.
func (f *Fleet) Stats() Stats {
	var s Stats
	for i, e := range f.engines {
		x := e.Stats()
		if i == 0 {
			s.Backend = x.Backend
		}
		if x.Device != "" && !strings.Contains(s.Device, x.Device) {
			s.Device = strings.TrimPrefix(s.Device+", "+x.Device, ", ")
		}
		s.Preemptions += x.Preemptions
		s.PreemptLatency = append(s.PreemptLatency, x.PreemptLatency...)
		s.PaddedLaunches += x.PaddedLaunches
		s.Launches += x.Launches
		s.BEIterations += x.BEIterations
		s.BEWorkSeconds += x.BEWorkSeconds
		s.QueueDepth += x.QueueDepth
		s.Restarts += x.Restarts
		s.Retried += x.Retried
	}
	s.Retried += f.rerouted.Load()
	return s
}

// Close implements Engine: stops moving jobs, then closes every engine,
// concurrently.
func (f *Fleet) Close(ctx context.Context) error {
	f.closing.Do(func() { close(f.stop) })
	f.watched.Wait()
	errs := make([]error, len(f.engines))
	var wg sync.WaitGroup
	for i, e := range f.engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.Close(ctx); err != nil {
				errs[i] = fmt.Errorf("gpu%d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// AcceptsRaw implements RawInputs: raw inputs when every engine takes them.
func (f *Fleet) AcceptsRaw() bool {
	for _, e := range f.engines {
		if ri, ok := e.(RawInputs); !ok || !ri.AcceptsRaw() {
			return false
		}
	}
	return true
}

// DevicePlan is what one GPU of a multi-GPU daemon serves.
type DevicePlan struct {
	Device int           // CUDA ordinal (simulated: the index)
	Models []ModelConfig // the models with a replica on it
	Jobs   []JobModelConfig
}

// Plan resolves cfg's devices (available is how many GPUs "all" means) and
// places each model on the GPUs its devices name (default every one). A
// model placed on a GPU the daemon does not serve, or a GPU left with no
// model, is a configuration error.
func Plan(cfg Config, available int) ([]DevicePlan, error) {
	devs, err := cfg.DeviceList(available)
	if err != nil {
		return nil, fmt.Errorf("%w: devices: %v", ErrConfig, err)
	}
	for i, m := range cfg.Models {
		for _, d := range m.Devices {
			if !slices.Contains(devs, d) {
				return nil, fmt.Errorf("%w: models[%d].devices names GPU %d, which is not among the daemon's devices %v", ErrConfig, i, d, devs)
			}
		}
	}
	var plan []DevicePlan
	for _, d := range devs {
		p := DevicePlan{Device: d, Jobs: cfg.Jobs}
		for _, m := range cfg.Models {
			if len(m.Devices) == 0 || slices.Contains(m.Devices, d) {
				p.Models = append(p.Models, m)
			}
		}
		if len(p.Models) == 0 && len(cfg.Models) > 0 {
			return nil, fmt.Errorf("%w: GPU %d serves no model: place one on it (models[].devices) or drop it from devices", ErrConfig, d)
		}
		plan = append(plan, p)
	}
	return plan, nil
}

// NewEngines builds the daemon's engine for cfg: one engine on one device,
// or a Fleet of one per device when cfg.Devices names several. available
// is how many GPUs "all" means. Engines already built are closed if a later
// one fails.
func NewEngines(ctx context.Context, cfg Config, available int) (Engine, error) {
	devs, err := cfg.DeviceList(available)
	if err != nil {
		return nil, fmt.Errorf("%w: devices: %v", ErrConfig, err)
	}
	if len(devs) == 1 {
		ec := cfg.Engine()
		ec.Ordinal = devs[0]
		return NewEngine(ctx, ec)
	}
	plan, err := Plan(cfg, available)
	if err != nil {
		return nil, err
	}
	var engines []Engine
	fail := func(err error) (Engine, error) {
		for _, e := range engines {
			_ = e.Close(ctx)
		}
		return nil, err
	}
	for _, p := range plan {
		d := p.Device
		dc := cfg
		dc.Models = p.Models
		ec := dc.Engine()
		ec.Ordinal = d            // the same seed: replicas compute the same outputs
		ec.NoWaitOnFailure = true // another GPU serves while this one reopens
		e, err := NewEngine(ctx, ec)
		if err != nil {
			return fail(fmt.Errorf("gpu %d: %w", d, err))
		}
		engines = append(engines, e)
	}
	f, err := NewFleet(engines)
	if err != nil {
		return fail(err)
	}
	ordinals := make([]int, len(plan))
	uuids := make([]string, len(plan))
	var known []string // NVML's UUIDs by ordinal
	if cfg.Backend == "cuda" {
		known = cudaUUIDs()
	}
	for i, p := range plan {
		ordinals[i] = p.Device
		if p.Device < len(known) {
			uuids[i] = known[p.Device]
		}
	}
	f.SetDevices(ordinals, uuids)
	return f, nil
}
