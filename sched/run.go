package sched

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"atoll/gpu"
	"atoll/profiles"
)

// Workload is what Run serves.
type Workload struct {
	HP []HPWorkload
	BE []BEWorkload
}

// HPWorkload is one open-loop HP client: each arrival is a request that runs
// the profile's kernel sequence once.
type HPWorkload struct {
	Name     string
	Profile  *profiles.Profile
	Arrivals []time.Duration // device-clock times, ascending
}

// BEWorkload is one closed-loop BE client: from Start it runs iterations of
// the profile's kernel sequence back to back until the run ends.
type BEWorkload struct {
	Name    string
	Profile *profiles.Profile
	Start   time.Duration
}

// Options control Run.
type Options struct {
	Policy Policy
	// Duration: HP arrivals at or after it are not admitted and BE stops
	// at it; Run then drains the HP requests admitted.
	Duration time.Duration
	// Warmup: requests arriving, iterations starting, preemptions decided
	// and BE work completed before it are left out of the Trace.
	Warmup time.Duration
	// Binder makes launches; nil means NewProfileBinder (gpu/sim).
	Binder Binder
	// Stall is how long (device time) launches may be in flight with none
	// completing before Run gives up (default 10 s).
	Stall time.Duration
	// Drain is how long after Duration the run may take to drain
	// (default 60 s).
	Drain time.Duration
	// KernelSolo, when set, is each HP client's per-kernel solo duration
	// (indexed like the profile's kernels) that attribution measures
	// delay against; kernels it lacks use the profile's duration.
	KernelSolo [][]time.Duration
	// NoAttribution turns the per-request split into causes off
	// (RequestRecord.Causes stay zero); it costs about 0.1 µs of host time
	// per HP launch (BenchmarkAttribution).
	NoAttribution bool
	// RecordSpans keeps each measured HP kernel's device span (completion
	// − max(submission, previous completion)): Trace.KernelSpans.
	RecordSpans bool
	// OnDecision, when set, sees every decision as the driver applies it
	// (a decision log for debugging and reports). It must not block.
	OnDecision func(Decision)
	// NoHPGraphs launches HP requests kernel by kernel even where the
	// device records graphs (gpu.Grapher): by default a request whose
	// kernels are all launched at once, in Plain form, is submitted as one
	// graph (sched/graphs.go), one host call instead of one per kernel.
	NoHPGraphs bool
}

// Trace is what a run measured. Times are on the device clock.
type Trace struct {
	// Start is the device-clock time the run began; arrivals, warm-up and
	// duration are relative to it, record times are device-clock times.
	Start            time.Duration
	Policy           string
	Device           string
	Warmup, Duration time.Duration
	End              time.Duration // when the run drained
	Requests         []RequestRecord
	Iterations       []IterationRecord
	// BEWork is the profiled solo duration of the BE kernels completed in
	// [Warmup, Duration) (a kernel re-run after a cut counts once).
	BEWork         time.Duration
	BEWorkByClient []time.Duration
	Preemptions    []PreemptionRecord
	Launches       int // all launches of the run (a graph's kernels included)
	PaddedLaunches int
	// GraphLaunches are HP requests submitted as one graph each
	// (Options.NoHPGraphs); HPGraphs says whether graphs were used ("on",
	// "off", or "off: " and why).
	GraphLaunches int
	HPGraphs      string
	// GraphWaits are HP requests held in the driver until one of their
	// client's graph instances completed (sched/graphs.go).
	GraphWaits int
	// StaleGraphEvents are the device's answers "not complete" to a query
	// of a graph's event that still showed the previous replay (devices
	// that count them: gpu/cuda).
	StaleGraphEvents int
	// UnpaddedLaunches are padded decisions launched as the HP kernel alone
	// because the pair kernel was not ready (Binder answered ErrNotReady).
	UnpaddedLaunches int
	// LaunchHost is the host (wall) time the driver spent making launches
	// — binding, the device's Launch and the event Record — over the whole
	// run. On a real GPU, LaunchHost/Launches is the host cost of one
	// launch (the simulator's HostLaunchCost models it). Host splits it,
	// and adds the polls.
	LaunchHost time.Duration
	Host       HostTime
	Stats      Stats // the core's counters over the whole run
	// BlameByKernel sums, per BE kernel ("model/layer"), the delay of the
	// measured HP requests' kernels that ran beside it (co-run, drain and
	// padded causes; see Cause).
	BlameByKernel map[string]time.Duration
	// KernelSpans is, per HP client and kernel, the median device span
	// over the measured requests (Options.RecordSpans).
	KernelSpans [][]time.Duration
}

