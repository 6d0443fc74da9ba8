package profiler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"atoll/gpu"
	"atoll/gpu/cuda"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
	"atoll/profiles"
)

// ErrMeasure wraps every error of Measure. A model with a layer the kernel
// library cannot run also wraps exec.ErrNotRunnable (errors.Is works for
// both), and the message names the layer.
var ErrMeasure = errors.New("profiler: cannot measure")

// MeasureScalingSMs are the SM shares at which Measure times each kernel
// confined to fewer SMs (shares above the device's SM count are dropped and
// the full count is always included).
var MeasureScalingSMs = []int{8, 16, 33, 66, 132}

// Defaults of MeasureOptions.
const (
	DefaultWarmup      = 3
	DefaultRuns        = 20
	DefaultScalingRuns = 3
)

// MeasureOptions tune Measure. The zero value measures with the defaults.
type MeasureOptions struct {
	// Warmup forward passes before the timed ones (0: DefaultWarmup; < 0:
	// none) and timed passes (0: DefaultRuns).
	Warmup, Runs int
	// NoScaling skips the duration-against-SM-share measurement; Scaling
	// overrides its shares (nil: MeasureScalingSMs). ScalingRuns is the
	// number of timed launches per share, after one warm-up (0:
	// DefaultScalingRuns).
	NoScaling   bool
	Scaling     []int
	ScalingRuns int
	// NoPartition skips timing each kernel on SM partitions (green
	// contexts; profiles.Kernel.Partition): smsNeeded then comes from the
	// kernel's grid for every kernel, vendor ones included.
	NoPartition bool
	// Substitute binds layers the kernel library lacks to an equivalent
	// library kernel (exec.Options.Substitute); each substitution is
	// recorded in the profile's notes and the kernel tagged "substituted".
	Substitute bool
	// WarmPass times each pass right after an untimed run of the same
	// pass, so that every kernel finds L2 as the model's previous pass
	// left it, as when the model runs alone back to back (a served HP
	// model, a training job); without it the GEMM blocker before each
	// pass leaves L2 cold.
	WarmPass bool
	// GraphPasses also times each pass inside one graph, as the scheduler
	// submits an HP request (profiles.Kernel.GraphUs): one graph runs the
	// pass five times back to back, with no blocker: a warm-up, two runs
	// between two events and one between the next two, which time the
	// pass with no events inside it (the difference: each span also holds
	// its closing event), and a run with an event after every kernel,
	// which shares that time out among the kernels. The device must
	// record graphs (gpu.Grapher).
	GraphPasses bool
	// Seed of the weights and inputs (models.InitWeights, InitInputs).
	Seed uint64
	// Command is the exact command line, recorded in the notes.
	Command string
	// Date of the measurement (zero: now).
	Date time.Time
	// Ordinal is the GPU's index, to read its clocks through NVML.
	Ordinal int
	// Peaks, when set, are used instead of measuring them (tests); its
	// Method says where they came from.
	Peaks *Peaks
	// Progress, when set, is called as the measurement goes (from the
	// calling goroutine).
	Progress func(Progress)
	// NCU, when set, are Nsight Compute launches (ParseNCU) of NCUFile
	// whose durations and percentages replace the measured ones (ApplyNCU,
	// matched against what the model launches on this device).
	NCU     []NCULaunch
	NCUFile string
}

// Progress is where Measure is: Done of Total steps of one Stage.
type Progress struct {
	Stage       string // "peaks", "runs", then "scaling" ("kernels" without scaling)
	Done, Total int
}

// Peaks are the compute and memory rates against which achieved
// percentages are computed.
type Peaks struct {
	FLOPS     float64 // tensor-core bf16 FLOP/s (GEMMs, convolutions)
	FP32      float64 // FLOP/s of every other op (the spec's PeakFP32)
	Bandwidth float64 // DRAM bytes/s
	Method    string  // how they were obtained
}

// funcAttributer is implemented by devices that report a function's
// resources (gpu/cuda does).
type funcAttributer interface {
	FuncAttributes(gpu.Func) (registers, staticSharedMem, maxThreadsPerBlock int, err error)
}

