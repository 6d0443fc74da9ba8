package profiler

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"time"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
	"atoll/profiles"
)

// CoRunAPIVersion names the format of a CoRunReport.
const CoRunAPIVersion = "atoll/corun/v1"

// Defaults of CoRunOptions.
const (
	DefaultCoRunPasses = 6
	// coRunMaxQueue bounds the BE launches queued for one kernel's co-run:
	// a stream's launch queue is finite, and a host blocked on it would
	// start HP after the queue had run down.
	coRunMaxQueue = 1000
	// coRunBaselineEvery: an HP-alone baseline every this many BE kernels,
	// so a drift of the GPU's clocks shows in the report.
	coRunBaselineEvery = 16
)

// CoRunOptions tune CoRun.
type CoRunOptions struct {
	// PartitionSMs is the SM partition the BE kernels run in (a green
	// context); HP runs in the primary context on every SM at the greatest
	// stream priority, as atoll runs them. It must be a size the device can
	// make (gpu.CheckPartition).
	PartitionSMs int
	// HPRest runs HP on the SMs the partition leaves (a green context of
	// the rest of the same split, gpu.Device.NewPartitionRest) instead of
	// every SM: the two then share no SM, only memory, L2 and the front
	// end, and the slowdown is theirs alone.
	HPRest bool
	// HPGraph submits each HP pass as one graph (gpu.Grapher: a CUDA
	// graph) with an event after every kernel, as the scheduler submits a
	// request, instead of a launch and a record per kernel.
	HPGraph bool
	// BEDepth, when positive, keeps at most this many BE launches queued
	// (the host launches the next as one completes, between its HP
	// launches), as a scheduler with a bounded BE queue does; zero queues
	// the whole run of BE launches at once.
	BEDepth int
	// Passes of the HP model timed beside each BE kernel (0:
	// DefaultCoRunPasses) and alone at each baseline.
	Passes int
	// Kernels, when set, are the BE kernel indices measured (tests, a
	// quick look); nil measures every distinct launch shape of the model.
	Kernels []int
	// HP and BE are the models' profiles. On the simulator their costs time
	// the kernels; everywhere they key the launch shapes measured once and
	// give the report's compute and memory figures.
	HP, BE *profiles.Profile
	// Seed of the weights and inputs.
	Seed uint64
	// Command and Date are recorded in the report (Date zero: now).
	Command string
	Date    time.Time
	// Progress, when set, is called as the measurement goes.
	Progress func(Progress)
}

// CoRunReport is what CoRun measured: how much slower the HP model's
// kernels run while each BE kernel runs back to back in its partition.
type CoRunReport struct {
	APIVersion   string      `json:"apiVersion"`
	GPU          string      `json:"gpu"`
	Backend      string      `json:"backend"`
	Device       string      `json:"device"`
	Command      string      `json:"command,omitempty"`
	Date         string      `json:"date"`
	HP           ModelBatch  `json:"hp"`
	BE           ModelBatch  `json:"be"`
	PartitionSMs int         `json:"partitionSms"`
	HPRest       bool        `json:"hpRest,omitempty"`  // HP on the SMs the partition leaves
	BEDepth      int         `json:"beDepth,omitempty"` // BE launches queued at most (0: all at once)
	HPGraph      bool        `json:"hpGraph,omitempty"` // HP passes submitted as graphs
	Passes       int         `json:"passes"`
	HPKernels    []string    `json:"hpKernels"`
	HPAloneUs    []float64   `json:"hpAloneUs"`        // per HP kernel, median of every baseline pass
	HPRequestUs  []float64   `json:"hpRequestAloneUs"` // each baseline's median pass, in order
	Kernels      []CoRunBE   `json:"beKernels"`
	Summary      CoRunTotals `json:"summary"`
}

// ModelBatch names a model and its batch size.
type ModelBatch struct {
	Model string `json:"model"`
	Batch int    `json:"batch"`
}