// HostTime is where the driver's host (wall) time went over a run, for
// the host-launch path's cost on a real GPU (on the simulator it is the Go
// code's own cost).
type HostTime struct {
	// The three parts of LaunchHost: up to the device's Launch call
	// (Binder.Bind: the launch record, args and buffers), the call, and
	// after it (the completion event taken and recorded, bookkeeping).
	Bind   time.Duration
	Launch time.Duration
	Record time.Duration
	// Poll is the time in polls for completions: an event Query per
	// launch in flight at the head of its stream, and Time (and the done
	// word) per completion; Queries counts the Query calls.
	Poll    time.Duration
	Queries int
	// GraphBuild is the time spent recording HP graphs before the run
	// (Options.NoHPGraphs).
	GraphBuild time.Duration
}

// Window is the measured interval, Duration − Warmup.
func (t *Trace) Window() time.Duration { return t.Duration - t.Warmup }

// Run serves w on dev under opt.Policy and returns what it measured. It
// owns dev for the call (one goroutine). It returns an error wrapping
// ErrConfig for a bad workload or options, ErrDevice when a device call
// fails (the message names the call), ErrStuck when no progress is
// possible, ErrEvent when the device's events contradict the core, or
// ctx.Err() when ctx is done.
func Run(ctx context.Context, dev gpu.Device, w Workload, opt Options) (*Trace, error) {
	d, err := newDriver(dev, w, opt)
	if err != nil {
		return nil, err
	}
	defer d.release()
	d.rebase(dev.Now())
	stale, counts := dev.(interface{ StaleGraphEvents() int })
	before := 0
	if counts {
		before = stale.StaleGraphEvents() // the device may have served earlier runs
	}
	if err := d.loop(ctx); err != nil {
		return nil, err
	}
	if counts {
		d.trace.StaleGraphEvents = stale.StaleGraphEvents() - before
	}
	return d.trace, nil
}

type dflight struct {
	l        Launch
	stream   gpu.Stream
	ev       gpu.Event
	done     gpu.HostWord // Resumable, Padded: this launch's done word
	raisedAt time.Duration
	unpadded bool     // a Padded decision launched Plain: its pair kernel was not ready (ErrNotReady)
	graphEv  bool     // ev belongs to an HP graph, not to the free events
	graph    *hpGraph // on a graph's last kernel: the instance to free when it completes
}

type driver struct {
	dev    gpu.Device
	core   *Core
	opt    Options
	binder Binder
	hpS    []gpu.Stream
	beS    []gpu.Stream
	flags  []gpu.HostWord
	ctrs   []gpu.Ptr
	relays []gpu.Ptr // per BE client: the flag-relay block of its Reset launches
	zero   gpu.HostWord
	words  []gpu.HostWord // free done words
	events []gpu.Event    // free events
	allEv  []gpu.Event
	// queues holds the launches in flight per stream, in launch order.
	// Work in one stream completes in order, so polling stops at the first
	// launch of each stream that has not completed: a poll costs O(streams
	// + completions), not O(launches in flight).
	queues  map[gpu.Stream][]*dflight
	qorder  []gpu.Stream // streams in creation order (deterministic polling)
	inputs  []Event
	next    int
	stopped bool
	snapA   []time.Duration
	haveA   bool
	trace   *Trace
	comps   []Event
	attr    *attributor
	// padsInFlight counts padded launches (with their pad) in flight.
	padsInFlight int
	// grapher is the device's graph interface while HP graphs are on,
	// graphs each HP client's instances (graphs.go).
	grapher   gpu.Grapher
	graphs    []hpGraphs
	allGraphs []gpu.Graph
	freed     bool // a poll freed a graph instance: submit what was held
}