// Measure runs a zoo model alone on dev through lib and records its
// profile: Warmup forward passes, then Runs timed ones with an event
// recorded before the first launch and after every launch on one stream
// (so kernel i lasts from event i to event i+1); per kernel the median and
// the spread p90 − p10 of those durations, the launch shape, registers and
// shared memory as the driver reports them (the op's estimates where the
// device reports none), FLOPs and bytes, achieved compute and memory % of
// peaks measured on the device first (a large bf16 GEMM and a large
// elementwise add from the library), Classify's class, SMs needed at the
// occupancy the driver's registers allow, and the duration confined to
// several SM shares (the kernel's Resumable form with share × blocks per
// SM persistent workers: an approximation, since the hardware spreads
// those workers over all SMs).
//
// Before each timed pass a large GEMM is enqueued so that the host enqueues
// the whole pass while the GPU is busy: the events then time the kernels
// back to back, not the host's launch rate.
//
// On the simulator (Info().Backend "sim") the same code runs on launches
// timed from the estimated profile (Estimate): the result is marked
// Source "estimated" with a "simulated" note, never "measured".
//
// A model with a layer the library cannot run is refused with an error
// naming the layer (wrapping exec.ErrNotRunnable); there are no partial
// profiles. The result passes profiles.Check against the model's ops.
//
// Measure belongs to the goroutine that owns dev.
func Measure(ctx context.Context, dev gpu.Device, lib *kernels.Library, model string, batch int, opt MeasureOptions) (*profiles.Profile, error) {
	if batch < 1 || batch > 1<<20 {
		return nil, fmt.Errorf("%w: batch %d: must be in 1..%d", ErrMeasure, batch, 1<<20)
	}
	m, err := models.Get(model)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
	}
	info := dev.Info()
	spec, err := gpu.LookupSpec(info.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w (profiles name GPUs by gpu.Spec: add one for this GPU)", ErrMeasure, err)
	}
	if opt.Warmup == 0 {
		opt.Warmup = DefaultWarmup
	}
	opt.Warmup = max(opt.Warmup, 0)
	if opt.Runs == 0 {
		opt.Runs = DefaultRuns
	}
	if opt.Runs < 1 {
		return nil, fmt.Errorf("%w: runs %d: need at least 1 timed pass", ErrMeasure, opt.Runs)
	}
	if opt.ScalingRuns <= 0 {
		opt.ScalingRuns = DefaultScalingRuns
	}
	if opt.Date.IsZero() {
		opt.Date = time.Now().UTC()
	}
	g, err := m.Graph(batch)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
	}
	in, err := exec.NewWith(dev, lib, g, models.InitWeights(g, opt.Seed), models.InitInputs(g, opt.Seed+1), exec.Options{Substitute: opt.Substitute})
	if err != nil {
		return nil, fmt.Errorf("%w: %s bs%d: %w", ErrMeasure, m.Name(), batch, err)
	}
	defer in.Close()
	if n := in.Runnable(); n < len(g.Layers) {
		hint := " (the kernel library lacks it; no profile is written for a model that cannot run whole)"
		if !opt.Substitute {
			hint = " (try --substitute / MeasureOptions.Substitute, which binds layers such as the global average pool to an equivalent library kernel)"
		}
		return nil, fmt.Errorf("%w: %w%s", ErrMeasure, in.Err(n), hint)
	}
	simulated := info.Backend == "sim"
	if simulated {
		est, err := Estimate(spec, m.Name(), batch, g.Layers)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
		}
		if err := in.UseProfile(est); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
		}
	}
	mt := &meter{ctx: ctx, dev: dev, lib: lib, in: in, spec: info.Spec, opt: opt, fill: !simulated}
	defer mt.close()
	if err := mt.setup(len(g.Layers)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
	}
	peaks := opt.Peaks
	if peaks == nil {
		if peaks, err = mt.peaks(spec); err != nil {
			return nil, fmt.Errorf("%w: measuring peaks: %w", ErrMeasure, err)
		}
	}
	if !(peaks.FLOPS > 0 && peaks.FP32 > 0 && peaks.Bandwidth > 0) {
		return nil, fmt.Errorf("%w: peaks %+v must be positive", ErrMeasure, *peaks)
	}
	if mt.blockerUs <= 0 {
		if mt.blockerUs, err = mt.timeOne(mt.gemmLaunch); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
		}
	}
	durs, err := mt.passes(g)
	if err != nil {
		return nil, fmt.Errorf("%w: %s bs%d: %w", ErrMeasure, m.Name(), batch, err)
	}
	var graphDurs [][]float64
	if opt.GraphPasses {
		if graphDurs, err = mt.graphPasses(g); err != nil {
			return nil, fmt.Errorf("%w: %s bs%d: %w", ErrMeasure, m.Name(), batch, err)
		}
	}
	subs := map[string]string{}
	for _, s := range in.Substitutions() {
		name, what, _ := strings.Cut(s, ": ")
		subs[name] = what
	}
	shares := scalingShares(opt, spec)
	stage := "scaling"
	if opt.NoScaling {
		stage = "kernels"
	}
	p := &profiles.Profile{
		APIVersion: profiles.APIVersion,
		GPU:        spec.Name,
		Model:      m.Name(),
		Batch:      batch,
		Phase:      m.Phase(),
		Source:     profiles.SourceMeasured,
		Kernels:    make([]profiles.Kernel, len(g.Layers)),
	}
	for i, l := range g.Layers {
		k, err := mt.kernel(i, l, durs[i], peaks, spec, subs[l.Name] != "")
		if err != nil {
			return nil, fmt.Errorf("%w: %s layer %d (%s): %w", ErrMeasure, m.Name(), i, l.Name, err)
		}
		if graphDurs != nil {
			k.GraphUs = round(max(percentile(graphDurs[i], 50), 0.001), 1e3)
		}
		if !opt.NoScaling {
			if k.Scaling, err = mt.scaling(i, shares); err != nil {
				return nil, fmt.Errorf("%w: %s layer %d (%s): scaling: %w", ErrMeasure, m.Name(), i, l.Name, err)
			}
		}
		if opt.partitions() {
			if k.Partition, err = mt.partition(i, spec); err != nil {
				return nil, fmt.Errorf("%w: %s layer %d (%s): on SM partitions: %w", ErrMeasure, m.Name(), i, l.Name, err)
			}
			if n := k.PartitionSMs(); n > 0 && k.HasTag(profiles.TagBLAS) {
				k.SMsNeeded = n // the vendor's grid is not reported; atoll's own kernels keep their grid's figure
			}
		}
		p.Kernels[i] = k
		mt.progress(stage, i+1, len(g.Layers))
	}
	p.Notes = mt.notes(peaks, subs, shares)
	if n, why := mt.lib.BLASOps(); n > 0 || (why != nil && info.Backend == "cuda") {
		note := fmt.Sprintf("%d kernel shapes' plain form ran on %s (tagged %q)", n, mt.lib.BLASName(), profiles.TagBLAS)
		if why != nil {
			note += fmt.Sprintf("; refused or absent for others: %v", why)
		}
		p.Notes["blas"] = note
	}
	p.Device = deviceFacts(info, opt)
	if simulated {
		p.Source = profiles.SourceEstimated
		p.Notes["simulated"] = "made on gpu/sim: every duration is the simulator replaying profiler.Estimate's costs, not a measurement; " +
			"profiles has no \"simulated\" source, so it is marked estimated; never commit it as a measured profile"
	}
	if opt.NCU != nil {
		want, err := expectations(in)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
		}
		if err := ApplyNCU(p, opt.NCU, want, opt.NCUFile); err != nil {
			return nil, err
		}
	}
	if err := profiles.Check(p, models.Ops(g.Layers), spec); err != nil {
		return nil, fmt.Errorf("%w: the profile made does not match the model (a bug): %w", ErrMeasure, err)
	}
	return p, nil
}