// CoRunBE is one BE kernel's co-run.
type CoRunBE struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	// SameAs is the index of the kernel of the same launch shape whose
	// measurement this one shares (-1: measured itself).
	SameAs int `json:"sameAs"`
	// ProfileUs, MemoryPct and ComputePct are the BE profile's.
	ProfileUs  float64 `json:"profileUs"`
	MemoryPct  float64 `json:"memoryPct"`
	ComputePct float64 `json:"computePct"`
	// AloneUs is its time per launch alone in the partition.
	AloneUs float64 `json:"aloneUs"`
	// Passes is how many HP passes ran with it queued throughout (passes
	// the queue did not cover are dropped); 0: none, and the figures
	// below are 0.
	Passes int `json:"passes"`
	// HPSlowdown is the HP pass's median time beside it over the
	// median time alone (1: unharmed).
	HPSlowdown float64 `json:"hpSlowdown"`
	// HPKernelSlowdown is, per HP kernel, its median time beside it over
	// its median alone.
	HPKernelSlowdown []float64 `json:"hpKernelSlowdown"`
	// BESlowdown is the BE kernel's own time per launch while the HP
	// passes ran over its time alone (only with BEDepth, where each BE
	// launch is followed by an event; 0: not measured). It counts the
	// launches that completed within the covered passes, so a queue too
	// shallow to outlast the host's refill shows as a slowdown too:
	// CoRunTotals weighs only kernels whose queue holds 200 µs or more.
	BESlowdown float64 `json:"beSlowdown,omitempty"`
}

// CoRunTotals summarise a report over the BE model's step, each kernel
// weighted by its profiled time.
type CoRunTotals struct {
	// MeanHPSlowdown is the step-time-weighted mean HP slowdown: what BE
	// running beside HP all through its step would cost HP on average.
	MeanHPSlowdown float64 `json:"meanHpSlowdown"`
	// ShareWithin maps a slowdown bound ("1.02") to the share of the BE
	// step's time spent in kernels whose HP slowdown is at most it.
	ShareWithin map[string]float64 `json:"shareWithin"`
	// Unmeasured is the share of the step's time in kernels with no
	// covered pass.
	Unmeasured float64 `json:"unmeasured"`
	// BaselineSpread is (max - min) / median of the baseline passes.
	BaselineSpread float64 `json:"baselineSpread"`
	// MeanBESlowdown is the step-time-weighted mean of BESlowdown over the
	// kernels with one whose queue (BEDepth × their time alone) holds
	// 200 µs or more, and BEWeighed the share of the step they make up
	// (0 without BEDepth).
	MeanBESlowdown float64 `json:"meanBeSlowdown,omitempty"`
	BEWeighed      float64 `json:"beWeighed,omitempty"`
}

// CoRunBounds are the slowdown bounds of CoRunTotals.ShareWithin.
var CoRunBounds = []float64{1.02, 1.05, 1.10, 1.25}

