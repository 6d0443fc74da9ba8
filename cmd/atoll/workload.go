package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"atoll/bench"
	"atoll/gpu"
	"atoll/gpu/backend"
	"atoll/gpu/sim"
	"atoll/models"
	"atoll/profiler"
	"atoll/profiles"
	"atoll/sched"
)

// workloadFlags are the flags shared by demo and bench: what runs and on
// which device.
type workloadFlags struct {
	gpuName  string
	hp       string
	hpBatch  int
	be       string
	beBatch  int
	arrival  string
	sigma    float64
	trace    string
	load     float64
	seed     uint64
	duration time.Duration
	warmup   time.Duration
	backend  string
	quiet    bool
	simFlags
	order    string
	graphs   bool
	beGraphs bool
	hpEvents bool
	spans    bool
	streams  int
	maxBatch int
}

func (w *workloadFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&w.gpuName, "gpu", "", "GPU whose profiles to use and (on the simulator) to simulate: "+strings.Join(profiledGPUs(), ", ")+" (default: H100-SXM on the simulator; on --backend cuda the GPU found)")
	fs.StringVar(&w.hp, "hp", "resnet50", "HP (latency-critical) model, an inference profile; see 'atoll models'")
	fs.IntVar(&w.hpBatch, "hp-batch", 1, "HP batch size")
	fs.StringVar(&w.be, "be", "resnet50-train", "BE (best-effort) model, run closed-loop; \"none\" for HP only")
	fs.IntVar(&w.beBatch, "be-batch", 32, "BE batch size")
	fs.StringVar(&w.arrival, "arrival", bench.Poisson, "HP arrival process: "+strings.Join(bench.ArrivalNames, ", ")+" (trace needs --trace)")
	fs.Float64Var(&w.sigma, "sigma", 1, "shape of the lognormal arrival process (burstiness)")
	fs.StringVar(&w.trace, "trace", "", "file of HP arrival times, one per line (\"1.5ms\" or microseconds)")
	fs.Float64Var(&w.load, "load", 0.5, "offered HP load: rate × HP solo latency (0.5 keeps the GPU half busy with HP alone)")
	fs.Uint64Var(&w.seed, "seed", 1, "seed of the arrival process and the simulator")
	fs.DurationVar(&w.duration, "duration", 5*time.Second, "measured span of each run (device time)")
	fs.DurationVar(&w.warmup, "warmup", 500*time.Millisecond, "span before the measured one whose requests are discarded")
	fs.StringVar(&w.backend, "backend", "sim", "device: sim (the simulated GPU, any profiles) or cuda (the real GPU, measured profiles of it; models the kernel library can run)")
	fs.BoolVar(&w.quiet, "quiet", false, "no progress lines on stderr")
	w.simFlags.register(fs)
	fs.StringVar(&w.order, "launch-order", "hp-first", launchOrderHelp)
	fs.BoolVar(&w.graphs, "hp-graphs", true, hpGraphsHelp)
	fs.BoolVar(&w.beGraphs, "be-graphs", true, beGraphsHelp)
	fs.BoolVar(&w.hpEvents, "hp-kernel-events", false, hpKernelEventsHelp)
	fs.BoolVar(&w.spans, "hp-kernel-spans", false, hpKernelSpansHelp)
	fs.IntVar(&w.streams, "hp-streams", 1, hpStreamsHelp)
	fs.IntVar(&w.maxBatch, "hp-max-batch", 1, hpMaxBatchHelp)
}

const hpMaxBatchHelp = "serve the HP requests waiting when the model's stream empties together, in one pass of the largest batch of 2, 4, 8, ... up to this many requests that does not exceed them (a queue is then served faster than one request after another; each size needs the model's profile at that batch, 'atoll profile --model M --batch B'; 1: one request per pass)"

const hpStreamsHelp = "serve HP with this many clients of the model, each its own stream and buffers (on a GPU, its own copy of the model's activations and weights), each arrival going to the one with the fewest requests unfinished: up to this many requests run at once (1: one after another; more raises the rate HP alone sustains where one request leaves the GPU partly idle, and lowers it where one request fills the GPU — measure per model, docs/kernels.md — at the memory of a copy each)"