// expectations are the instance's plain launches as Nsight Compute sees
// them: the CUDA function (the library names it kernel_plain; a launch's
// Name is kernel/plain), total blocks and threads per block.
func expectations(in *exec.Instance) ([]NCUExpect, error) {
	out := make([]NCUExpect, len(in.Graph().Layers))
	for i := range out {
		l, err := in.Launch(i, gpu.Plain, kernels.Control{})
		if err != nil {
			return nil, err
		}
		out[i] = NCUExpect{Func: strings.Replace(l.Name, "/", "_", 1), Blocks: l.Grid.Count(), Block: l.Block.Count()}
	}
	return out, nil
}

// RunPasses builds a zoo model's instance on dev and runs passes forward
// passes and nothing else: what Nsight Compute should see (NCUCommand).
// Layers the library cannot run are refused as Measure refuses them.
func RunPasses(ctx context.Context, dev gpu.Device, lib *kernels.Library, model string, batch, passes int, substitute bool, seed uint64) error {
	m, err := models.Get(model)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMeasure, err)
	}
	if batch < 1 || batch > 1<<20 {
		return fmt.Errorf("%w: batch %d: must be in 1..%d", ErrMeasure, batch, 1<<20)
	}
	g, err := m.Graph(batch)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMeasure, err)
	}
	in, err := exec.NewWith(dev, lib, g, models.InitWeights(g, seed), models.InitInputs(g, seed+1), exec.Options{Substitute: substitute})
	if err != nil {
		return fmt.Errorf("%w: %s bs%d: %w", ErrMeasure, m.Name(), batch, err)
	}
	defer in.Close()
	for range passes {
		if err := in.Run(ctx); err != nil {
			return fmt.Errorf("%w: %w", ErrMeasure, err)
		}
	}
	return nil
}

// meter holds the device objects of one measurement.
type meter struct {
	ctx  context.Context
	dev  gpu.Device
	lib  *kernels.Library
	in   *exec.Instance
	spec gpu.Spec // the device's limits (occupancy)
	opt  MeasureOptions
	fill bool // fill the peak kernels' inputs with random data (not on the simulator)

	stream gpu.Stream
	parts  map[int]gpu.Stream // a stream per SM partition size (partition)
	events []gpu.Event        // len = launches + 1
	marks  [2]gpu.Event       // graph passes: around two runs (graphPasses)
	words  []gpu.HostWord
	ctr    gpu.Ptr
	allocs []gpu.Ptr

	gemm, add             kernels.Op
	gemmLaunch, addLaunch *gpu.Launch
	blockerUs             float64 // the GEMM's duration, µs
	blockers              int     // GEMMs enqueued before each pass
	hostUs                float64 // host time to enqueue the last pass, µs
	driverAttrs           bool    // registers came from the driver
}

func (mt *meter) progress(stage string, done, total int) {
	if mt.opt.Progress != nil {
		mt.opt.Progress(Progress{Stage: stage, Done: done, Total: total})
	}
}

func (mt *meter) setup(launches int) error {
	var err error
	if mt.stream, err = mt.dev.NewStream(gpu.StreamOptions{Priority: mt.dev.Info().Priorities.Least}); err != nil {
		return fmt.Errorf("NewStream: %w", err)
	}
	mt.events = make([]gpu.Event, launches+1)
	for i := range mt.events {
		if mt.events[i], err = mt.dev.NewEvent(); err != nil {
			return fmt.Errorf("NewEvent: %w", err)
		}
	}
	for i := range mt.marks {
		if mt.marks[i], err = mt.dev.NewEvent(); err != nil {
			return fmt.Errorf("NewEvent: %w", err)
		}
	}
	if mt.words, err = mt.dev.NewHostWords(2); err != nil {
		return fmt.Errorf("NewHostWords: %w", err)
	}
	if mt.ctr, err = mt.alloc(kernels.CounterBytes); err != nil {
		return err
	}
	mt.gemm = kernels.GEMM{M: 8192, N: 8192, K: 8192, In: kernels.BF16, Out: kernels.BF16}
	mt.add = kernels.Elementwise{Name: "add", Elems: 1 << 28, Inputs: 2, Outputs: 1, In: kernels.BF16}
	if mt.gemmLaunch, err = mt.peakLaunch(mt.gemm); err != nil {
		return err
	}
	if mt.addLaunch, err = mt.peakLaunch(mt.add); err != nil {
		return err
	}
	return nil
}