// CoRun measures the co-run slowdown of an HP model's kernels beside each
// kernel of a BE model: for each distinct BE launch shape it queues that
// kernel back to back on a stream of an SM partition of PartitionSMs, and
// once it runs times Passes HP passes (a CUDA event between every two HP
// launches) on a greatest-priority stream of the primary context; the HP
// model alone is timed the same way every few BE kernels. The same code
// runs on the simulator (with the profiles' costs), which gives the
// simulator's prediction of the same figures.
//
// CoRun belongs to the goroutine that owns dev.
func CoRun(ctx context.Context, dev gpu.Device, lib *kernels.Library, hp, be ModelBatch, opt CoRunOptions) (*CoRunReport, error) {
	info := dev.Info()
	spec, err := gpu.LookupSpec(info.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
	}
	if opt.HP == nil || opt.BE == nil {
		return nil, fmt.Errorf("%w: co-run needs the HP and BE profiles", ErrMeasure)
	}
	if err := gpu.CheckPartition(spec, opt.PartitionSMs); err != nil {
		return nil, fmt.Errorf("%w: BE partition: %w", ErrMeasure, err)
	}
	if opt.Passes == 0 {
		opt.Passes = DefaultCoRunPasses
	}
	if opt.Passes < 1 {
		return nil, fmt.Errorf("%w: passes %d: need at least 1", ErrMeasure, opt.Passes)
	}
	if opt.BEDepth < 0 || opt.BEDepth > coRunMaxQueue {
		return nil, fmt.Errorf("%w: BE depth %d: want 0 (all queued at once) to %d", ErrMeasure, opt.BEDepth, coRunMaxQueue)
	}
	if opt.Date.IsZero() {
		opt.Date = time.Now().UTC()
	}
	simulated := info.Backend == "sim"
	hpIn, err := coRunInstance(dev, lib, hp, opt.HP, opt.Seed, simulated)
	if err != nil {
		return nil, err
	}
	defer hpIn.Close()
	beIn, err := coRunInstance(dev, lib, be, opt.BE, opt.Seed+2, simulated)
	if err != nil {
		return nil, err
	}
	defer beIn.Close()
	nBE := len(beIn.Graph().Layers)
	which := opt.Kernels
	if which == nil {
		which = make([]int, nBE)
		for i := range which {
			which[i] = i
		}
	}
	for _, i := range which {
		if i < 0 || i >= nBE {
			return nil, fmt.Errorf("%w: BE kernel %d: %s has %d", ErrMeasure, i, be.Model, nBE)
		}
	}

	c := &coRunner{ctx: ctx, dev: dev, opt: opt}
	defer c.close()
	if err := c.setup(lib, hpIn, spec, info); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
	}
	rep := &CoRunReport{
		APIVersion:   CoRunAPIVersion,
		GPU:          spec.Name,
		Backend:      info.Backend,
		Device:       deviceFacts(info, MeasureOptions{}),
		Command:      opt.Command,
		Date:         opt.Date.Format(time.RFC3339),
		HP:           hp,
		BE:           be,
		PartitionSMs: opt.PartitionSMs,
		HPRest:       opt.HPRest,
		BEDepth:      opt.BEDepth,
		HPGraph:      opt.HPGraph,
		Passes:       opt.Passes,
	}
	for _, l := range hpIn.Graph().Layers {
		rep.HPKernels = append(rep.HPKernels, l.Name)
	}

	// Warm up: every HP kernel and the BE kernels once each, then a
	// baseline.
	if err := c.warm(beIn, which); err != nil {
		return nil, fmt.Errorf("%w: warm-up: %w", ErrMeasure, err)
	}
	var alone [][]float64 // per baseline pass: per HP kernel µs
	baseline := func() error {
		passes, _, err := c.hpPasses()
		if err != nil {
			return fmt.Errorf("HP alone: %w", err)
		}
		alone = append(alone, passes...)
		c.reqUs = median(sums(passes))
		rep.HPRequestUs = append(rep.HPRequestUs, c.reqUs)
		return nil
	}
	if err := baseline(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
	}

	shapes := map[string]int{}
	type result struct {
		aloneUs, besideUs float64
		passes            [][]float64
	}
	measured := map[int]result{}
	for n, i := range which {
		k := &opt.BE.Kernels[i]
		e := CoRunBE{Index: i, Name: k.Name, SameAs: -1, ProfileUs: k.DurationUs, MemoryPct: k.MemoryPct, ComputePct: k.ComputePct}
		key := fmt.Sprintf("%s|%s|%v|%v", k.Kernel, k.Shape, k.Grid, k.Block)
		if j, ok := shapes[key]; ok {
			e.SameAs = j
		} else {
			shapes[key] = i
			l, err := beIn.Launch(i, gpu.Plain, kernels.Control{})
			if err != nil {
				return nil, fmt.Errorf("%w: BE %s: %w", ErrMeasure, k.Name, err)
			}
			a, err := c.beAlone(l, k.DurationUs)
			if err != nil {
				return nil, fmt.Errorf("%w: BE %s alone: %w", ErrMeasure, k.Name, err)
			}
			ps, b, err := c.beside(l, a)
			if err != nil {
				return nil, fmt.Errorf("%w: BE %s beside HP: %w", ErrMeasure, k.Name, err)
			}
			measured[i] = result{a, b, ps}
			if len(measured)%coRunBaselineEvery == 0 {
				if err := baseline(); err != nil {
					return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
				}
			}
		}
		rep.Kernels = append(rep.Kernels, e)
		c.progress("co-run", n+1, len(which))
	}
	if err := baseline(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
	}

	rep.HPAloneUs = columnMedians(alone)
	aloneReq := median(sums(alone))
	for j := range rep.Kernels {
		e := &rep.Kernels[j]
		src := e.Index
		if e.SameAs >= 0 {
			src = e.SameAs
		}
		r := measured[src]
		e.AloneUs = round(r.aloneUs, 1e3)
		if r.besideUs > 0 && r.aloneUs > 0 {
			e.BESlowdown = round(r.besideUs/r.aloneUs, 1e4)
		}
		e.Passes = len(r.passes)
		if e.Passes == 0 {
			continue
		}
		e.HPSlowdown = round(median(sums(r.passes))/aloneReq, 1e4)
		med := columnMedians(r.passes)
		e.HPKernelSlowdown = make([]float64, len(med))
		for k, v := range med {
			if rep.HPAloneUs[k] > 0 {
				e.HPKernelSlowdown[k] = round(v/rep.HPAloneUs[k], 1e3)
			}
		}
	}
	rep.Summary = coRunTotals(rep)
	for i, v := range rep.HPAloneUs {
		rep.HPAloneUs[i] = round(v, 1e3)
	}
	for i, v := range rep.HPRequestUs {
		rep.HPRequestUs[i] = round(v, 1e3)
	}
	return rep, nil
}