func devErr(call string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrDevice, call, err)
}

func newDriver(dev gpu.Device, w Workload, opt Options) (*driver, error) {
	if dev == nil {
		return nil, fmt.Errorf("%w: nil device; open gpu/sim or gpu/cuda", ErrConfig)
	}
	if opt.Duration <= 0 || opt.Warmup < 0 || opt.Warmup >= opt.Duration {
		return nil, fmt.Errorf("%w: duration %v, warm-up %v (want 0 <= warm-up < duration)", ErrConfig, opt.Duration, opt.Warmup)
	}
	if opt.Stall <= 0 {
		opt.Stall = 10 * time.Second
	}
	if opt.Drain <= 0 {
		opt.Drain = 60 * time.Second
	}
	cfg := Config{Spec: dev.Info().Spec, Policy: opt.Policy}
	for i, c := range w.HP {
		if !slices.IsSorted(c.Arrivals) {
			return nil, fmt.Errorf("%w: HP client %d (%s): arrivals are not in ascending order", ErrConfig, i, c.Name)
		}
		cfg.HP = append(cfg.HP, c.Profile)
	}
	for _, c := range w.BE {
		cfg.BE = append(cfg.BE, c.Profile)
	}
	core, err := NewCore(cfg)
	if err != nil {
		return nil, err
	}
	d := &driver{dev: dev, core: core, opt: opt, binder: opt.Binder, queues: map[gpu.Stream][]*dflight{}, attr: newAttributor(w, opt)}
	d.trace = &Trace{Policy: opt.Policy.Name(), Device: dev.Info().Name, Warmup: opt.Warmup, Duration: opt.Duration,
		BEWorkByClient: make([]time.Duration, len(w.BE))}
	if d.binder == nil {
		if d.binder, err = NewProfileBinder(dev, w); err != nil {
			return nil, err
		}
	}
	// Streams per the policy's plan.
	plan := opt.Policy.Streams()
	prio := dev.Info().Priorities
	level := func(p Priority) int {
		if p == PriorityGreatest {
			return prio.Clamp(prio.Greatest)
		}
		return prio.Clamp(prio.Least)
	}
	ctxs := map[Class]gpu.Context{}
	ctxFor := func(sc StreamClass, class Class) (gpu.Context, error) {
		if !sc.OwnContext && sc.SMs <= 0 {
			return 0, nil
		}
		if c, ok := ctxs[class]; ok {
			return c, nil
		}
		if sc.OwnContext && sc.SMs > 0 {
			return 0, fmt.Errorf("%w: policy %s: %s streams both in a context of their own and in a partition of %d SMs", ErrConfig, opt.Policy.Name(), class, sc.SMs)
		}
		var c gpu.Context
		var err error
		if sc.OwnContext {
			if c, err = dev.NewContext(); err != nil {
				return 0, devErr("NewContext", err)
			}
		} else if c, err = dev.NewPartition(sc.SMs); err != nil {
			return 0, devErr(fmt.Sprintf("NewPartition(%d SMs) for %s streams", sc.SMs, class), err)
		}
		ctxs[class] = c
		return c, nil
	}
	var hpCtx []gpu.Context
	for i := range w.HP {
		cx, err := ctxFor(plan.HP, HP)
		if err != nil {
			return nil, err
		}
		hpCtx = append(hpCtx, cx)
		s, err := dev.NewStream(gpu.StreamOptions{Priority: level(plan.HP.Priority), Context: cx})
		if err != nil {
			return nil, devErr(fmt.Sprintf("NewStream for HP client %d", i), err)
		}
		d.hpS = append(d.hpS, s)
	}
	for i := range w.BE {
		cx, err := ctxFor(plan.BE, BE)
		if err != nil {
			return nil, err
		}
		s, err := dev.NewStream(gpu.StreamOptions{Priority: level(plan.BE.Priority), Context: cx})
		if err != nil {
			return nil, devErr(fmt.Sprintf("NewStream for BE client %d", i), err)
		}
		d.beS = append(d.beS, s)
	}
	words, err := dev.NewHostWords(1 + len(w.BE))
	if err != nil {
		return nil, devErr("NewHostWords (flags)", err)
	}
	if len(words) != 1+len(w.BE) {
		return nil, fmt.Errorf("%w: NewHostWords(%d) returned %d words", ErrDevice, 1+len(w.BE), len(words))
	}
	d.zero, d.flags = words[0], words[1:]
	dev.Store(d.zero, 0)
	for i := range w.BE {
		dev.Store(d.flags[i], 0)
		p, err := dev.Alloc(int64(d.progressWords() * 4))
		if err != nil {
			return nil, devErr(fmt.Sprintf("Alloc (progress counter of BE client %d)", i), err)
		}
		d.ctrs = append(d.ctrs, p)
		// Reset launches get a block of their own, zeroed once: kernels read
		// the flag through a relay in it instead of across PCIe (on the
		// H200 host reads at every block start cost 16x at 20 us blocks,
		// docs/physics.md). The relay trusts only its own launch's epoch, so
		// it never needs zeroing again, and it never mixes with the
		// resumable progress words above.
		r, err := dev.Alloc(int64(d.progressWords() * 4))
		if err != nil {
			return nil, devErr(fmt.Sprintf("Alloc (flag relay of BE client %d)", i), err)
		}
		d.relays = append(d.relays, r)
		if err := dev.CopyToDevice(r, make([]byte, d.progressWords()*4)); err != nil {
			return nil, devErr(fmt.Sprintf("CopyToDevice (zeroing the flag relay of BE client %d)", i), err)
		}
	}
	// Timed inputs: arrivals before Duration, BE starts, the stop.
	for i, c := range w.HP {
		for j, a := range c.Arrivals {
			if a >= opt.Duration {
				break
			}
			d.inputs = append(d.inputs, Event{Kind: EvArrive, Time: max(a, 0), Client: HPClientID(i), Request: j})
		}
	}
	for i, c := range w.BE {
		if c.Start < opt.Duration {
			d.inputs = append(d.inputs, Event{Kind: EvReady, Time: max(c.Start, 0), Client: BEClientID(i)})
		}
	}
	d.inputs = append(d.inputs, Event{Kind: EvStop, Time: opt.Duration})
	slices.SortStableFunc(d.inputs, func(a, b Event) int { return cmp.Compare(a.Time, b.Time) })
	if err := d.initGraphs(hpCtx); err != nil {
		return nil, err
	}
	return d, nil
}