const hpKernelSpansHelp = "list in the report each HP kernel's mean and median device span over the measured requests beside its solo time (hpKernels; 'atoll compare' tabulates them, e.g. a GPU run beside its simulated replay): which kernels a request's time went to; with --hp-kernel-events each kernel its own, otherwise each chunk of the request's graph as one"

const hpKernelEventsHelp = "record an event after every kernel of an HP request's graph, so the scheduler sees each HP kernel complete (per-kernel timing and attribution); by default a graph records one event per chunk of its kernels (up to 50 µs of profiled work together), which costs the host far less per request (each recorded event adds about a quarter of a launch to the graph's launch call)"

const beGraphsHelp = "submit each chunk of a BE iteration launched whole (consecutive kernels of up to 50 µs profiled work together) as one recorded graph with one event: one host call and one poll per chunk instead of per kernel (a CUDA graph on the GPU); false launches BE kernel by kernel"

const hpGraphsHelp = "submit each HP request launched whole (kernels all at once, none padded) as one recorded graph: one host call per request instead of one per kernel (a CUDA graph on the GPU); false launches kernel by kernel"

// simFlags are the simulator's measured parameters as --sim-* flags
// (bench, demo and matrix take them): each defaults to sim.Defaults'
// figure and overrides it.
type simFlags struct {
	hostCost                                            launchCosts
	queryCost, completion, decide, eventCost, gap, wake time.Duration
	notice, kernelGap                                   gpuFigure
	corun                                               coRunFlag
	graphKeep                                           offFlag // --sim-graph-yield=false
}

func (f *simFlags) register(fs *flag.FlagSet) {
	f.hostCost = defaultSimLaunchCost
	fs.Var(&f.hostCost, "sim-launch-cost", simLaunchCostHelp)
	fs.DurationVar(&f.queryCost, "sim-query-cost", defaultSimQueryCost, simQueryCostHelp)
	fs.DurationVar(&f.completion, "sim-completion-cost", defaultSimCompletionCost, simCompletionCostHelp)
	fs.DurationVar(&f.decide, "sim-decide-cost", defaultSimDecideCost, simDecideCostHelp)
	fs.DurationVar(&f.eventCost, "sim-event-cost", defaultSimEventCost, simEventCostHelp)
	fs.DurationVar(&f.gap, "sim-profile-gap", defaultSimProfileGap, simProfileGapHelp)
	f.kernelGap = measuredTurn
	fs.Var(&f.kernelGap, "sim-kernel-gap", simKernelGapHelp)
	f.notice = measuredNotice
	fs.Var(&f.notice, "sim-notice", simNoticeHelp)
	fs.DurationVar(&f.wake, "sim-wake", defaultSimWake, simWakeHelp)
	f.corun = measuredCoRun
	fs.Var(&f.corun, "sim-corun", simCoRunHelp)
	fs.Var(&f.graphKeep, "sim-graph-yield", simGraphYieldHelp)
}

// config is the simulator of spec as the flags set it: sim.Defaults with
// each flag's value.
func (f *simFlags) config(spec gpu.Spec, seed uint64) sim.Config {
	sc := sim.Defaults(spec, seed)
	sc.HostQueryCost, sc.HostDecideCost, sc.EventCost, sc.ProfileGap, sc.NoticeLatency, sc.WakeLatency = f.queryCost, f.decide, f.eventCost, f.gap, f.notice.value(spec.Name), f.wake
	sc.HostCompletionCost, sc.KernelGap, sc.GraphYield = f.completion, f.kernelGap.value(spec.Name), !bool(f.graphKeep)
	sc.CoRunDevice, sc.CoRunSM, sc.CoRunMemory = f.corun.values(spec.Name)
	f.hostCost.apply(&sc)
	return sc
}