// coRunInstance builds a model on dev; on the simulator its kernels take
// the profile's costs.
func coRunInstance(dev gpu.Device, lib *kernels.Library, mb ModelBatch, p *profiles.Profile, seed uint64, simulated bool) (*exec.Instance, error) {
	m, err := models.Get(mb.Model)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
	}
	g, err := m.Graph(mb.Batch)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
	}
	if len(p.Kernels) != len(g.Layers) {
		return nil, fmt.Errorf("%w: the %s bs%d profile has %d kernels, the model %d: profile it again", ErrMeasure, p.Model, p.Batch, len(p.Kernels), len(g.Layers))
	}
	in, err := exec.NewWith(dev, lib, g, models.InitWeights(g, seed), models.InitInputs(g, seed+1), exec.Options{Substitute: true})
	if err != nil {
		return nil, fmt.Errorf("%w: %s bs%d: %w", ErrMeasure, mb.Model, mb.Batch, err)
	}
	if n := in.Runnable(); n < len(g.Layers) {
		in.Close()
		return nil, fmt.Errorf("%w: %s bs%d: %w", ErrMeasure, mb.Model, mb.Batch, in.Err(n))
	}
	if simulated {
		if err := in.UseProfile(p); err != nil {
			in.Close()
			return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
		}
	}
	return in, nil
}

// coRunner holds the device objects of one co-run measurement.
type coRunner struct {
	ctx context.Context
	dev gpu.Device
	opt CoRunOptions

	hp, be     gpu.Stream // HP: primary context, greatest priority; BE: the partition, least
	hpLaunches []*gpu.Launch
	events     []gpu.Event // Passes × HP kernels + 1
	beStart    gpu.Event
	ring       []gpu.Event // BEDepth: one per BE launch in flight
	graphs     []gpu.Graph // HPGraph: one per pass
	beEnd      gpu.Event
	allocs     []gpu.Ptr

	blocker     *gpu.Launch // a long GEMM: lets the host enqueue ahead of the GPU
	blockerHPUs float64     // its time on the HP stream (whole GPU)
	blockerBEUs float64     // and in the partition
	hostUs      float64     // host time to enqueue one HP pass with its events
	reqUs       float64     // the last baseline's median HP pass, µs
}

func (c *coRunner) progress(stage string, done, total int) {
	if c.opt.Progress != nil {
		c.opt.Progress(Progress{Stage: stage, Done: done, Total: total})
	}
}

func (c *coRunner) setup(lib *kernels.Library, hpIn *exec.Instance, spec gpu.Spec, info gpu.Info) error {
	var hpCtx gpu.Context
	if c.opt.HPRest {
		var err error
		if hpCtx, err = c.dev.NewPartitionRest(c.opt.PartitionSMs); err != nil {
			return fmt.Errorf("NewPartitionRest(%d): %w", c.opt.PartitionSMs, err)
		}
	}
	var err error
	if c.hp, err = c.dev.NewStream(gpu.StreamOptions{Context: hpCtx, Priority: info.Priorities.Greatest}); err != nil {
		return fmt.Errorf("NewStream: %w", err)
	}
	cx, err := c.dev.NewPartition(c.opt.PartitionSMs)
	if err != nil {
		return fmt.Errorf("NewPartition(%d): %w", c.opt.PartitionSMs, err)
	}
	if c.be, err = c.dev.NewStream(gpu.StreamOptions{Context: cx, Priority: info.Priorities.Least}); err != nil {
		return fmt.Errorf("NewStream (partition of %d SMs): %w", c.opt.PartitionSMs, err)
	}
	n := len(hpIn.Graph().Layers)
	for i := range n {
		l, err := hpIn.Launch(i, gpu.Plain, kernels.Control{})
		if err != nil {
			return fmt.Errorf("HP layer %d: %w", i, err)
		}
		c.hpLaunches = append(c.hpLaunches, l)
	}
	c.events = make([]gpu.Event, c.opt.Passes*n+1)
	for i := range c.events {
		if c.events[i], err = c.dev.NewEvent(); err != nil {
			return fmt.Errorf("NewEvent: %w", err)
		}
	}
	if c.beStart, err = c.dev.NewEvent(); err != nil {
		return fmt.Errorf("NewEvent: %w", err)
	}
	if c.beEnd, err = c.dev.NewEvent(); err != nil {
		return fmt.Errorf("NewEvent: %w", err)
	}
	if c.opt.HPGraph {
		gr, ok := c.dev.(gpu.Grapher)
		if !ok {
			return fmt.Errorf("HP graphs: the %s device cannot record graphs", info.Backend)
		}
		for p := range c.opt.Passes {
			steps := make([]gpu.GraphStep, n)
			for i, l := range c.hpLaunches {
				steps[i] = gpu.GraphStep{Launch: l, Event: c.events[p*n+i+1]}
			}
			g, err := gr.NewGraph(hpCtx, steps)
			if err != nil {
				return fmt.Errorf("NewGraph: %w", err)
			}
			c.graphs = append(c.graphs, g)
		}
	}
	c.ring = make([]gpu.Event, c.opt.BEDepth)
	for i := range c.ring {
		if c.ring[i], err = c.dev.NewEvent(); err != nil {
			return fmt.Errorf("NewEvent: %w", err)
		}
	}
	mt := &meter{ctx: c.ctx, dev: c.dev, lib: lib, spec: spec, fill: info.Backend != "sim"}
	gemm := kernels.GEMM{M: 4096, N: 4096, K: 8192, In: kernels.BF16, Out: kernels.BF16}
	if c.blocker, err = mt.peakLaunch(gemm); err != nil {
		return err
	}
	c.allocs = mt.allocs
	if c.blockerHPUs, err = c.timeMean(c.hp, c.blocker, 3); err != nil {
		return err
	}
	if c.blockerBEUs, err = c.timeMean(c.be, c.blocker, 3); err != nil {
		return err
	}
	c.hostUs = 10 * float64(n)
	return nil
}