// release frees what the run made; errors here cannot change the result.
func (d *driver) release() {
	for _, g := range d.allGraphs {
		_ = d.grapher.DestroyGraph(g)
	}
	for _, e := range d.allEv {
		_ = d.dev.DestroyEvent(e)
	}
	for _, p := range append(slices.Clone(d.ctrs), d.relays...) {
		_ = d.dev.Free(p)
	}
	for _, s := range append(slices.Clone(d.hpS), d.beS...) {
		_ = d.dev.DestroyStream(s)
	}
}

// rebase moves the run's timed inputs and window (arrivals, BE starts, the
// stop, warm-up) from "time since the run starts" to the device clock at t0.
// A real device's clock has been running since Open, and setting a run up
// (compiling kernels, uploading weights) can take seconds: without this
// every arrival would already be late when the loop starts. (The
// simulator's clock is still 0 here, so nothing moves on it.)
func (d *driver) rebase(t0 time.Duration) {
	for i := range d.inputs {
		d.inputs[i].Time += t0
	}
	d.opt.Duration += t0
	d.opt.Warmup += t0
	d.trace.Start = t0
}

// progressWords is the size of a BE client's progress block in int32 words.
func (d *driver) progressWords() int { return max(1, (d.binder.ProgressBytes()+3)/4) }

func (d *driver) stream(c ClientID) gpu.Stream {
	if c.Class == HP {
		return d.hpS[c.Index]
	}
	return d.beS[c.Index]
}

