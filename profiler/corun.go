package profiler

import (
	"context"
	"fmt"
	"time"

	"atoll/gpu"
	"atoll/kernels"
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
	// make (gpu.CheckPartition), or the device's SM count: BE on a
	// least-priority stream of the primary context, on every SM (the
	// plain-priority setup).
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
	// HPPassEvents records one HP event a pass, at its end, instead of
	// one after every kernel: an event takes GPU time (about 2–3 µs on
	// an H100 or H200) that BE does not slow, so with one after every
	// kernel a pass of many short kernels (BERT-base: 137) is mostly
	// events and its slowdown is diluted. A request's graph in the
	// scheduler records a few. Per-kernel slowdowns are then not measured:
	// HPAloneUs and each HPKernelSlowdown hold one figure, the pass's.
	HPPassEvents bool
	// HPGap, when positive, sends each HP pass alone, as a request: the
	// host waits until the pass before has completed and HPGap more, then
	// records a start event on the idle HP stream and launches the pass,
	// which is timed from that event to its end. HP then meets a GPU that
	// BE has had to itself for HPGap, its SMs taken by BE's resident
	// blocks — priority's case in the matrix — instead of passes queued
	// back to back. It needs BEDepth (BE is refilled while the host
	// waits) and implies HPPassEvents.
	HPGap time.Duration
	// BEDepth, when positive, keeps at most this many BE launches queued
	// (the host launches the next as one completes, between its HP
	// launches), as a scheduler with a bounded BE queue does; zero queues
	// the whole run of BE launches at once.
	BEDepth int
	// BEGraphs, with BEDepth, queues every BE kernel in graphs of launches
	// lasting about 50 µs (one launch where a kernel is longer), one event
	// a graph, as atoll submits BE chunks: the kernel then runs as it does
	// in a graph (on the simulator, its profiled graph duration). Without
	// it only kernels too short to fill the queue are so grouped.
	BEGraphs bool
	// Passes of the HP model timed beside each BE kernel (0:
	// DefaultCoRunPasses) and alone at each baseline.
	Passes int
	// Kernels, when set, are the BE kernel indices measured (tests, a
	// quick look); nil measures every distinct launch shape of the model.
	Kernels []int
	// HP and BE are the models' profiles: which models run, at which
	// batch (exec.NewForProfile), their costs on the simulator, the launch
	// shapes measured once, and the report's compute and memory figures.
	HP, BE *profiles.Profile
	// Seed of the weights and inputs.
	Seed uint64
	// Command and Date are recorded in the report (Date zero: now).
	Command string
	Date    time.Time
	// Progress, when set, is called as the measurement goes.
	Progress func(Progress)
}

// CoRun measures the co-run slowdown of an HP model's kernels beside each
// kernel of a BE model: for each distinct BE launch shape it queues that
// kernel back to back on a stream of an SM partition of PartitionSMs, and
// once it runs times Passes HP passes (a CUDA event between every two HP
// launches, or between passes only: HPPassEvents) on a greatest-priority stream of the primary context; the HP
// model alone is timed the same way every few BE kernels. The same code
// runs on the simulator (with the profiles' costs), which gives the
// simulator's prediction of the same figures.
//
// CoRun belongs to the goroutine that owns dev.
func CoRun(ctx context.Context, dev gpu.Device, lib *kernels.Library, opt CoRunOptions) (*CoRunReport, error) {
	info := dev.Info()
	spec, err := gpu.LookupSpec(info.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMeasure, err)
	}
	if opt.HP == nil || opt.BE == nil {
		return nil, fmt.Errorf("%w: co-run needs the HP and BE profiles", ErrMeasure)
	}
	if opt.PartitionSMs != spec.SMs {
		if err := gpu.CheckPartition(spec, opt.PartitionSMs); err != nil {
			return nil, fmt.Errorf("%w: BE partition: %w (or %d: every SM, no partition)", ErrMeasure, err, spec.SMs)
		}
	} else if opt.HPRest {
		return nil, fmt.Errorf("%w: HP on the rest of a partition, but BE has every SM (%d): no rest", ErrMeasure, spec.SMs)
	}
	if opt.Passes == 0 {
		opt.Passes = DefaultCoRunPasses
	}
	if opt.Passes < 1 {
		return nil, fmt.Errorf("%w: passes %d: need at least 1", ErrMeasure, opt.Passes)
	}
	if opt.BEGraphs && opt.BEDepth == 0 {
		return nil, fmt.Errorf("%w: BE graphs need a bounded BE queue (BEDepth, --be-depth): the whole run queued at once is launched kernel by kernel", ErrMeasure)
	}
	if opt.HPGap < 0 || (opt.HPGap > 0 && opt.BEDepth == 0) {
		return nil, fmt.Errorf("%w: HP gap %v: needs a positive gap and a bounded BE queue (BEDepth, --be-depth), refilled while the host waits", ErrMeasure, opt.HPGap)
	}
	if opt.HPGap > 0 {
		opt.HPPassEvents = true
	}
	if opt.BEDepth < 0 || opt.BEDepth > coRunMaxQueue {
		return nil, fmt.Errorf("%w: BE depth %d: want 0 (all queued at once) to %d", ErrMeasure, opt.BEDepth, coRunMaxQueue)
	}
	if opt.Date.IsZero() {
		opt.Date = time.Now().UTC()
	}
	hpIn, err := exec.NewForProfile(dev, lib, opt.HP, opt.Seed)
	if err != nil {
		return nil, fmt.Errorf("%w: HP: %w", ErrMeasure, err)
	}
	defer hpIn.Close()
	beIn, err := exec.NewForProfile(dev, lib, opt.BE, opt.Seed+2)
	if err != nil {
		return nil, fmt.Errorf("%w: BE: %w", ErrMeasure, err)
	}
	defer beIn.Close()
	hp, be := ModelBatch{Model: opt.HP.Model, Batch: opt.HP.Batch}, ModelBatch{Model: opt.BE.Model, Batch: opt.BE.Batch}
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
		BEGraphs:     opt.BEGraphs,
		HPGraph:      opt.HPGraph,
		HPPassEvents: opt.HPPassEvents,
		HPGapUs:      float64(opt.HPGap) / float64(time.Microsecond),
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
		ps, err := c.hpPasses()
		if err != nil {
			return fmt.Errorf("HP alone: %w", err)
		}
		passes := kernelTimes(ps)
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
		chunk             int
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
			ps, b, chunk, err := c.beside(l, a)
			if err != nil {
				return nil, fmt.Errorf("%w: BE %s beside HP: %w", ErrMeasure, k.Name, err)
			}
			measured[i] = result{a, b, chunk, ps}
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
		if r.chunk > 1 {
			e.BEChunk = r.chunk
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