// onGPU refuses a flag set to something other than its default, on
// purpose, for a run on the GPU, where the hardware has its own figures.
func (f *simFlags) onGPU() error {
	set := func(d, def time.Duration) bool { return d != 0 && d != def }
	for _, c := range []struct {
		set        bool
		flag, what string
	}{
		{f.corun != (coRunFlag{}) && f.corun != measuredCoRun, "--sim-corun", "kernels slow each other as they do (atoll corun measures it)"},
		{f.hostCost != (launchCosts{}) && f.hostCost != defaultSimLaunchCost, "--sim-launch-cost", "launches cost what they cost (reports show hostUsPerLaunch)"},
		{set(f.queryCost, defaultSimQueryCost), "--sim-query-cost", "polls cost what they cost (reports show hostPerLaunch)"},
		{set(f.completion, defaultSimCompletionCost), "--sim-completion-cost", "completions cost the host what they cost (gpu/cuda TestGPUCompletionCost measures it)"},
		{set(f.decide, defaultSimDecideCost), "--sim-decide-cost", "decisions cost the host what they cost (reports show hostPerLaunch decideUs)"},
		{set(f.eventCost, defaultSimEventCost), "--sim-event-cost", "events cost the GPU what they cost (results/hpevents-h200 measures it)"},
		{set(f.gap, defaultSimProfileGap), "--sim-profile-gap", "kernels in graphs run as they do (gpu/cuda TestGPUProfileGap measures it)"},
		{f.kernelGap.given(), "--sim-kernel-gap", "kernels follow each other as they do (gpu/cuda TestGPUBEGraphsBesideHP measures it)"},
		{bool(f.graphKeep), "--sim-graph-yield", "graphs run beside other work as they do (atoll corun --be-graphs measures it)"},
		{set(f.wake, defaultSimWake), "--sim-wake", "the host wakes when it does (gpu/cuda TestGPUWaitLateness measures it)"},
		{f.notice.given(), "--sim-notice", "the host sees completions when it does (tools/gpu/launchpath.sh measures it)"},
	} {
		if c.set {
			return fmt.Errorf("%s is a simulator parameter; on --backend cuda %s", c.flag, c.what)
		}
	}
	return nil
}

// offFlag is a boolean flag that is on by default, stored as whether it
// was turned off (so that a zero value means the default): --NAME=false
// sets it.
type offFlag bool

func (f *offFlag) String() string   { return strconv.FormatBool(f == nil || !bool(*f)) }
func (f *offFlag) IsBoolFlag() bool { return true }

func (f *offFlag) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q: want true or false", s)
	}
	*f = offFlag(!on)
	return nil
}

// launchCosts is the simulator's host time per launch of an own kernel,
// a vendor product and a convolution (--sim-launch-cost: one duration for
// all three, or three).
type launchCosts struct{ kernel, matmul, conv time.Duration }

// defaultSimLaunchCost is the measured figures (sim.MeasuredHostLaunchCost
// and its kin).
var defaultSimLaunchCost = launchCosts{sim.MeasuredHostLaunchCost, sim.MeasuredHostMatmulCost, sim.MeasuredHostConvCost}

// apply sets sc's host launch costs.
func (c launchCosts) apply(sc *sim.Config) {
	sc.HostLaunchCost, sc.HostMatmulCost, sc.HostConvCost = c.kernel, c.matmul, c.conv
}

func (c *launchCosts) String() string {
	if c.kernel == c.matmul && c.matmul == c.conv {
		return c.kernel.String()
	}
	return fmt.Sprintf("%v,%v,%v", c.kernel, c.matmul, c.conv)
}

func (c *launchCosts) Set(s string) error {
	parts := strings.Split(s, ",")
	if len(parts) != 1 && len(parts) != 3 {
		return fmt.Errorf("%q: want one duration (every launch) or three, KERNEL,MATMUL,CONV (e.g. 8us,11us,17us)", s)
	}
	var ds [3]time.Duration
	for i, p := range parts {
		d, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil {
			return fmt.Errorf("%q: %w", p, err)
		}
		if d < 0 {
			return fmt.Errorf("%q: a host time must be 0 or more", p)
		}
		ds[i] = d
	}
	if len(parts) == 1 {
		ds[1], ds[2] = ds[0], ds[0]
	}
	*c = launchCosts{ds[0], ds[1], ds[2]}
	return nil
}

