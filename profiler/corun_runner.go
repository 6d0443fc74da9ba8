package profiler

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/models/exec"
)

// coRunner holds the device objects of one co-run measurement.
type coRunner struct {
	ctx context.Context
	dev gpu.Device
	opt CoRunOptions

	hp, be     gpu.Stream // HP: primary context, greatest priority; BE: the partition, least
	beCtx      gpu.Context
	hpLaunches []*gpu.Launch
	events     []gpu.Event // Passes × len(ends) + 1
	ends       []int       // per pass, the HP kernels after which an event is recorded (index + 1)
	starts     []gpu.Event // HPGap: each pass's start, recorded on the idle HP stream
	beStart    gpu.Event
	ring       []gpu.Event // BEDepth: one per BE launch in flight
	graphs     []gpu.Graph // HPGraph: one per pass
	beEnd      gpu.Event
	allocs     []gpu.Ptr

	blocker         *gpu.Launch // a long GEMM: lets the host enqueue ahead of the GPU
	blockerHPUs     float64     // its time on the HP stream (whole GPU)
	blockerBEUs     float64     // and in the partition
	hostUs          float64     // host time to enqueue one HP pass with its events
	reqUs           float64     // the last baseline's median HP pass, µs
	boundedBlockers int         // BEDepth: blockers the last bounded run's enqueueing needed
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
	var cx gpu.Context // every SM: the primary context
	if c.opt.PartitionSMs < spec.SMs {
		if cx, err = c.dev.NewPartition(c.opt.PartitionSMs); err != nil {
			return fmt.Errorf("NewPartition(%d): %w", c.opt.PartitionSMs, err)
		}
	}
	c.beCtx = cx
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
	c.ends = []int{n}
	if !c.opt.HPPassEvents {
		c.ends = make([]int, n)
		for i := range c.ends {
			c.ends[i] = i + 1
		}
	}
	c.events = make([]gpu.Event, c.opt.Passes*len(c.ends)+1)
	if c.opt.HPGap > 0 {
		c.starts = make([]gpu.Event, c.opt.Passes)
	}
	for _, evs := range [][]gpu.Event{c.events, c.starts} {
		for i := range evs {
			if evs[i], err = c.dev.NewEvent(); err != nil {
				return fmt.Errorf("NewEvent: %w", err)
			}
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
				steps[i].Launch = l
			}
			m := len(c.ends)
			for j, end := range c.ends {
				steps[end-1].Event = c.events[p*m+j+1]
			}
			g, err := gr.NewGraph(c.hp, steps)
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
	c.destroyGraphs(c.graphs)
	for _, p := range c.allocs {
		_ = c.dev.Free(p)
	}
	for _, e := range slices.Concat(c.events, c.starts, c.ring, []gpu.Event{c.beStart, c.beEnd}) {
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
func (c *coRunner) wait(e gpu.Event) error { return waitEvent(c.ctx, c.dev, e) }

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

// hpPass is one timed HP pass: its start and end on the device clock and
// each kernel's time, µs.
type hpPass struct {
	start, end float64
	us         []float64
}

// hpPasses times Passes HP passes on the HP stream behind a blocker (so the
// host is ahead of the GPU from the first kernel).
func (c *coRunner) hpPasses() ([]hpPass, error) {
	if c.opt.HPGap > 0 {
		if err := c.enqueuePasses(nil); err != nil {
			return nil, err
		}
		return c.readPasses()
	}
	for range c.hpBlockers() {
		if err := c.dev.Launch(c.hp, c.blocker); err != nil {
			return nil, fmt.Errorf("launch %s: %w", c.blocker.Name, err)
		}
	}
	start := c.dev.Now() // the device's clock: on the simulator, host costs are virtual
	if err := c.enqueuePasses(nil); err != nil {
		return nil, err
	}
	c.hostUs = float64(c.dev.Now()-start) / float64(time.Microsecond) / float64(c.opt.Passes)
	return c.readPasses()
}

// readPasses waits for the passes enqueued last and reads their events.
func (c *coRunner) readPasses() ([]hpPass, error) {
	if err := c.wait(c.events[len(c.events)-1]); err != nil {
		return nil, err
	}
	ts := make([]float64, len(c.events))
	for i, e := range c.events {
		t, err := c.at(e)
		if err != nil {
			return nil, err
		}
		ts[i] = t
	}
	n := len(c.ends)
	passes := make([]hpPass, c.opt.Passes)
	for p := range passes {
		us := make([]float64, n)
		for i := range n {
			us[i] = ts[p*n+i+1] - ts[p*n+i]
		}
		passes[p] = hpPass{start: ts[p*n], end: ts[(p+1)*n], us: us}
		if c.starts != nil { // sent alone: timed from its own start
			t, err := c.at(c.starts[p])
			if err != nil {
				return nil, err
			}
			passes[p].start, us[0] = t, ts[(p+1)*n]-t
		}
	}
	return passes, nil
}

// kernelTimes is each pass's per-kernel µs.
func kernelTimes(ps []hpPass) [][]float64 {
	out := make([][]float64, len(ps))
	for i, p := range ps {
		out[i] = p.us
	}
	return out
}

// enqueuePasses enqueues the HP passes on the HP stream after the record of
// the first event: kernel by kernel with an event after each, or one graph
// per pass (HPGraph). between, when set, is called every four kernels (or
// after each graph).
func (c *coRunner) enqueuePasses(between func() error) error {
	if err := c.dev.Record(c.events[0], c.hp); err != nil {
		return fmt.Errorf("Record: %w", err)
	}
	m := len(c.ends)
	for p := range c.opt.Passes {
		if c.starts != nil {
			if err := c.gap(p, between); err != nil {
				return err
			}
		}
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
		j := 0 // the pass's next event
		for i, l := range c.hpLaunches {
			if err := c.dev.Launch(c.hp, l); err != nil {
				return fmt.Errorf("launch %s: %w", l.Name, err)
			}
			if c.ends[j] == i+1 {
				if err := c.dev.Record(c.events[p*m+j+1], c.hp); err != nil {
					return fmt.Errorf("Record: %w", err)
				}
				j = min(j+1, m-1)
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

// gap waits, calling between meanwhile, until pass p-1 has completed and
// HPGap has passed since (for the first pass, HPGap from now), then
// records pass p's start on the idle HP stream.
func (c *coRunner) gap(p int, between func() error) error {
	var from float64 // device µs
	if p == 0 {
		from = float64(c.dev.Now()) / float64(time.Microsecond)
	} else {
		end := c.events[p*len(c.ends)]
		if err := c.waitCalling(end, between); err != nil {
			return err
		}
		var err error
		if from, err = c.at(end); err != nil {
			return err
		}
	}
	until := from + float64(c.opt.HPGap)/float64(time.Microsecond)
	for float64(c.dev.Now())/float64(time.Microsecond) < until {
		if err := c.pause(between); err != nil {
			return err
		}
	}
	if err := c.dev.Record(c.starts[p], c.hp); err != nil {
		return fmt.Errorf("Record: %w", err)
	}
	return nil
}

// waitCalling waits until e has completed, calling between (when set)
// every 2 µs of device time meanwhile; it gives up after 60 s of wall time.
func (c *coRunner) waitCalling(e gpu.Event, between func() error) error {
	return waitDone(c.dev, e, func() error { return c.pause(between) })
}

// pause calls between (when set) and waits 2 µs of device time.
func (c *coRunner) pause(between func() error) error {
	if between != nil {
		if err := between(); err != nil {
			return err
		}
	}
	return c.dev.Wait(c.ctx, c.dev.Now()+2*time.Microsecond)
}

// maxBoundedBlockers bounds the blockers before a bounded run's HP passes
// (at a few hundred µs each, a few tens of ms).
const maxBoundedBlockers = 256

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
//
// With BEDepth, a kernel whose queue would hold less than 200 µs is queued
// in graphs of chunk launches (enough for 50 µs), one event per graph, so
// that the host's refills — a launch a kernel otherwise — do not bound it.
func (c *coRunner) beside(l *gpu.Launch, aloneUs float64) (passes [][]float64, be float64, chunk int, err error) {
	if c.opt.BEDepth > 0 {
		chunk = c.beChunk(aloneUs)
		// Once more if passes were dropped because the host was still
		// enqueueing them: the run has sized the blockers for next time.
		before := c.boundedBlockers
		passes, be, chunk, err = c.besideBounded(l, chunk)
		if err == nil && c.opt.HPGap == 0 && len(passes) < c.opt.Passes && c.boundedBlockers > max(before, 2*c.hpBlockers()) {
			passes, be, chunk, err = c.besideBounded(l, chunk)
		}
		return passes, be, chunk, err
	}
	passes, err = c.besideQueued(l, aloneUs)
	return passes, 0, 0, err
}

// chunkGraphs records, for each ring slot, a graph of chunk launches of l
// in the BE partition with the slot's event after the last; where chunk is
// 1 or the device cannot record them it returns none and 1 (one launch an
// item).
func (c *coRunner) chunkGraphs(l *gpu.Launch, chunk int) ([]gpu.Graph, int) {
	gr, ok := c.dev.(gpu.Grapher)
	if (chunk <= 1 && !c.opt.BEGraphs) || !ok {
		return nil, 1
	}
	var graphs []gpu.Graph
	for slot := range c.ring {
		steps := make([]gpu.GraphStep, chunk)
		for i := range steps {
			steps[i].Launch = l
		}
		steps[chunk-1].Event = c.ring[slot]
		g, err := gr.NewGraph(c.be, steps)
		if err != nil {
			c.destroyGraphs(graphs)
			return nil, 1
		}
		graphs = append(graphs, g)
	}
	return graphs, chunk
}

func (c *coRunner) destroyGraphs(gs []gpu.Graph) {
	if gr, ok := c.dev.(gpu.Grapher); ok {
		for _, g := range gs {
			_ = gr.DestroyGraph(g)
		}
	}
}

// Bounded BE queues: a kernel whose BEDepth launches hold less than
// coRunQueueUs is queued in graphs of launches lasting coRunChunkUs (at
// most coRunMaxChunk launches each).
const (
	coRunQueueUs  = 200.0
	coRunChunkUs  = 50.0
	coRunMaxChunk = 256
)

// beChunk is how many launches of a BE kernel of aloneUs one queued item
// holds (1: launched one by one; also on a device without graphs).
func (c *coRunner) beChunk(aloneUs float64) int {
	if _, ok := c.dev.(gpu.Grapher); !ok || aloneUs <= 0 {
		return 1
	}
	if c.opt.BEGraphs {
		return max(1, min(coRunMaxChunk, int(math.Ceil(coRunChunkUs/aloneUs))))
	}
	if float64(c.opt.BEDepth)*aloneUs >= coRunQueueUs {
		return 1
	}
	return min(coRunMaxChunk, int(math.Ceil(coRunChunkUs/aloneUs)))
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
	all, err := c.hpPasses()
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
	for _, p := range all {
		if p.end > t {
			break
		}
		out = append(out, p.us)
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
func (c *coRunner) besideBounded(l *gpu.Launch, chunk int) (passes [][]float64, beside float64, used int, err error) {
	d := c.opt.BEDepth
	next := 0            // ring slot of the oldest launch in flight
	var beDone []float64 // completion times of BE launches seen, device µs
	graphs, chunk := c.chunkGraphs(l, chunk)
	defer c.destroyGraphs(graphs)
	launchBE := func(slot int) error {
		if graphs != nil {
			if err := c.dev.(gpu.Grapher).LaunchGraph(graphs[slot], c.be); err != nil {
				return fmt.Errorf("LaunchGraph (%s): %w", l.Name, err)
			}
			return nil
		}
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
		return nil, 0, 0, fmt.Errorf("Record: %w", err)
	}
	for i := range d {
		if err := launchBE(i); err != nil {
			return nil, 0, 0, err
		}
	}
	// The host refills BE while it enqueues HP, so it needs longer than
	// alone: twice hpBlockers, or what the last bounded run's enqueueing
	// took if more.
	blockers := max(2*c.hpBlockers(), c.boundedBlockers)
	if c.opt.HPGap > 0 {
		blockers = 0 // each pass is sent when its time comes
	}
	for range blockers {
		if err := c.dev.Launch(c.hp, c.blocker); err != nil {
			return nil, 0, 0, fmt.Errorf("launch %s: %w", c.blocker.Name, err)
		}
	}
	start := c.dev.Now()
	if err := c.enqueuePasses(refill); err != nil {
		return nil, 0, 0, err
	}
	enqUs := float64(c.dev.Now()-start) / float64(time.Microsecond)
	c.boundedBlockers = min(maxBoundedBlockers, int(math.Ceil(1.3*enqUs/c.blockerHPUs)))
	enqueued := float64(c.dev.Now()) / float64(time.Microsecond) // device clock
	if err := c.waitCalling(c.events[len(c.events)-1], refill); err != nil {
		return nil, 0, 0, err
	}
	// The BE queue stops here: its last launch ends the co-run.
	last := (next + d - 1) % d
	if err := c.wait(c.ring[last]); err != nil {
		return nil, 0, 0, err
	}
	first, err := c.at(c.beStart)
	if err != nil {
		return nil, 0, 0, err
	}
	stop, err := c.at(c.ring[last])
	if err != nil {
		return nil, 0, 0, err
	}
	beDone = append(beDone, stop)
	all, err := c.readPasses()
	if err != nil {
		return nil, 0, 0, err
	}
	var out [][]float64
	from, to := math.Inf(1), math.Inf(-1) // the covered passes' span
	for _, p := range all {
		// A pass that began before the host had enqueued every pass may
		// have waited for its launches: dropped with those outside BE.
		if p.start < first || (c.starts == nil && p.start < enqueued) || p.end > stop {
			continue
		}
		out = append(out, p.us)
		from, to = min(from, p.start), max(to, p.end)
	}
	k := 0
	for _, t := range beDone {
		if t >= from && t <= to {
			k++
		}
	}
	if k >= 4 {
		beside = (to - from) / float64(k*chunk)
	}
	return out, beside, chunk, nil
}
