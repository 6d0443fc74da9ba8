package sched

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"atoll/gpu"
)

type dflight struct {
	l        Launch
	stream   gpu.Stream
	ev       gpu.Event
	done     gpu.HostWord // Resumable, Padded: this launch's done word
	raisedAt time.Duration
	unpadded bool          // a Padded decision launched Plain: its pair kernel was not ready (ErrNotReady)
	graphEv  bool          // ev belongs to an HP graph, not to the free events
	graph    *hpGraph      // on a graph's last kernel: the instance to free when it completes
	chunk    *beChunk      // on a BE chunk's last kernel: the chunk to free when it completes
	at       time.Duration // BE own-stream launches: device clock once enqueued (Record returned)
}

// driver is the device side of the loop: the streams, flags, counters and
// events of a workload's clients, the launches in flight per stream, and
// the Trace. The loop (loop.go) feeds the core; the driver carries out its
// device decisions and polls for completions.
type driver struct {
	dev gpu.Device
	// host is dev as a model of the host's time (the simulator), told of
	// every round's launch decisions; nil on a real GPU.
	host gpu.HostModeler
	// hpNames and beNames name the clients in errors.
	hpNames, beNames []string
	// groups holds, per HP client, the clients of its HPWorkload.Group in
	// workload order (nil: no group).
	groups [][]int
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
	stopped bool         // the stop was fed
	snapA   Stats        // the core's counters at the warm-up's end
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
	beChunks  [][]*beChunk // per BE client and chunk's first kernel (begraphs.go); nil: BE graphs off
	allGraphs []gpu.Graph
	freed     bool // a poll freed a graph instance: submit what was held
	// beEmptyFrom holds, per BE client, the device time its own stream
	// ran out of work (its last launch completed) while no launch
	// followed yet; -1 when its stream has work or that is not known.
	// keepSpans says whether beEmpty records them (Run; not Online, which
	// serves for ever and keeps no records).
	beEmptyFrom []time.Duration
	keepSpans   bool
}

// beEmpty records that BE client c's own stream had no work in [from, to)
// (device clock), when to is after from.
func (d *driver) beEmpty(c int, from, to time.Duration) {
	if to > from && d.keepSpans {
		d.trace.BEEmpty[c] = append(d.trace.BEEmpty[c], Span{From: from, To: to})
	}
}

// beEnqueued records that BE client c's own stream got work at at (device
// clock), closing the span it had none (beEmptyFrom).
func (d *driver) beEnqueued(c int, at time.Duration) {
	if from := d.beEmptyFrom[c]; from >= 0 {
		d.beEmpty(c, from, at)
		d.beEmptyFrom[c] = -1
	}
}