func (mt *meter) alloc(n int64) (gpu.Ptr, error) {
	p, err := mt.dev.Alloc(n)
	if err != nil {
		return 0, fmt.Errorf("Alloc(%d): %w", n, err)
	}
	mt.allocs = append(mt.allocs, p)
	return p, nil
}

// peakLaunch allocates op's operands (inputs random on a GPU: constant data
// draws less power and would flatter the peak) and returns its plain launch.
func (mt *meter) peakLaunch(op kernels.Op) (*gpu.Launch, error) {
	specs, err := kernels.Tensors(op)
	if err != nil {
		return nil, err
	}
	b := kernels.Buffers{T: make([]kernels.Tensor, len(specs))}
	chunk := randomChunk(1<<20, 0x5eed)
	for i, s := range specs {
		p, err := mt.alloc(max(s.Bytes(), 4))
		if err != nil {
			return nil, err
		}
		b.T[i] = kernels.Tensor{TensorSpec: s, Ptr: p}
		if s.Role == kernels.Scratch {
			if err := mt.dev.CopyToDevice(p, make([]byte, s.Bytes())); err != nil {
				return nil, fmt.Errorf("zeroing %s of %s: %w", s.Name, op.Kernel(), err)
			}
			continue
		}
		if mt.fill && s.Role != kernels.Output {
			for off := int64(0); off < s.Bytes(); off += int64(len(chunk)) {
				n := min(int64(len(chunk)), s.Bytes()-off)
				if err := mt.dev.CopyToDevice(p+gpu.Ptr(off), chunk[:n]); err != nil {
					return nil, fmt.Errorf("filling %s of %s: %w", s.Name, op.Kernel(), err)
				}
			}
		}
	}
	return mt.lib.Launch(op, gpu.Plain, b, kernels.Control{})
}

// randomChunk is n bytes of bf16 values uniform-ish in ±[2^-8, 2).
func randomChunk(n int, seed uint64) []byte {
	out := make([]byte, n)
	x := seed
	for i := 0; i+1 < n; i += 2 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		// sign, exponent 119..127, 7 random mantissa bits
		v := uint16(x&0x8000) | uint16(119+x%9)<<7 | uint16(x>>20)&0x7f
		out[i], out[i+1] = byte(v), byte(v>>8)
	}
	return out
}

func (mt *meter) close() {
	for _, p := range mt.allocs {
		_ = mt.dev.Free(p)
	}
	for _, e := range append(mt.events, mt.marks[:]...) {
		if e != 0 {
			_ = mt.dev.DestroyEvent(e)
		}
	}
	if mt.stream != 0 {
		_ = mt.dev.DestroyStream(mt.stream)
	}
}

// wait waits until e has completed.
func (mt *meter) wait(e gpu.Event) error { return waitEvent(mt.ctx, mt.dev, e) }

// waitEvent waits until e has completed on dev, for at most 60 s.
func waitEvent(ctx context.Context, dev gpu.Device, e gpu.Event) error {
	return waitDone(dev, e, func() error { return dev.Wait(ctx, dev.Now()+20*time.Microsecond) })
}

// waitDone polls e until it has completed on dev, calling step between
// polls; it gives up after 60 s of wall time.
func waitDone(dev gpu.Device, e gpu.Event, step func() error) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, err := dev.Query(e)
		if err != nil {
			return fmt.Errorf("Query: %w", err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the device did not finish within 60 s (a kernel hangs?)")
		}
		if err := step(); err != nil {
			return err
		}
	}
}

// between is the device time from event a to event b, both completed.
func (mt *meter) between(a, b gpu.Event) (float64, error) {
	t0, err := mt.dev.Time(a)
	if err != nil {
		return 0, fmt.Errorf("event time: %w", err)
	}
	t1, err := mt.dev.Time(b)
	if err != nil {
		return 0, fmt.Errorf("event time: %w", err)
	}
	return float64(t1-t0) / float64(time.Microsecond), nil
}

// timeOne times one launch between two events, in µs.
func (mt *meter) timeOne(l *gpu.Launch) (float64, error) { return mt.timeOn(mt.stream, nil, l, 1) }

// timeOn times reps launches of l on stream s between two events and
// returns the mean per launch, µs. With a blocker, it is launched first,
// before the first event, so that the host has enqueued every launch of l
// before the first starts (as in a pass).
func (mt *meter) timeOn(s gpu.Stream, blocker, l *gpu.Launch, reps int) (float64, error) {
	e0, e1 := mt.events[0], mt.events[1]
	if blocker != nil {
		if err := mt.dev.Launch(s, blocker); err != nil {
			return 0, fmt.Errorf("launch %s: %w", blocker.Name, err)
		}
	}
	if err := mt.dev.Record(e0, s); err != nil {
		return 0, fmt.Errorf("Record: %w", err)
	}
	for range reps {
		if err := mt.dev.Launch(s, l); err != nil {
			return 0, fmt.Errorf("launch %s: %w", l.Name, err)
		}
	}
	if err := mt.dev.Record(e1, s); err != nil {
		return 0, fmt.Errorf("Record: %w", err)
	}
	if err := mt.wait(e1); err != nil {
		return 0, err
	}
	t, err := mt.between(e0, e1)
	return t / float64(reps), err
}