func (d *driver) doneWord() (gpu.HostWord, error) {
	if len(d.words) == 0 {
		ws, err := d.dev.NewHostWords(16)
		if err != nil {
			return gpu.HostWord{}, devErr("NewHostWords (done words)", err)
		}
		d.words = append(d.words, ws...)
	}
	if len(d.words) == 0 {
		return gpu.HostWord{}, fmt.Errorf("%w: NewHostWords(16) returned no words", ErrDevice)
	}
	w := d.words[len(d.words)-1]
	d.words = d.words[:len(d.words)-1]
	d.dev.Store(w, 0)
	return w, nil
}

func (d *driver) event() (gpu.Event, error) {
	if n := len(d.events); n > 0 {
		e := d.events[n-1]
		d.events = d.events[:n-1]
		return e, nil
	}
	e, err := d.dev.NewEvent()
	if err != nil {
		return 0, devErr("NewEvent", err)
	}
	d.allEv = append(d.allEv, e)
	return e, nil
}

// stopErr is the error of a run its context stopped: how far into the run
// (its span is Warmup + Duration after its start) and the device clock.
func (d *driver) stopErr(err error) error {
	now := d.dev.Now()
	return fmt.Errorf("sched: run stopped %s after its start (of a %s span; device clock %s): %w",
		us(now-d.trace.Start), us(d.opt.Duration-d.trace.Start), us(now), err)
}

func (d *driver) loop(ctx context.Context) error {
	lastProgress := d.dev.Now()
	for {
		if err := ctx.Err(); err != nil {
			return d.stopErr(err)
		}
		now := d.dev.Now()
		n, err := d.poll()
		if err != nil {
			return err
		}
		if n > 0 {
			lastProgress = now
		}
		// Feed completions and due inputs in time order (completions
		// first on ties: they happened before we saw the arrival).
		ci := 0
		for ci < len(d.comps) || (d.next < len(d.inputs) && d.inputs[d.next].Time <= now) {
			var ev Event
			if ci < len(d.comps) && (d.next >= len(d.inputs) || d.inputs[d.next].Time > now || d.comps[ci].Time <= d.inputs[d.next].Time) {
				ev = d.comps[ci]
				ci++
			} else {
				ev = d.inputs[d.next]
				d.next++
				lastProgress = now
			}
			if err := d.feed(ev); err != nil {
				return err
			}
		}
		if w, ok := d.core.NextWake(); ok && w <= now {
			if err := d.feed(Event{Kind: EvTick, Time: now}); err != nil {
				return err
			}
		}
		if d.stopped && d.core.Quiescent() {
			d.trace.End = now
			d.trace.Stats = d.core.State().Stats()
			d.trace.BlameByKernel = d.attr.blamed()
			d.trace.KernelSpans = d.attr.medianSpans()
			return nil
		}
		// What to wait for.
		until := time.Duration(-1)
		if d.next < len(d.inputs) {
			until = d.inputs[d.next].Time
		}
		if w, ok := d.core.NextWake(); ok && (until < 0 || w < until) {
			until = w
		}
		if d.core.InFlight() == 0 {
			if until < 0 {
				return fmt.Errorf("%w: nothing in flight and nothing to wait for, but work remains: %s", ErrStuck, d.core.Describe())
			}
		} else {
			if now-lastProgress > d.opt.Stall {
				return fmt.Errorf("%w: %d launches in flight and none completed in %v: %s", ErrStuck, d.core.InFlight(), d.opt.Stall, d.core.Describe())
			}
			if until < 0 || until > now+d.opt.Stall {
				until = now + d.opt.Stall
			}
		}
		if d.stopped && now > d.opt.Duration+d.opt.Drain {
			return fmt.Errorf("%w: not drained %v after the run ended: %s", ErrStuck, d.opt.Drain, d.core.Describe())
		}
		if until > now {
			if err := d.dev.Wait(ctx, until); err != nil {
				if ctx.Err() != nil {
					return d.stopErr(ctx.Err())
				}
				return devErr("Wait", err)
			}
			if d.dev.Now() < now {
				return fmt.Errorf("%w: device clock went back from %v to %v", ErrDevice, now, d.dev.Now())
			}
		}
	}
}