// gpuFigure is a simulator flag whose default is measured on each GPU:
// "measured" (the default: the figure of the simulated GPU, of) or a
// duration. --sim-notice (sim.MeasuredNotice; results/launchpath-h100,
// launchpath-h200) and --sim-kernel-gap (sim.MeasuredTurn;
// results/begraphs-h100, begraphs-h200) are ones.
type gpuFigure struct {
	measured bool
	d        time.Duration
	of       func(gpuName string) time.Duration
}

// measuredNotice and measuredTurn are --sim-notice and --sim-kernel-gap
// measured.
var (
	measuredNotice = gpuFigure{measured: true, of: sim.MeasuredNotice}
	measuredTurn   = gpuFigure{measured: true, of: sim.MeasuredTurn}
)

func (f *gpuFigure) value(gpuName string) time.Duration {
	if f.measured {
		return f.of(gpuName)
	}
	return f.d
}

// given reports whether the flag was set to a duration other than 0.
func (f *gpuFigure) given() bool { return !f.measured && f.d != 0 }

func (f *gpuFigure) String() string {
	if f.measured {
		return "measured"
	}
	return f.d.String()
}

func (f *gpuFigure) Set(v string) error {
	if v == "measured" {
		f.measured, f.d = true, 0
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("want measured or a duration of 0 or more (%v on an H200, %v on other GPUs)", f.of(gpu.H200.Name), f.of(gpu.H100SXM.Name))
	}
	f.measured, f.d = false, d
	return nil
}

// coRunFlag is --sim-corun: the simulator's co-run interference
// (sim.Config.CoRunDevice, CoRunSM, CoRunMemory): "off" (the zero value),
// "measured" (sim.MeasuredCoRun of the simulated GPU; the default of
// bench, demo and matrix) or "DEVICE,SM[,MEMORY]".
type coRunFlag struct {
	measured          bool
	device, onSM, mem float64
}

// measuredCoRun is --sim-corun measured.
var measuredCoRun = coRunFlag{measured: true}

// values are the weights on the simulated GPU gpuName.
func (f *coRunFlag) values(gpuName string) (device, onSM, mem float64) {
	if f.measured {
		return sim.MeasuredCoRun(gpuName)
	}
	return f.device, f.onSM, f.mem
}

func (f *coRunFlag) String() string {
	switch {
	case f.measured:
		return "measured"
	case f.device == 0 && f.onSM == 0 && f.mem == 0:
		return "off"
	}
	return strconv.FormatFloat(f.device, 'g', -1, 64) + "," + strconv.FormatFloat(f.onSM, 'g', -1, 64) + "," + strconv.FormatFloat(f.mem, 'g', -1, 64)
}

func (f *coRunFlag) Set(v string) error {
	switch v {
	case "off":
		*f = coRunFlag{}
		return nil
	case "measured":
		*f = measuredCoRun
		return nil
	}
	parts := strings.Split(v, ",")
	var w [3]float64
	ok := len(parts) == 2 || len(parts) == 3
	for i := 0; ok && i < len(parts); i++ {
		x, err := strconv.ParseFloat(strings.TrimSpace(parts[i]), 64)
		ok = err == nil && x >= 0 && x <= 10
		w[i] = x
	}
	if !ok {
		d, s, m := sim.MeasuredCoRun(gpu.H200.Name)
		hd, hs, hm := sim.MeasuredCoRun(gpu.H100SXM.Name)
		return fmt.Errorf("want off, measured (%g,%g,%g on an H200, %g,%g,%g on other GPUs) or DEVICE,SM[,MEMORY]: numbers in [0, 10]",
			d, s, m, hd, hs, hm)
	}
	*f = coRunFlag{device: w[0], onSM: w[1], mem: w[2]}
	return nil
}