// medianOf times l warm+reps times and returns the median of the last reps.
func (mt *meter) medianOf(l *gpu.Launch, warm, reps int) (float64, error) {
	var us []float64
	for i := range warm + reps {
		if err := mt.ctx.Err(); err != nil {
			return 0, err
		}
		t, err := mt.timeOne(l)
		if err != nil {
			return 0, err
		}
		if i >= warm {
			us = append(us, t)
		}
	}
	return percentile(us, 50), nil
}

// peaks measures the bf16 GEMM rate and the DRAM rate of a large add.
func (mt *meter) peaks(spec gpu.Spec) (*Peaks, error) {
	mt.progress("peaks", 0, 2)
	g, err := mt.medianOf(mt.gemmLaunch, 3, 10)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", mt.gemm.Kernel(), err)
	}
	mt.blockerUs = g
	mt.progress("peaks", 1, 2)
	a, err := mt.medianOf(mt.addLaunch, 3, 10)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", mt.add.Kernel(), err)
	}
	mt.progress("peaks", 2, 2)
	p := &Peaks{
		FLOPS:     mt.gemm.FLOPs() / (g * 1e-6),
		FP32:      spec.PeakFP32,
		Bandwidth: mt.add.Bytes() / (a * 1e-6),
	}
	p.Method = fmt.Sprintf("measured on this device before the passes, median of 10 after 3 warm-ups: "+
		"bf16 tensor peak %.1f TFLOP/s from %s %s (%.1f us); DRAM %.2f TB/s from %s %s (%.1f us; bytes = inputs read once + output written once); "+
		"fp32 peak %.1f TFLOP/s is the gpu.Spec's (not measured)",
		p.FLOPS/1e12, mt.gemm.Kernel(), mt.gemm.Shape(), g, p.Bandwidth/1e12, mt.add.Kernel(), mt.add.Shape(), a, p.FP32/1e12)
	return p, nil
}

// passes runs the warm-up and timed forward passes and returns each
// layer's durations (µs) over the timed passes.
func (mt *meter) passes(g *models.Graph) ([][]float64, error) {
	n := len(g.Layers)
	ls := make([]*gpu.Launch, n)
	for i := range ls {
		l, err := mt.in.Launch(i, gpu.Plain, kernels.Control{})
		if err != nil {
			return nil, err
		}
		ls[i] = l
	}
	durs := make([][]float64, n)
	total := mt.opt.Warmup + mt.opt.Runs
	// A guess of the host's enqueue time until the first pass measures it.
	mt.hostUs = 10 * float64(n)
	for r := range total {
		if err := mt.ctx.Err(); err != nil {
			return nil, err
		}
		mt.blockers = min(16, max(1, int(math.Ceil(2*mt.hostUs/mt.blockerUs))))
		for range mt.blockers {
			if err := mt.dev.Launch(mt.stream, mt.gemmLaunch); err != nil {
				return nil, fmt.Errorf("launch %s: %w", mt.gemmLaunch.Name, err)
			}
		}
		start := time.Now()
		if mt.opt.WarmPass {
			for i, l := range ls {
				if err := mt.dev.Launch(mt.stream, l); err != nil {
					return nil, fmt.Errorf("layer %d (%s): launch: %w", i, g.Layers[i].Name, err)
				}
			}
		}
		if err := mt.dev.Record(mt.events[0], mt.stream); err != nil {
			return nil, fmt.Errorf("Record: %w", err)
		}
		for i, l := range ls {
			if err := mt.dev.Launch(mt.stream, l); err != nil {
				return nil, fmt.Errorf("layer %d (%s): launch: %w", i, g.Layers[i].Name, err)
			}
			if err := mt.dev.Record(mt.events[i+1], mt.stream); err != nil {
				return nil, fmt.Errorf("Record: %w", err)
			}
		}
		mt.hostUs = float64(time.Since(start)) / float64(time.Microsecond)
		if err := mt.wait(mt.events[n]); err != nil {
			return nil, err
		}
		if r >= mt.opt.Warmup {
			spans, err := mt.spans(n)
			if err != nil {
				return nil, err
			}
			for i, d := range spans {
				durs[i] = append(durs[i], d)
			}
		}
		mt.progress("runs", r+1, total)
	}
	return durs, nil
}