func (c *coRunner) close() {
	if gr, ok := c.dev.(gpu.Grapher); ok {
		for _, g := range c.graphs {
			_ = gr.DestroyGraph(g)
		}
	}
	for _, p := range c.allocs {
		_ = c.dev.Free(p)
	}
	for _, e := range append(append(slices.Clone(c.events), c.ring...), c.beStart, c.beEnd) {
		if e != 0 {
			_ = c.dev.DestroyEvent(e)
		}
	}
	for _, s := range []gpu.Stream{c.hp, c.be} {
		if s != 0 {
			_ = c.dev.DestroyStream(s)
		}
	}
}

// wait waits until e has completed.
func (c *coRunner) wait(e gpu.Event) error {
	return (&meter{ctx: c.ctx, dev: c.dev}).wait(e)
}

func (c *coRunner) at(e gpu.Event) (float64, error) {
	t, err := c.dev.Time(e)
	if err != nil {
		return 0, fmt.Errorf("event time: %w", err)
	}
	return float64(t) / float64(time.Microsecond), nil
}

// timeMean launches l reps times on s after one warm-up and returns the
// mean per launch, µs.
func (c *coRunner) timeMean(s gpu.Stream, l *gpu.Launch, reps int) (float64, error) {
	if err := c.dev.Launch(s, l); err != nil {
		return 0, fmt.Errorf("launch %s: %w", l.Name, err)
	}
	if err := c.dev.Record(c.beStart, s); err != nil {
		return 0, fmt.Errorf("Record: %w", err)
	}
	for range reps {
		if err := c.dev.Launch(s, l); err != nil {
			return 0, fmt.Errorf("launch %s: %w", l.Name, err)
		}
	}
	if err := c.dev.Record(c.beEnd, s); err != nil {
		return 0, fmt.Errorf("Record: %w", err)
	}
	if err := c.wait(c.beEnd); err != nil {
		return 0, err
	}
	t0, err := c.at(c.beStart)
	if err != nil {
		return 0, err
	}
	t1, err := c.at(c.beEnd)
	return (t1 - t0) / float64(reps), err
}

// warm runs every HP kernel and each BE kernel measured once.
func (c *coRunner) warm(beIn *exec.Instance, which []int) error {
	for _, l := range c.hpLaunches {
		if err := c.dev.Launch(c.hp, l); err != nil {
			return fmt.Errorf("launch %s: %w", l.Name, err)
		}
	}
	for n, i := range which {
		l, err := beIn.Launch(i, gpu.Plain, kernels.Control{})
		if err != nil {
			return err
		}
		if err := c.dev.Launch(c.be, l); err != nil {
			return fmt.Errorf("launch %s: %w", l.Name, err)
		}
		if n%64 == 63 { // keep the launch queue short
			if err := c.sync(c.be); err != nil {
				return err
			}
		}
	}
	if err := c.sync(c.be); err != nil {
		return err
	}
	return c.sync(c.hp)
}

func (c *coRunner) sync(s gpu.Stream) error {
	if err := c.dev.Record(c.beEnd, s); err != nil {
		return fmt.Errorf("Record: %w", err)
	}
	return c.wait(c.beEnd)
}