// poll collects the completed launches into d.comps, in time order.
func (d *driver) poll() (int, error) {
	t0 := time.Now()
	defer func() { d.trace.Host.Poll += time.Since(t0) }()
	d.comps = d.comps[:0]
	for _, s := range d.qorder {
		q := d.queues[s]
		n := 0
		for ; n < len(q); n++ {
			f := q[n]
			d.trace.Host.Queries++
			ok, err := d.dev.Query(f.ev)
			if err != nil {
				return 0, devErr(fmt.Sprintf("Query (event of L%d %s k%d)", f.l.ID, f.l.Client, f.l.Kernel), err)
			}
			if !ok {
				break
			}
			t, err := d.dev.Time(f.ev)
			if err != nil {
				return 0, devErr(fmt.Sprintf("Time (event of L%d)", f.l.ID), err)
			}
			ev := Event{Kind: EvComplete, Time: t, Launch: f.l.ID}
			if f.l.Client.Class == HP {
				d.attr.completed(f.l.Client.Index, t)
			}
			switch f.l.Form {
			case gpu.Reset:
				if f.raisedAt >= 0 && t > f.raisedAt {
					ev.Outcome = Cut
				}
			case gpu.Resumable, gpu.Padded:
				if d.dev.Load(f.done) != 1 {
					ev.Outcome = Preempted
				}
			}
			d.comps = append(d.comps, ev)
			if f.l.Form == gpu.Padded && !f.unpadded {
				d.padsInFlight--
			}
			if f.done.Valid() {
				d.words = append(d.words, f.done)
			}
			if f.graphEv {
				d.graphDone(f)
			} else {
				d.events = append(d.events, f.ev)
			}
		}
		if n > 0 {
			// Drop the completed front without moving the rest: with
			// thousands of launches queued (HP alone under overload) a
			// copy per completion made polling quadratic. append
			// reallocates once the front's space is used up.
			clear(q[:n])
			d.queues[s] = q[n:]
		}
	}
	slices.SortFunc(d.comps, func(a, b Event) int {
		if c := cmp.Compare(a.Time, b.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Launch, b.Launch)
	})
	if d.freed {
		d.freed = false
		if err := d.submitHeld(); err != nil {
			return 0, err
		}
	}
	return len(d.comps), nil
}

func (d *driver) feed(ev Event) error {
	if !d.haveA && ev.Time >= d.opt.Warmup {
		d.snapA, d.haveA = d.core.State().Stats().BEWorkByClient, true
	}
	if ev.Kind == EvStop {
		if !d.haveA {
			d.snapA, d.haveA = d.core.State().Stats().BEWorkByClient, true
		}
		b := d.core.State().Stats().BEWorkByClient
		for i := range b {
			d.trace.BEWorkByClient[i] = b[i] - d.snapA[i]
			d.trace.BEWork += d.trace.BEWorkByClient[i]
		}
		d.stopped = true
	}
	if err := d.core.Step(ev); err != nil {
		return fmt.Errorf("sched: %s at %s: %w", ev.Kind, us(ev.Time), err)
	}
	return d.applyAll(d.core.Decisions(), d.apply)
}

func (d *driver) apply(dec Decision) error {
	if d.opt.OnDecision != nil {
		d.opt.OnDecision(dec)
	}
	switch dec.Kind {
	case DecLaunch:
		return d.launch(dec.Launch)
	case DecRaise, DecLower:
		v := uint32(0)
		if dec.Kind == DecRaise {
			v = 1
			now := d.dev.Now()
			for _, q := range d.queues {
				for _, f := range q {
					if f.l.Client == dec.Client && f.l.Form == gpu.Reset && f.raisedAt < 0 {
						f.raisedAt = now
					}
				}
			}
		}
		d.dev.Store(d.flags[dec.Client.Index], v)
		if v == 1 {
			d.attr.raised()
		}
	case DecResetProgress:
		if err := d.dev.Memset32(d.stream(dec.Stream), d.ctrs[dec.Client.Index], 0, d.progressWords()); err != nil {
			return devErr(fmt.Sprintf("Memset32 (progress counter of %s)", dec.Client), err)
		}
	case DecRequestDone:
		r := dec.Request
		d.attr.request(&r, r.Arrival >= d.opt.Warmup)
		if r.Arrival >= d.opt.Warmup {
			d.trace.Requests = append(d.trace.Requests, r)
		}
	case DecIterationDone:
		if it := dec.Iteration; it.Start >= d.opt.Warmup && it.End <= d.opt.Duration {
			d.trace.Iterations = append(d.trace.Iterations, it)
		}
	case DecPreemptionDone:
		if p := dec.Preemption; p.Decided >= d.opt.Warmup && p.Decided < d.opt.Duration {
			d.trace.Preemptions = append(d.trace.Preemptions, p)
		}
	}
	return nil
}