// spans are the n kernel spans of the last pass, kernel i from event i to
// event i+1, in µs.
func (mt *meter) spans(n int) ([]float64, error) {
	out := make([]float64, n)
	for i := range out {
		var err error
		if out[i], err = mt.between(mt.events[i], mt.events[i+1]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// graphPasses times each layer's kernel inside a graph of the whole pass
// (MeasureOptions.GraphPasses) and returns its durations (µs) over the
// timed runs: each run's per-kernel spans between graph events, scaled to
// sum to the pass's time with no events between its kernels.
func (mt *meter) graphPasses(g *models.Graph) ([][]float64, error) {
	gr, ok := mt.dev.(gpu.Grapher)
	if !ok {
		return nil, fmt.Errorf("graph passes: this device does not record graphs")
	}
	// Five runs of the pass: a warm-up, marks[0], two runs, marks[1],
	// one run, events[0], then the run with event i+1 after kernel i.
	n := len(g.Layers)
	steps := make([]gpu.GraphStep, 5*n)
	for r := range 5 {
		for i := range n {
			l, err := mt.in.Launch(i, gpu.Plain, kernels.Control{})
			if err != nil {
				return nil, err
			}
			steps[r*n+i].Launch = l
		}
	}
	steps[n-1].Event, steps[3*n-1].Event, steps[4*n-1].Event = mt.marks[0], mt.marks[1], mt.events[0]
	for i := range n {
		steps[4*n+i].Event = mt.events[i+1]
	}
	graph, err := gr.NewGraph(mt.stream, steps)
	if err != nil {
		return nil, fmt.Errorf("graph of the pass: %w", err)
	}
	defer gr.DestroyGraph(graph)
	total := mt.opt.Warmup + mt.opt.Runs
	durs := make([][]float64, n)
	for r := range total {
		if err := mt.ctx.Err(); err != nil {
			return nil, err
		}
		if err := gr.LaunchGraph(graph, mt.stream); err != nil {
			return nil, fmt.Errorf("LaunchGraph: %w", err)
		}
		if err := mt.wait(mt.events[n]); err != nil {
			return nil, err
		}
		if r < mt.opt.Warmup {
			continue
		}
		two, err := mt.between(mt.marks[0], mt.marks[1])
		if err != nil {
			return nil, err
		}
		one, err := mt.between(mt.marks[1], mt.events[0])
		if err != nil {
			return nil, err
		}
		spans, err := mt.spans(n)
		if err != nil {
			return nil, err
		}
		var sum float64
		for _, d := range spans {
			sum += d
		}
		scale := (two - one) / sum
		if !(scale > 0) || math.IsInf(scale, 0) {
			return nil, fmt.Errorf("graph passes: run %d: a pass took %.3f µs with no events inside it and %.3f µs with one after every kernel", r, two-one, sum)
		}
		for i, d := range spans {
			durs[i] = append(durs[i], d*scale)
		}
		mt.progress("graph runs", r+1, total)
	}
	return durs, nil
}

// kernel fills layer i's record from its durations.
func (mt *meter) kernel(i int, l models.Layer, durs []float64, peaks *Peaks, spec gpu.Spec, substituted bool) (profiles.Kernel, error) {
	op := l.Op
	g := op.Geometry()
	regs, smem := g.Registers, g.SharedMem
	if !substituted {
		f, err := mt.lib.Func(mt.in.Op(i), gpu.Plain)
		if err != nil {
			return profiles.Kernel{}, err
		}
		if fa, ok := mt.dev.(funcAttributer); ok {
			r, static, _, err := fa.FuncAttributes(f)
			if err != nil {
				return profiles.Kernel{}, fmt.Errorf("FuncAttributes: %w", err)
			}
			if r > 0 {
				regs, smem = r, static+g.SharedMem
				mt.driverAttrs = true
			}
		}
	}
	med := percentile(durs, 50)
	if !(med > 0) {
		// Below the events' resolution: record the resolution, not zero.
		med = 0.001
	}
	threads := g.Block.Count()
	perSM, _, err := mt.spec.Occupancy(threads, regs, smem)
	if err != nil {
		return profiles.Kernel{}, err
	}
	k := profiles.Kernel{
		Name:       l.Name,
		Kernel:     op.Kernel(),
		Shape:      op.Shape(),
		Grid:       [3]int{g.Grid.X, max(g.Grid.Y, 1), max(g.Grid.Z, 1)},
		Block:      [3]int{g.Block.X, max(g.Block.Y, 1), max(g.Block.Z, 1)},
		Registers:  regs,
		SharedMem:  smem,
		DurationUs: round(med, 1e3),
		SpreadUs:   round(percentile(durs, 90)-percentile(durs, 10), 1e3),
		FLOPs:      op.FLOPs(),
		Bytes:      op.Bytes(),
		SMsNeeded:  min(max(spec.SMsNeeded(g.Grid.Count(), perSM), 1), spec.SMs),
	}
	peak := peaks.FP32
	if tensorOp(op) {
		peak = peaks.FLOPS
	}
	k.ComputePct = min(round(100*k.FLOPs/(med*1e-6)/peak, 100), 100)
	k.MemoryPct = min(round(100*k.Bytes/(med*1e-6)/peaks.Bandwidth, 100), 100)
	k.Class = Classify(k.ComputePct, k.MemoryPct)
	if substituted {
		k.Tags = []string{"substituted"}
	}
	if l.InPlace() {
		k.Tags = append(k.Tags, profiles.TagInPlace)
	}
	if ln, err := mt.in.Launch(i, gpu.Plain, kernels.Control{}); err == nil && kernels.IsBLAS(ln) {
		k.Tags = append(k.Tags, profiles.TagBLAS)
		if kernels.BLASConv(op) {
			k.Tags = append(k.Tags, profiles.TagBLASConv)
		}
	}
	return k, nil
}

// scaling times layer i's Resumable form with share × blocks-per-SM
// workers for each share.
func (mt *meter) scaling(i int, shares []int) ([]profiles.Point, error) {
	op := mt.in.Op(i)
	f, err := mt.lib.Func(op, gpu.Resumable)
	if err != nil {
		return nil, err
	}
	geo := op.Geometry()
	regs, smem := geo.Registers, geo.SharedMem
	if fa, ok := mt.dev.(funcAttributer); ok {
		if r, static, _, err := fa.FuncAttributes(f); err == nil && r > 0 {
			regs, smem = r, static+geo.SharedMem
		}
	}
	perSM, _, err := mt.spec.Occupancy(geo.Block.Count(), regs, smem)
	if err != nil {
		return nil, err
	}
	flag, done := mt.words[0], mt.words[1]
	mt.dev.Store(flag, 0)
	var out []profiles.Point
	lastGrid, lastUs := -1, 0.0
	for _, s := range shares {
		ctl := kernels.Control{Flag: flag, Counter: mt.ctr, Done: done, Workers: s * perSM}
		l, err := mt.in.Launch(i, gpu.Resumable, ctl)
		if err != nil {
			return nil, err
		}
		if l.Grid.Count() == lastGrid { // as many workers as at the last share: same launch
			out = append(out, profiles.Point{SMs: s, DurationUs: lastUs})
			continue
		}
		var us []float64
		for r := range 1 + mt.opt.ScalingRuns {
			if err := mt.ctx.Err(); err != nil {
				return nil, err
			}
			if err := mt.dev.Memset32(mt.stream, mt.ctr, 0, kernels.CounterBytes/4); err != nil {
				return nil, fmt.Errorf("Memset32: %w", err)
			}
			mt.dev.Store(done, 0)
			t, err := mt.timeOne(l)
			if err != nil {
				return nil, err
			}
			if v := mt.dev.Load(done); v != 1 {
				return nil, fmt.Errorf("resumable %s with %d workers ran with the flag lowered but did not finish (done word %d)", op.Kernel(), l.Grid.Count(), v)
			}
			if r > 0 {
				us = append(us, t)
			}
		}
		lastGrid, lastUs = l.Grid.Count(), round(max(percentile(us, 50), 0.001), 1e3)
		out = append(out, profiles.Point{SMs: s, DurationUs: lastUs})
	}
	return out, nil
}

// PartitionSMs are the SM partition sizes (green contexts, rounded down to
// what the GPU can make) on which Measure times each kernel's plain launch:
// how long it takes on k SMs, and for a vendor-library kernel, whose grid
// the driver does not report, the SMs it needs.
var PartitionSMs = []int{8, 16, 32, 64, 96}

// partition times layer i's plain launch on a stream of an SM partition of
// each size in PartitionSMs, then on the whole GPU (the primary context's
// stream), median of ScalingRuns after 1 warm-up each.
func (mt *meter) partition(i int, spec gpu.Spec) ([]profiles.Point, error) {
	l, err := mt.in.Launch(i, gpu.Plain, kernels.Control{})
	if err != nil {
		return nil, err
	}
	var out []profiles.Point
	for _, n := range append(partitionSizes(spec), spec.SMs) {
		s := mt.stream
		if n < spec.SMs {
			if s, err = mt.partitionStream(n); err != nil {
				return nil, err
			}
		}
		var us []float64
		for r := range 1 + mt.opt.ScalingRuns {
			if err := mt.ctx.Err(); err != nil {
				return nil, err
			}
			t, err := mt.timeOn(s, mt.gemmLaunch, l, partitionReps)
			if err != nil {
				return nil, fmt.Errorf("%d SMs: %w", n, err)
			}
			if r > 0 {
				us = append(us, t)
			}
		}
		out = append(out, profiles.Point{SMs: n, DurationUs: round(max(percentile(us, 50), 0.001), 1e3)})
	}
	return out, nil
}

// partitionReps is how many launches back to back partition times at once:
// a vendor kernel of a few microseconds timed alone between two events
// would mostly time the launch.
const partitionReps = 5

// partitionSizes are PartitionSMs as spec can make them, without repeats.
func partitionSizes(spec gpu.Spec) []int {
	var out []int
	for _, n := range PartitionSMs {
		if n = gpu.PartitionFloor(spec, n); n > 0 && gpu.CheckPartition(spec, n) == nil && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// partitionStream is a stream of the SM partition of n SMs, made once.
func (mt *meter) partitionStream(n int) (gpu.Stream, error) {
	if s, ok := mt.parts[n]; ok {
		return s, nil
	}
	cx, err := mt.dev.NewPartition(n)
	if err != nil {
		return 0, fmt.Errorf("NewPartition(%d): %w", n, err)
	}
	s, err := mt.dev.NewStream(gpu.StreamOptions{Context: cx})
	if err != nil {
		return 0, fmt.Errorf("NewStream (partition of %d SMs): %w", n, err)
	}
	if mt.parts == nil {
		mt.parts = map[int]gpu.Stream{}
	}
	mt.parts[n] = s
	return s, nil
}

// partitions reports whether the kernels are timed on SM partitions.
func (o MeasureOptions) partitions() bool { return !o.NoScaling && !o.NoPartition }

func scalingShares(opt MeasureOptions, spec gpu.Spec) []int {
	src := opt.Scaling
	if src == nil {
		src = MeasureScalingSMs
	}
	var out []int
	for _, n := range src {
		if n >= 1 && n < spec.SMs && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return append(out, spec.SMs)
}

func (mt *meter) notes(peaks *Peaks, subs map[string]string, shares []int) map[string]string {
	blocker := fmt.Sprintf("before each pass %d x %s %s keeps the GPU busy while the host enqueues the pass (so launch gaps are not timed)", mt.blockers, mt.gemm.Kernel(), mt.gemm.Shape())
	if mt.opt.WarmPass {
		blocker += "; an untimed run of the same pass right after them and before the timed one, so every kernel finds L2 as the model's previous pass left it (as when the model runs alone back to back)"
	} else {
		blocker += "; L2 is cold at the first kernel"
	}
	n := map[string]string{
		"method": fmt.Sprintf("%d warm-up then %d timed forward passes on one least-priority stream; an event before the first launch and after every launch, "+
			"kernel i = event i+1 - event i (includes the event record between launches: 2.67 µs more GPU time per kernel than in a graph, gpu/cuda TestGPUProfileGap); %s",
			mt.opt.Warmup, mt.opt.Runs, blocker),
		"durationUs": fmt.Sprintf("median of %d timed passes", mt.opt.Runs),
		"spreadUs":   "p90 - p10 of the timed passes",
		"peaks":      peaks.Method,
		"percent":    "computePct = flops / duration over the bf16 tensor peak (GEMM, conv) or the fp32 peak (other ops); memoryPct = bytes / duration over the DRAM peak; both capped at 100 (L2-resident data can exceed DRAM rates)",
		"class":      "profiler.Classify: compute if computePct >= 60 and > memoryPct; memory if memoryPct >= 60; else unknown",
		"smsNeeded":  "ceil(grid blocks / blocks per SM), blocks per SM from gpu.Spec.Occupancy with the registers and shared memory recorded; for kernels tagged blas, from the partition points where measured (see partition)",
		"date":       mt.opt.Date.UTC().Format(time.RFC3339),
	}
	if mt.opt.GraphPasses {
		n["graphUs"] = fmt.Sprintf("median of %d timed runs, after %d warm-ups, of one graph (as the scheduler submits an HP request, no blocker) that runs the pass five times back to back: "+
			"a warm-up; two runs between events A and B and one between B and C, so B-A less C-B is the pass with no events inside it; "+
			"then a run with an event after every kernel, whose spans share that time out (each kernel's span scaled by the pass's time over their sum)", mt.opt.Runs, mt.opt.Warmup)
	}
	if mt.driverAttrs {
		n["registers"] = "registers and static shared memory from the driver (cuFuncGetAttribute) for the plain form; sharedMem adds the launch's dynamic shared memory"
	} else {
		n["registers"] = "the device reports no function attributes: registers and shared memory are the ops' geometry estimates"
	}
	if mt.opt.Command != "" {
		n["command"] = mt.opt.Command
	}
	if mt.opt.NoScaling {
		n["scaling"] = "not measured (--no-scaling)"
	} else {
		n["scaling"] = fmt.Sprintf("at %v SMs: the kernel's resumable form (what padding launches) with share x blocks-per-SM persistent workers, median of %d after 1 warm-up. "+
			"This approximates an SM share: the hardware spreads the workers over all SMs, so a memory-bound kernel may see more bandwidth than its share would have",
			shares, mt.opt.ScalingRuns)
	}
	if mt.opt.partitions() {
		n["partition"] = fmt.Sprintf("every kernel: the plain launch on a stream of an SM partition (green context) of %v SMs, then on the whole GPU: %d launches back to back behind a blocker GEMM, their mean; median of %d after 1 warm-up; "+
			"kernels tagged %q take their smsNeeded from it: the smallest partition on which they run within %.0f%% of the whole GPU's time (the vendor's grid is not reported)",
			partitionSizes(mt.spec), partitionReps, mt.opt.ScalingRuns, profiles.TagBLAS, 100*(profiles.PartitionSlack-1))
	} else {
		n["partition"] = "not measured (--no-scaling or --no-partition)"
	}
	if len(subs) > 0 {
		var s []string
		for name, what := range subs {
			s = append(s, name+" -> "+what)
		}
		sort.Strings(s)
		n["substitutions"] = "launched as an equivalent library kernel (--substitute); their rows keep the model's op (kernel, shape, geometry) with the substitute's duration: " + strings.Join(s, "; ")
	}
	return n
}

// deviceFacts describes the device: name, driver, clocks seen (NVML).
func deviceFacts(info gpu.Info, opt MeasureOptions) string {
	s := fmt.Sprintf("%s; %s", info.Name, info.Driver)
	if info.Backend != "cuda" {
		return s
	}
	inv, err := cuda.Inventory()
	if err != nil {
		return s + "; NVML unavailable: " + err.Error()
	}
	for _, d := range inv {
		if d.Index == opt.Ordinal {
			return s + fmt.Sprintf("; display driver %s; after the passes: SM clock %d of %d MHz, memory clock %d of %d MHz, %.0f of %.0f W, %d C (NVML)",
				d.Driver, d.SMClock, d.SMClockMax, d.MemClock, d.MemClockMax, d.PowerDraw, d.PowerLimit, d.Temperature)
		}
	}
	return s + fmt.Sprintf("; NVML lists no GPU %d", opt.Ordinal)
}

// percentile of v (not modified) by linear interpolation; 0 for none.
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	x := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(x))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (x-float64(lo))*(s[hi]-s[lo])
}