// beAlone is a BE launch's mean time alone in the partition, µs: enough
// launches back to back for about 300 µs (3 to 200), behind a blocker so
// the host's enqueueing does not show.
func (c *coRunner) beAlone(l *gpu.Launch, profileUs float64) (float64, error) {
	reps := int(min(200, max(3, math.Ceil(300/max(profileUs, 0.5)))))
	if err := c.dev.Launch(c.be, c.blocker); err != nil {
		return 0, fmt.Errorf("launch %s: %w", c.blocker.Name, err)
	}
	return c.timeMean(c.be, l, reps)
}

// hpPasses times Passes HP passes on the HP stream behind a blocker (so the
// host is ahead of the GPU from the first kernel) and returns each pass's
// per-kernel µs and end time (device clock, µs).
func (c *coRunner) hpPasses() (passes [][]float64, ends []float64, err error) {
	n := len(c.hpLaunches)
	for range c.hpBlockers() {
		if err := c.dev.Launch(c.hp, c.blocker); err != nil {
			return nil, nil, fmt.Errorf("launch %s: %w", c.blocker.Name, err)
		}
	}
	start := c.dev.Now() // the device's clock: on the simulator, host costs are virtual
	if err := c.enqueuePasses(nil); err != nil {
		return nil, nil, err
	}
	c.hostUs = float64(c.dev.Now()-start) / float64(time.Microsecond) / float64(c.opt.Passes)
	if err := c.wait(c.events[len(c.events)-1]); err != nil {
		return nil, nil, err
	}
	ts := make([]float64, len(c.events))
	for i, e := range c.events {
		if ts[i], err = c.at(e); err != nil {
			return nil, nil, err
		}
	}
	for p := range c.opt.Passes {
		d := make([]float64, n)
		for i := range n {
			d[i] = ts[p*n+i+1] - ts[p*n+i]
		}
		passes, ends = append(passes, d), append(ends, ts[(p+1)*n])
	}
	return passes, ends, nil
}