func (d *driver) launch(l Launch) error {
	what := func() string { return fmt.Sprintf("L%d %s k%d %s", l.ID, l.Client, l.Kernel, l.Form) }
	t0 := time.Now()
	var tLaunch, tRecord time.Time // the device's Launch call starts, returns
	defer func() {
		end := time.Now()
		d.trace.LaunchHost += end.Sub(t0)
		if !tRecord.IsZero() {
			d.trace.Host.Bind += tLaunch.Sub(t0)
			d.trace.Host.Launch += tRecord.Sub(tLaunch)
			d.trace.Host.Record += end.Sub(tRecord)
		}
	}()
	f := &dflight{l: l, stream: d.stream(l.Stream), raisedAt: -1}
	req := BindRequest{Client: l.Client, Kernel: l.Kernel, Form: l.Form}
	var err error
	switch l.Form {
	case gpu.Reset:
		req.Ctl = Control{Flag: d.flags[l.Client.Index], Counter: d.relays[l.Client.Index]}
	case gpu.Resumable:
		if f.done, err = d.doneWord(); err != nil {
			return err
		}
		req.Ctl = Control{Flag: d.flags[l.Client.Index], Counter: d.ctrs[l.Client.Index], Done: f.done}
	case gpu.Padded:
		if f.done, err = d.doneWord(); err != nil {
			return err
		}
		// The pad is not preemptible by flag (d.zero is never raised): it
		// ends with the HP blocks it shares the launch with.
		req.Pad = &PadRequest{Client: l.Pad.Client, Kernel: l.Pad.Kernel, Blocks: l.Pad.Blocks,
			Ctl: Control{Flag: d.zero, Counter: d.ctrs[l.Pad.Client.Index], Done: f.done}}
	}
	bound, err := d.binder.Bind(req)
	if l.Form == gpu.Padded && errors.Is(err, ErrNotReady) {
		// The pair kernel is not ready: run the HP blocks alone. The
		// pad's done word stays 0, so the core sees its BE kernel
		// preempted with no progress, and resumes it later.
		req.Form, req.Pad = gpu.Plain, nil
		bound, err = d.binder.Bind(req)
		f.unpadded = true
		d.trace.UnpaddedLaunches++
	}
	if err != nil {
		if f.done.Valid() {
			d.words = append(d.words, f.done)
		}
		return fmt.Errorf("sched: bind %s: %w", what(), err)
	}
	gl := *bound
	gl.Form = l.Form
	if f.unpadded {
		gl.Form, gl.Pad = gpu.Plain, nil
	}
	// The kernel may start as soon as the launch call is made: attribution
	// counts the host's part up to here.
	submitted := d.dev.Now()
	tLaunch = time.Now()
	if err := d.dev.Launch(f.stream, &gl); err != nil {
		if f.done.Valid() {
			d.words = append(d.words, f.done)
		}
		return devErr("Launch "+what(), err)
	}
	tRecord = time.Now()
	if f.ev, err = d.event(); err != nil {
		return err
	}
	if err := d.dev.Record(f.ev, f.stream); err != nil {
		return devErr("Record (after "+what()+")", err)
	}
	d.attribute(l, f, submitted)
	q, ok := d.queues[f.stream]
	if !ok {
		d.qorder = append(d.qorder, f.stream)
	}
	d.queues[f.stream] = append(q, f)
	d.trace.Launches++
	if l.Form == gpu.Padded && !f.unpadded {
		d.trace.PaddedLaunches++
		d.padsInFlight++
	}
	return nil
}