// hostSpent adds one submission's host time to the trace: binding from t0
// to tLaunch, the device's launch call to tRecord, the event record and
// bookkeeping to end.
func (d *driver) hostSpent(t0, tLaunch, tRecord, end time.Time) {
	h := &d.trace.Host
	call := tRecord.Sub(tLaunch)
	d.trace.LaunchHost += end.Sub(t0)
	h.Bind += tLaunch.Sub(t0)
	h.Launch += call
	h.Record += end.Sub(tRecord)
	if call >= SlowLaunch {
		h.SlowLaunches++
		h.SlowLaunchTime += call
	}
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
	_, grapher := dev.(gpu.Grapher)
	cfg := Config{Spec: dev.Info().Spec, Policy: opt.Policy, BEChunks: grapher && !opt.NoBEGraphs}
	var hpNames, beNames []string
	for i, c := range w.HP {
		hpNames = append(hpNames, c.Name)
		if !slices.IsSorted(c.Arrivals) {
			return nil, fmt.Errorf("%w: HP client %d (%s): arrivals are not in ascending order", ErrConfig, i, c.Name)
		}
		cfg.HP = append(cfg.HP, c.Profile)
		cfg.HPBatched = append(cfg.HPBatched, c.Batched)
	}
	groups, err := hpGroups(w.HP)
	if err != nil {
		return nil, err
	}
	for _, c := range w.BE {
		beNames = append(beNames, c.Name)
		cfg.BE = append(cfg.BE, c.Profile)
	}
	core, err := NewCore(cfg)
	if err != nil {
		return nil, err
	}
	host, _ := dev.(gpu.HostModeler)
	d := &driver{dev: dev, host: host, hpNames: hpNames, beNames: beNames, groups: groups, core: core, opt: opt, binder: opt.Binder, queues: map[gpu.Stream][]*dflight{}, attr: newAttributor(core.State().HP(), core.State().BE(), opt)}
	d.trace = &Trace{Policy: opt.Policy.Name(), Device: dev.Info().Name, Warmup: opt.Warmup, Duration: opt.Duration,
		BEWorkByClient: make([]time.Duration, len(w.BE)), BEEmpty: make([][]Span, len(w.BE))}
	d.beEmptyFrom = make([]time.Duration, len(w.BE))
	for i := range d.beEmptyFrom {
		d.beEmptyFrom[i] = -1
	}
	if d.binder == nil {
		if d.binder, err = NewProfileBinder(dev, w); err != nil {
			return nil, err
		}
	}
	// Streams per the policy's plan.
	plan := opt.Policy.Streams()
	d.trace.Streams = plan.String()
	prio := dev.Info().Priorities
	level := func(p Priority) int {
		if p == PriorityGreatest {
			return prio.Clamp(prio.Greatest)
		}
		return prio.Clamp(prio.Least)
	}
	ctxs := map[Class]gpu.Context{}
	ctxFor := func(sc StreamClass, class Class) (gpu.Context, error) {
		if sc.Rest && sc.SMs <= 0 {
			return 0, fmt.Errorf("%w: policy %s: %s streams on the rest of a partition of %d SMs", ErrConfig, opt.Policy.Name(), class, sc.SMs)
		}
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
		switch {
		case sc.OwnContext:
			if c, err = dev.NewContext(); err != nil {
				return 0, devErr("NewContext", err)
			}
		case sc.Rest:
			if c, err = dev.NewPartitionRest(sc.SMs); err != nil {
				return 0, devErr(fmt.Sprintf("NewPartitionRest(%d SMs) for %s streams", sc.SMs, class), err)
			}
		default:
			if c, err = dev.NewPartition(sc.SMs); err != nil {
				return 0, devErr(fmt.Sprintf("NewPartition(%d SMs) for %s streams", sc.SMs, class), err)
			}
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
	if err := d.initGraphs(); err != nil {
		return nil, err
	}
	if err := d.initBEGraphs(); err != nil {
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

// poll collects the completed launches into d.comps, in time order.
func (d *driver) poll() (int, error) {
	t0 := time.Now()
	defer func() { d.trace.Host.Poll += time.Since(t0) }()
	d.comps = d.comps[:0]
	for _, s := range d.qorder {
		q := d.queues[s]
		n := 0
		// The kernels of a BE chunk share its event: one answer serves all.
		var doneEv gpu.Event
		var doneAt time.Duration
		for ; n < len(q); n++ {
			f := q[n]
			t := doneAt
			if !f.graphEv || f.ev != doneEv {
				d.trace.Host.Queries++
				ok, err := d.dev.Query(f.ev)
				if err != nil {
					return 0, devErr(fmt.Sprintf("Query (event of L%d %s k%d)", f.l.ID, f.l.Client, f.l.Kernel), err)
				}
				if !ok {
					break
				}
				if t, err = d.dev.Time(f.ev); err != nil {
					return 0, devErr(fmt.Sprintf("Time (event of L%d)", f.l.ID), err)
				}
				doneEv, doneAt = f.ev, t
			}
			ev := Event{Kind: EvComplete, Time: t, Launch: f.l.ID}
			if f.l.Client.Class == BE && f.l.Stream.Class == BE {
				// Stream order: the next launch on it starts after this one
				// and was enqueued at its at; none yet, the stream is empty
				// from t until the next launch.
				c := f.l.Client.Index
				if n+1 < len(q) {
					d.beEmpty(c, t, q[n+1].at)
				} else {
					d.beEmptyFrom[c] = t
				}
			}
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
	what := func() string {
		return fmt.Sprintf("L%d %s k%d%s %s", l.ID, l.Client, l.Kernel, variantTag(l.Variant), l.Form)
	}
	t0 := time.Now()
	var tLaunch, tRecord time.Time // the device's Launch call starts, returns
	defer func() {
		end := time.Now()
		if tRecord.IsZero() {
			d.trace.LaunchHost += end.Sub(t0)
			return
		}
		d.hostSpent(t0, tLaunch, tRecord, end)
	}()
	f := &dflight{l: l, stream: d.stream(l.Stream), raisedAt: -1}
	req := BindRequest{Client: l.Client, Kernel: l.Kernel, Variant: l.Variant, Form: l.Form}
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
	if l.Client.Class == BE && l.Stream.Class == BE {
		f.at = d.dev.Now()
		d.beEnqueued(l.Client.Index, f.at)
	}
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

// variantTag names an HP pass variant in messages ("" for the profile).
func variantTag(v int) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf(" (batched %d)", v)
}

// MaxGroup bounds the clients of one HPWorkload.Group (each holds its own
// buffers: on a GPU, a copy of the model).
const MaxGroup = 16

// hpGroups maps each HP client to the members of its Group (nil when it
// has none), refusing a group whose members run different profiles or
// that has more than MaxGroup members.
func hpGroups(hp []HPWorkload) ([][]int, error) {
	byName := map[string][]int{}
	for i, c := range hp {
		if c.Group != "" {
			byName[c.Group] = append(byName[c.Group], i)
		}
	}
	groups := make([][]int, len(hp))
	for i, c := range hp {
		if c.Group == "" {
			continue
		}
		m := byName[c.Group]
		if len(m) > MaxGroup {
			return nil, fmt.Errorf("%w: HP group %q has %d clients (at most %d)", ErrConfig, c.Group, len(m), MaxGroup)
		}
		if p, q := hp[m[0]].Profile, c.Profile; p.Model != q.Model || p.Batch != q.Batch || len(p.Kernels) != len(q.Kernels) {
			return nil, fmt.Errorf("%w: HP group %q: client %d (%s) and client %d (%s) run different profiles", ErrConfig, c.Group, m[0], hp[m[0]].Name, i, c.Name)
		}
		groups[i] = m
	}
	return groups, nil
}

// leastBusy is the member of members (a group, in workload order) with the
// fewest requests unfinished by busy, the first on a tie; c itself when it
// has no group.
func leastBusy(c int, members []int, busy func(int) int) int {
	best, least := c, -1
	for _, m := range members {
		if n := busy(m); least < 0 || n < least {
			best, least = m, n
		}
	}
	return best
}