const simCoRunHelp = "simulator: co-run interference — measured (fitted to atoll corun on the simulated GPU: an H200's figures on an H200, an H100's on others), off, or DEVICE,SM[,MEMORY]: a block's rate is divided by 1 + DEVICE (while other kernels' blocks run anywhere on the device) + SM × (share of its SM's warp slots other kernels hold) + MEMORY × (share of the DRAM bandwidth other kernels move)⁴ (docs/simulator.md, \"Co-run interference\")"

// defaultSimEventCost is the measured figure (sim.MeasuredEventCost).
const defaultSimEventCost = sim.MeasuredEventCost

const simEventCostHelp = "simulator: GPU time each recorded event holds its stream; a kernel launched on its own runs that much less than its profiled duration, which holds its record (the default is measured, docs/simulator.md; 0 turns it off)"

// defaultSimProfileGap is the measured figure (sim.MeasuredProfileGap).
const defaultSimProfileGap = sim.MeasuredProfileGap

const simProfileGapHelp = "simulator: what a profiled kernel duration holds beyond the kernel when it runs inside a graph (the profiler's launch and event record of each kernel); a kernel in a graph runs that much less, its graph's events hold the stream --sim-event-cost each, so a request as a graph runs faster than its profiled sum, as on the GPU (the default is measured, docs/simulator.md; 0: only the record, --sim-event-cost)"

const simGraphYieldHelp = "simulator: on by default, a graph's kernel keeps the speed it has inside a graph (its profile's graphUs) only while no more urgent stream's blocks run; beside them it runs at the rate of its time launched on its own, as BE's graphs do beside HP on an H200 (results/corun-h200 s31h; docs/simulator.md, \"A graph beside more urgent work\"); =false keeps the graph's speed throughout"

const simKernelGapHelp = "simulator: GPU time a stream holds after each kernel before its next op (the turn between dependent kernels); the kernel's SMs are free meanwhile, so a lower-priority stream's pending blocks take them before the next kernel can; taken off profiled durations, so a pass alone takes as long: measured (on the simulated GPU: 0.9µs on an H200, 1.2µs on others; docs/simulator.md) or a duration; 0 turns it off"

// defaultSimWake is the measured figure (sim.MeasuredWakeLatency).
const defaultSimWake = sim.MeasuredWakeLatency

const simWakeHelp = "simulator: how late the host's wait loop sees a deadline it waited for (an HP arrival, the next quantum): it polls in rounds (the default is measured, docs/simulator.md; 0 turns it off)"

// defaultSimQueryCost is the measured figure (sim.MeasuredHostQueryCost).
const defaultSimQueryCost = sim.MeasuredHostQueryCost

const simQueryCostHelp = "simulator: host time each event poll takes (the GPU runs meanwhile; the default is measured, docs/simulator.md; the GPU reports' hostPerLaunch pollUs / queries is a run's figure; 0 turns it off)"

// defaultSimCompletionCost is the measured figure (sim.MeasuredHostCompletionCost).
const defaultSimCompletionCost = sim.MeasuredHostCompletionCost

const simCompletionCostHelp = "simulator: host time a kernel launched on its own costs when its completion is first seen, beyond the poll (the query that finds its event complete and the reading of its time; a graph's events cost the poll only; the default is measured, docs/simulator.md; 0 turns it off)"

// defaultSimDecideCost is the measured figure (sim.MeasuredHostDecideCost).
const defaultSimDecideCost = sim.MeasuredHostDecideCost

const simDecideCostHelp = "simulator: host time of each launch decision of the scheduler's core and policy, spent before the launches go (a request of n kernels waits n of them; the default is measured, docs/simulator.md; the GPU reports' hostPerLaunch decideUs is a run's figure; 0 turns it off)"

const simNoticeHelp = "simulator: time from a kernel's completion until the host sees it and may launch what it frees (the host's whole reaction): measured (on the simulated GPU's host, docs/simulator.md) or a duration; 0 turns it off"