// enqueuePasses enqueues the HP passes on the HP stream after the record of
// the first event: kernel by kernel with an event after each, or one graph
// per pass (HPGraph). between, when set, is called every four kernels (or
// after each graph).
func (c *coRunner) enqueuePasses(between func() error) error {
	if err := c.dev.Record(c.events[0], c.hp); err != nil {
		return fmt.Errorf("Record: %w", err)
	}
	n := len(c.hpLaunches)
	for p := range c.opt.Passes {
		if c.graphs != nil {
			if err := c.dev.(gpu.Grapher).LaunchGraph(c.graphs[p], c.hp); err != nil {
				return fmt.Errorf("LaunchGraph: %w", err)
			}
			if between != nil {
				if err := between(); err != nil {
					return err
				}
			}
			continue
		}
		for i, l := range c.hpLaunches {
			if err := c.dev.Launch(c.hp, l); err != nil {
				return fmt.Errorf("launch %s: %w", l.Name, err)
			}
			if err := c.dev.Record(c.events[p*n+i+1], c.hp); err != nil {
				return fmt.Errorf("Record: %w", err)
			}
			if between != nil && i%4 == 3 {
				if err := between(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// hpBlockers is how many blockers go before the HP passes: enough to cover
// half again the host's enqueueing of every pass, so that no HP kernel
// waits for its launch (a pass of short kernels, each launched and
// followed by a record, takes the host about as long as the GPU).
func (c *coRunner) hpBlockers() int {
	return min(64, max(1, int(math.Ceil(1.5*c.hostUs*float64(c.opt.Passes)/c.blockerHPUs))))
}

// beside queues l back to back on the BE stream (behind blockers while the
// host enqueues), waits until the queue runs, then times the HP passes
// beside it; passes that end after the queue has run out are dropped.
func (c *coRunner) beside(l *gpu.Launch, aloneUs float64) ([][]float64, float64, error) {
	if c.opt.BEDepth > 0 {
		return c.besideBounded(l)
	}
	passes, err := c.besideQueued(l, aloneUs)
	return passes, 0, err
}

// besideQueued is beside with the whole run of BE launches queued at once.
func (c *coRunner) besideQueued(l *gpu.Launch, aloneUs float64) ([][]float64, error) {
	cover := float64(c.hpBlockers())*c.blockerHPUs*1.5 + float64(c.opt.Passes)*c.reqUs*2 + 300
	queued := int(min(coRunMaxQueue, max(1, math.Ceil(cover/max(aloneUs, 0.5)))))
	// The host enqueues a launch in well under 5 µs.
	beBlockers := min(16, max(1, int(math.Ceil((float64(queued)*5+200)/c.blockerBEUs))))
	for range beBlockers {
		if err := c.dev.Launch(c.be, c.blocker); err != nil {
			return nil, fmt.Errorf("launch %s: %w", c.blocker.Name, err)
		}
	}
	if err := c.dev.Record(c.beStart, c.be); err != nil {
		return nil, fmt.Errorf("Record: %w", err)
	}
	for range queued {
		if err := c.dev.Launch(c.be, l); err != nil {
			return nil, fmt.Errorf("launch %s: %w", l.Name, err)
		}
	}
	if err := c.dev.Record(c.beEnd, c.be); err != nil {
		return nil, fmt.Errorf("Record: %w", err)
	}
	if err := c.wait(c.beStart); err != nil {
		return nil, err
	}
	all, ends, err := c.hpPasses()
	if err != nil {
		return nil, err
	}
	if err := c.wait(c.beEnd); err != nil {
		return nil, err
	}
	t, err := c.at(c.beEnd)
	if err != nil {
		return nil, err
	}
	var out [][]float64
	for p, e := range ends {
		if e > t {
			break
		}
		out = append(out, all[p])
	}
	return out, nil
}

// besideBounded keeps BEDepth launches of l queued on the BE stream while
// the host enqueues the HP passes (a few launches at a time, refilling the
// BE queue in between) and until they have run: each BE launch is followed
// by an event, and a completed one is replaced by a new launch. Passes
// that started before the host had enqueued them all, or before the BE
// queue ran, or ended after it stopped, are dropped.
//
// It also returns the BE kernel's mean time per launch over the covered
// passes: their span over the BE launches completing in it (0 with fewer
// than 4).
func (c *coRunner) besideBounded(l *gpu.Launch) ([][]float64, float64, error) {
	d := c.opt.BEDepth
	next := 0            // ring slot of the oldest launch in flight
	var beDone []float64 // completion times of BE launches seen, device µs
	launchBE := func(slot int) error {
		if err := c.dev.Launch(c.be, l); err != nil {
			return fmt.Errorf("launch %s: %w", l.Name, err)
		}
		if err := c.dev.Record(c.ring[slot], c.be); err != nil {
			return fmt.Errorf("Record: %w", err)
		}
		return nil
	}
	// refill replaces the completed launches, oldest first, at most d per
	// call: kernels shorter than the host's launch would otherwise keep it
	// refilling for ever.
	refill := func() error {
		for range d {
			ok, err := c.dev.Query(c.ring[next])
			if err != nil {
				return fmt.Errorf("Query: %w", err)
			}
			if !ok {
				return nil
			}
			t, err := c.at(c.ring[next])
			if err != nil {
				return err
			}
			beDone = append(beDone, t)
			if err := launchBE(next); err != nil {
				return err
			}
			next = (next + 1) % d
		}
		return nil
	}
	if err := c.dev.Record(c.beStart, c.be); err != nil {
		return nil, 0, fmt.Errorf("Record: %w", err)
	}
	for i := range d {
		if err := launchBE(i); err != nil {
			return nil, 0, err
		}
	}
	n := len(c.hpLaunches)
	// The host refills BE while it enqueues HP, so it needs longer than
	// alone: twice hpBlockers.
	for range min(128, 2*c.hpBlockers()) {
		if err := c.dev.Launch(c.hp, c.blocker); err != nil {
			return nil, 0, fmt.Errorf("launch %s: %w", c.blocker.Name, err)
		}
	}
	if err := c.enqueuePasses(refill); err != nil {
		return nil, 0, err
	}
	enqueued := float64(c.dev.Now()) / float64(time.Microsecond) // device clock
	deadline := time.Now().Add(60 * time.Second)
	for {
		done, err := c.dev.Query(c.events[len(c.events)-1])
		if err != nil {
			return nil, 0, fmt.Errorf("Query: %w", err)
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("the device did not finish within 60 s (a kernel hangs?)")
		}
		if err := refill(); err != nil {
			return nil, 0, err
		}
		if err := c.dev.Wait(c.ctx, c.dev.Now()+2*time.Microsecond); err != nil {
			return nil, 0, err
		}
	}
	// The BE queue stops here: its last launch ends the co-run.
	last := (next + d - 1) % d
	if err := c.wait(c.ring[last]); err != nil {
		return nil, 0, err
	}
	first, err := c.at(c.beStart)
	if err != nil {
		return nil, 0, err
	}
	stop, err := c.at(c.ring[last])
	if err != nil {
		return nil, 0, err
	}
	ts := make([]float64, len(c.events))
	for i, e := range c.events {
		if ts[i], err = c.at(e); err != nil {
			return nil, 0, err
		}
	}
	var out [][]float64
	from, to := math.Inf(1), math.Inf(-1) // the covered passes' span
	for p := range c.opt.Passes {
		// A pass that began before the host had enqueued every pass may
		// have waited for its launches: dropped with those outside BE.
		if ts[p*n] < first || ts[p*n] < enqueued || ts[(p+1)*n] > stop {
			continue
		}
		d := make([]float64, n)
		for i := range n {
			d[i] = ts[p*n+i+1] - ts[p*n+i]
		}
		out = append(out, d)
		from, to = min(from, ts[p*n]), max(to, ts[(p+1)*n])
	}
	if t, err := c.at(c.ring[last]); err == nil {
		beDone = append(beDone, t)
	}
	k := 0
	for _, t := range beDone {
		if t >= from && t <= to {
			k++
		}
	}
	beside := 0.0
	if k >= 4 {
		beside = (to - from) / float64(k)
	}
	return out, beside, nil
}

func coRunTotals(r *CoRunReport) CoRunTotals {
	t := CoRunTotals{ShareWithin: map[string]float64{}}
	total, weighted := 0.0, 0.0
	for _, e := range r.Kernels {
		total += e.ProfileUs
	}
	if total <= 0 {
		return t
	}
	for _, e := range r.Kernels {
		w := e.ProfileUs / total
		if e.Passes == 0 {
			t.Unmeasured += w
			continue
		}
		weighted += w * e.HPSlowdown
		for _, b := range CoRunBounds {
			if e.HPSlowdown <= b {
				t.ShareWithin[fmt.Sprintf("%.2f", b)] += w
			}
		}
	}
	if m := 1 - t.Unmeasured; m > 0 {
		t.MeanHPSlowdown = round(weighted/m, 1e4)
	}
	if r.BEDepth > 0 {
		be := 0.0
		for _, e := range r.Kernels {
			if e.BESlowdown > 0 && float64(r.BEDepth)*e.AloneUs >= 200 {
				t.BEWeighed += e.ProfileUs / total
				be += e.ProfileUs / total * e.BESlowdown
			}
		}
		if t.BEWeighed > 0 {
			t.MeanBESlowdown = round(be/t.BEWeighed, 1e4)
		}
		t.BEWeighed = round(t.BEWeighed, 1e4)
	}
	for k, v := range t.ShareWithin {
		t.ShareWithin[k] = round(v, 1e4)
	}
	t.Unmeasured = round(t.Unmeasured, 1e4)
	if len(r.HPRequestUs) > 0 {
		lo, hi := slices.Min(r.HPRequestUs), slices.Max(r.HPRequestUs)
		if m := median(r.HPRequestUs); m > 0 {
			t.BaselineSpread = round((hi-lo)/m, 1e4)
		}
	}
	return t
}

func sums(passes [][]float64) []float64 {
	out := make([]float64, len(passes))
	for i, p := range passes {
		for _, v := range p {
			out[i] += v
		}
	}
	return out
}

// columnMedians is the median of each column of rows.
func columnMedians(rows [][]float64) []float64 {
	if len(rows) == 0 {
		return nil
	}
	out := make([]float64, len(rows[0]))
	col := make([]float64, len(rows))
	for j := range out {
		for i, r := range rows {
			col[i] = r[j]
		}
		out[j] = median(col)
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// WriteCoRun writes r as indented JSON.
func WriteCoRun(w io.Writer, r *CoRunReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(r)
}

// ReadCoRun parses a co-run report (a gzip stream is decompressed first),
// refusing unknown fields and other versions.
func ReadCoRun(rd io.Reader) (*CoRunReport, error) {
	data, err := io.ReadAll(rd)
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r CoRunReport
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("not a co-run report: %w", err)
	}
	if r.APIVersion != CoRunAPIVersion {
		return nil, fmt.Errorf("apiVersion %q, want %q (a report of atoll corun)", r.APIVersion, CoRunAPIVersion)
	}
	for _, k := range r.Kernels {
		if k.Passes > 0 && len(k.HPKernelSlowdown) != len(r.HPKernels) {
			return nil, fmt.Errorf("BE kernel %d (%s): %d HP kernel slowdowns for %d HP kernels", k.Index, k.Name, len(k.HPKernelSlowdown), len(r.HPKernels))
		}
	}
	return &r, nil
}