const launchOrderHelp = "how each scheduler round sends its launches: hp-first (its HP launches before its BE launches, which also stop for an HP arrival that comes due meanwhile) or decision (in the order decided, as builds before hp-first did; to measure the difference or re-run their series)"

const simLaunchCostHelp = "simulator: host time each launch takes, one duration for every launch or KERNEL,MATMUL,CONV for an own kernel, a cuBLASLt product and a convolution (the GPU runs meanwhile; models one host thread launching for every client; the defaults are measured, docs/simulator.md, and the GPU reports' hostUsPerLaunch is the figure of a run; 0 turns it off)"

// config resolves the flags into a bench configuration.
func (w *workloadFlags) config() (*bench.Config, error) {
	if err := w.resolveGPU(); err != nil {
		return nil, err
	}
	spec, err := gpu.LookupSpec(w.gpuName)
	if err != nil {
		return nil, err
	}
	hp, err := profileFor(spec, w.hp, w.hpBatch)
	if err != nil {
		return nil, fmt.Errorf("HP model: %w", err)
	}
	if hp.Phase != profiles.PhaseInference {
		return nil, fmt.Errorf("HP model %q is a %s profile; HP clients serve inference (try %q)", w.hp, hp.Phase, strings.TrimSuffix(w.hp, "-train"))
	}
	c := &bench.Config{
		HP: hp, Arrival: w.arrival, Sigma: w.sigma, Load: w.load, Seed: w.seed,
		Duration: w.duration, Warmup: w.warmup,
		Command: "atoll " + strings.Join(os.Args[1:], " "),
	}
	if w.be != "" && w.be != "none" {
		if c.BE, err = profileFor(spec, w.be, w.beBatch); err != nil {
			return nil, fmt.Errorf("BE model: %w", err)
		}
	}
	if w.trace != "" {
		f, err := os.Open(w.trace)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if c.Trace, err = bench.ReadTrace(f); err != nil {
			return nil, fmt.Errorf("%s: %w", w.trace, err)
		}
		c.Arrival = bench.Trace
	} else if w.arrival == bench.Trace {
		return nil, fmt.Errorf("--arrival trace needs --trace FILE")
	}
	switch w.backend {
	case "sim":
		c.NewDevice = backend.Opener(backend.Config{Backend: "sim", Sim: w.simFlags.config(spec, w.seed)})
	case "cuda":
		if err := w.simFlags.onGPU(); err != nil {
			return nil, err
		}
		// Profiles must be measured on this GPU kind (atoll profile);
		// runs go one at a time, each owning the device.
		if err := w.measured(spec, hp); err != nil {
			return nil, err
		}
		c.NewDevice, c.Binder, c.Parallel = openCUDA, cudaBinder, 1
	default:
		return nil, fmt.Errorf("unknown backend %q (want sim or cuda)", w.backend)
	}
	c.NoHPGraphs = !w.graphs
	c.NoBEGraphs = !w.beGraphs
	c.HPKernelEvents = w.hpEvents
	c.KernelSpans = w.spans
	switch w.order {
	case "hp-first", "":
	case "decision":
		c.DecisionOrder = true
	default:
		return nil, fmt.Errorf("--launch-order %q: want hp-first or decision", w.order)
	}
	c.HPStreams = w.streams
	if c.HPBatched, err = w.batched(spec, hp); err != nil {
		return nil, err
	}
	return c, nil
}

// batched finds the HP model's profiles for --hp-max-batch: measured ones
// on --backend cuda, like the request's.
func (w *workloadFlags) batched(spec gpu.Spec, hp *profiles.Profile) ([]*profiles.Profile, error) {
	sizes := sched.BatchSizes(w.maxBatch)
	if w.maxBatch < 0 || len(sizes) > sched.MaxBatched {
		return nil, fmt.Errorf("--hp-max-batch %d: must be in 1..%d (1: one request per pass)", w.maxBatch, 1<<sched.MaxBatched)
	}
	var out []*profiles.Profile
	for _, n := range sizes {
		b := n * w.hpBatch
		p, err := profileFor(spec, w.hp, b)
		if err != nil {
			return nil, fmt.Errorf("--hp-max-batch %d serves passes of %v requests and needs %s's profile at batch %d: %w", w.maxBatch, sizes, w.hp, b, err)
		}
		if err := w.measured(spec, p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// measured refuses, on --backend cuda, an HP profile that is an estimate:
// the GPU's runs are timed by measured profiles of its kind.
func (w *workloadFlags) measured(spec gpu.Spec, p *profiles.Profile) error {
	if w.backend != "cuda" || p.Source != profiles.SourceEstimated {
		return nil
	}
	return fmt.Errorf("--backend cuda needs measured profiles for %s (found an estimated one for %s at batch %d); measure it with 'atoll profile --model %s --batch %d' and pass --gpu with the GPU it was measured on", spec.Name, w.hp, p.Batch, w.hp, p.Batch)
}

// progress reports each run's start on stderr unless --quiet.
func (w *workloadFlags) progress(e *env, c *bench.Config, start time.Time) {
	if w.quiet {
		return
	}
	c.Progress = func(msg string) { fmt.Fprintf(e.stderr, "  %6.1fs  running %s\n", time.Since(start).Seconds(), msg) }
}

// checkPolicies refuses, before anything runs, policies the chosen backend
// cannot run yet.
func (w *workloadFlags) checkPolicies(names []string) error {
	for _, e := range names {
		if n, _ := bench.PolicyEntry(e); n == "timeslice" && w.backend == "cuda" {
			return fmt.Errorf("policy timeslice on --backend cuda needs the BE model's buffers allocated in its own GPU context, which the model instances do not do yet; leave it out (--policies) or use --backend sim")
		}
	}
	return nil
}

// lookupProfile finds a model's profile (the embedded ones). Tests replace
// it.
var lookupProfile = profiles.Lookup

// profileFor finds the profile of a zoo model, or of an imported .onnx
// file under its model name (profiler.Lookup: its roofline estimate until
// someone profiles it).
func profileFor(spec gpu.Spec, model string, batch int) (*profiles.Profile, error) {
	if !strings.HasSuffix(strings.ToLower(model), ".onnx") {
		return lookupProfile(spec.Name, model, batch, "")
	}
	m, err := models.Get(model)
	if err != nil {
		return nil, err
	}
	return profiler.Lookup(spec, m, batch, lookupProfile)
}

// cudaGPUName names CUDA device 0. Tests replace it.
var cudaGPUName = func() (string, error) { return backend.CUDAName(0) }

// resolveGPU fills --gpu: H100-SXM on the simulator; on the GPU, the kind
// found, whose measured profiles time the run. A --gpu naming another kind
// than the GPU found is refused: its profiles would mistime every kernel.
func (w *workloadFlags) resolveGPU() error {
	if w.backend != "cuda" {
		if w.gpuName == "" {
			w.gpuName = gpu.H100SXM.Name
		}
		return nil
	}
	name, err := cudaGPUName()
	if err != nil {
		return fmt.Errorf("--backend cuda: no GPU here (%w); use --backend sim", err)
	}
	found, err := gpu.LookupSpec(name)
	if err != nil {
		return fmt.Errorf("--backend cuda: the GPU here is %q, which atoll has no description of: %w", name, err)
	}
	if w.gpuName != "" {
		want, err := gpu.LookupSpec(w.gpuName)
		if err != nil {
			return err
		}
		if want.Name != found.Name {
			return fmt.Errorf("--gpu %s, but the GPU here is %s (%s): --backend cuda uses the profiles of the GPU it runs on; drop --gpu", want.Name, found.Name, name)
		}
	}
	w.gpuName = found.Name
	return nil
}

// profiledGPUs lists the GPUs that have committed profiles (the only ones
// --gpu can name usefully), in the order gpu.Specs gives them.
func profiledGPUs() []string {
	have := map[string]bool{}
	for _, e := range profiles.List() {
		have[e.GPU] = true
	}
	var out []string
	for _, g := range gpu.Specs() {
		if have[g] {
			out = append(out, g)
		}
	}
	return out
}
