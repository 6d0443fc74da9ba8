package sched

import (
	"context"
	"errors"
	"fmt"
	"time"

	"atoll/gpu"
)

// loop is the one scheduler loop. Run drives it over a fixed timeline (HP
// arrivals, BE starts, the stop, all known in advance) and Online over
// submissions from other goroutines; everything else is the same code:
// each round polls the device, feeds the core the completions and the due
// inputs in time order, hands idle HP clients their next requests and idle
// BE clients their next runs, ticks the policy, and then waits for the
// device, the next input or wake, or a submission. Within a round the HP
// launches decided go to the device before the BE launches (holdBE).
type loop struct {
	d *driver
	// timeline holds Run's timed inputs in time order (EvArrive, EvReady,
	// EvStop); next is the first not yet taken. Online has none.
	timeline []Event
	next     int
	// o is the daemon's side (submissions, counters) under Online; nil
	// under Run, where nothing is submitted while the loop runs.
	o *Online
	// perClient bounds the HP requests of one client the core holds at
	// once (0: no bound). Online holds 1, so a model instance's buffers
	// are not overwritten while a request uses them; the rest wait in
	// pend. Run gives the core every arrival at its time.
	perClient int
	hooks     OnlineHooks
	pace      bool
	// quantum is the longest the loop waits on the device with work in
	// flight before it looks at its inputs again.
	quantum time.Duration
	stall   time.Duration
	pend    [][]*request // per HP client: arrived, not in the core
	in      [][]*request // per HP client: in the core, in arrival order
	// batching marks the HP clients with batched profiles (anyBatching:
	// one does); formed counts, per client, the requests of in that passes
	// have taken (passes).
	batching    []bool
	anyBatching bool
	formed      []int
	beCur       []*beRun
	// hpFirst is set while a round feeds its completions and inputs:
	// BE launches decided meanwhile wait in beHeld and go to the device
	// after the round's HP launches (flushBE), so an HP request arriving
	// in a round that also refills BE is launched before the refills,
	// not behind their host time.
	hpFirst bool
	beHeld  []Decision
	rest    []Decision // holdBE's scratch
	beQ     [][]*beRun
	// keep records requests, iterations and preemptions in the Trace
	// (Run); Online's counters are published instead.
	keep      bool
	wallStart time.Time
	devStart  time.Duration
	timer     *time.Timer
	lastProg  time.Duration
}

// request is an HP request from its arrival until its last kernel
// completes.
type request struct {
	client  int
	id      uint64
	tag     any
	out     chan OnlineResult // Online: where the result goes; nil under Run
	arrival time.Duration
	input   time.Duration // host time of its BeforeRequest hook
	// variant and slot place it in its pass (batching clients); err is its
	// BeforePass hook's failure, reported when the pass completes.
	variant, slot int
	err           error
}

// beRun is a BE run the loop holds. The core does the stopping: the run
// starts with EvReady{Iterations}, so the core itself marks the client
// not ready when its last iteration completes; a cancel sends EvPause.
// Run's BE clients have one run each with no budget (Iterations 0).
type beRun struct {
	id        uint64
	run       BERun
	prog      *BEProgress
	done      int
	cancelled bool
	endErr    error // why it was cancelled when not by StopBE
}

// end publishes the run's end.
func (r *beRun) end(done int, err error) { r.prog.end(done, err) }

// roundEnd is what a round leaves the loop to do.
type roundEnd int

const (
	roundBusy roundEnd = iota // wait for the device, an input or a wake
	roundIdle                 // nothing in flight or due: wait for a submission
	roundDone                 // the stop has drained (Run)
)

func newLoop(d *driver, o *Online) *loop {
	nHP, nBE := len(d.hpS), len(d.beS)
	l := &loop{d: d, o: o, keep: o == nil, quantum: d.opt.Stall, stall: d.opt.Stall,
		pend: make([][]*request, nHP), in: make([][]*request, nHP),
		batching: make([]bool, nHP), formed: make([]int, nHP),
		beCur: make([]*beRun, nBE), beQ: make([][]*beRun, nBE),
		wallStart: time.Now(), devStart: d.dev.Now()}
	d.keepSpans = l.keep
	for c, hc := range d.core.State().HP() {
		l.batching[c] = len(hc.vars) > 1
		l.anyBatching = l.anyBatching || l.batching[c]
	}
	if o != nil {
		l.perClient, l.hooks, l.pace = 1, o.cfg.Hooks, o.cfg.Pace
		l.quantum, l.stall = o.cfg.Quantum, o.cfg.Stall
		l.timer = time.NewTimer(time.Hour)
		l.timer.Stop()
	}
	return l
}

// rebase moves the timeline and the run's window (warm-up, duration) from
// "time since the run starts" to the device clock at t0. A real device's
// clock has been running since Open, and setting a run up (compiling
// kernels, uploading weights) can take seconds: without this every arrival
// would already be late when the loop starts. (The simulator's clock is
// still 0 here, so nothing moves on it.)
func (l *loop) rebase(t0 time.Duration) {
	for i := range l.timeline {
		l.timeline[i].Time += t0
	}
	l.d.opt.Duration += t0
	l.d.opt.Warmup += t0
	l.d.trace.Start = t0
	for i := range l.d.beEmptyFrom {
		l.d.beEmptyFrom[i] = t0 // no BE work before the first launch
	}
}

// serve runs rounds until the stop has drained (Run), ctx ends (Online
// then shuts down and drains; Run fails) or something fails.
func (l *loop) serve(ctx context.Context) error {
	l.lastProg = l.d.dev.Now()
	for {
		if ctx.Err() != nil {
			return l.stopped(ctx)
		}
		t0 := time.Now()
		end, err := l.round(ctx, false)
		l.d.trace.Host.Round += time.Since(t0)
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return l.stopped(ctx)
			}
			return err
		}
		if end == roundDone {
			return nil
		}
		if err := l.wait(ctx, ctx, end == roundIdle); err != nil {
			if ctx.Err() != nil {
				return l.stopped(ctx)
			}
			return err
		}
	}
}

// stopped is the end of a loop whose ctx is done: Online drains, Run
// fails saying how far it got.
func (l *loop) stopped(ctx context.Context) error {
	if l.o != nil {
		return l.shutdown()
	}
	return l.d.stopErr(ctx.Err())
}

// round runs one round: catch up (Pace), poll, feed completions and due
// timeline inputs in time order, take new submissions, hand out waiting
// requests and BE runs, tick.
func (l *loop) round(ctx context.Context, draining bool) (roundEnd, error) {
	dev, core := l.d.dev, l.d.core
	if l.pace {
		if t := l.wallDev(); dev.Now() < t {
			if err := dev.Wait(ctx, t); err != nil {
				return roundBusy, l.waitErr(ctx, err)
			}
		}
	}
	now := dev.Now()
	if core.InFlight() == 0 {
		// Nothing in flight, so no stall can be accruing: an idle spell
		// (paced virtual time, or a real GPU waiting for requests) must not
		// count against the launches the next request makes.
		l.lastProg = now
	}
	n, err := l.d.poll()
	if err != nil {
		return roundBusy, err
	}
	if n > 0 {
		l.lastProg = now
	}
	// The round's completions and due inputs, HP's launches first.
	l.hpFirst = !l.d.opt.DecisionOrder
	err = l.takeDue(draining, now)
	l.hpFirst = false
	if err == nil {
		err = l.flushBE(true)
	}
	if err != nil {
		return roundBusy, err
	}
	if w, ok := core.NextWake(); ok && w <= dev.Now() {
		if err := l.feed(Event{Kind: EvTick, Time: dev.Now()}); err != nil {
			return roundBusy, err
		}
		if err := l.startBE(draining, dev.Now()); err != nil {
			return roundBusy, err
		}
	}
	l.publish()
	if l.d.stopped && core.Quiescent() {
		l.d.trace.End = dev.Now()
		for c, from := range l.d.beEmptyFrom {
			l.d.beEmpty(c, from, l.d.trace.End)
		}
		return roundDone, nil
	}
	_, wake := core.NextWake()
	timed := l.next < len(l.timeline)
	if core.InFlight() == 0 {
		l.lastProg = dev.Now()
		if wake || timed {
			return roundBusy, nil
		}
		if core.State().HPBusy() {
			return roundBusy, fmt.Errorf("%w: nothing in flight and nothing to wait for, but HP requests wait: %s", ErrStuck, core.Describe())
		}
		if l.wantsWork() {
			// The policy launches no BE work although nothing else runs
			// (e.g. "dedicated"): end the BE runs, keep serving HP.
			if err := l.failStuckBE(); err != nil {
				return roundBusy, err
			}
			if err := l.startBE(draining, dev.Now()); err != nil {
				return roundBusy, err
			}
		}
		if l.o == nil {
			return roundBusy, fmt.Errorf("%w: nothing in flight and nothing to wait for, but work remains: %s", ErrStuck, core.Describe())
		}
		return roundIdle, nil
	}
	if dev.Now()-l.lastProg > l.stall {
		return roundBusy, fmt.Errorf("%w: %d launches in flight and none completed in %v: %s", ErrStuck, core.InFlight(), l.stall, core.Describe())
	}
	if l.o == nil && l.d.stopped && dev.Now() > l.d.opt.Duration+l.d.opt.Drain {
		return roundBusy, fmt.Errorf("%w: not drained %v after the run ended: %s", ErrStuck, l.d.opt.Drain, core.Describe())
	}
	return roundBusy, nil
}

// takeDue feeds the core the completions polled and the inputs due by now
// in time order (completions first on ties: they happened before the
// input was seen), then the daemon's submissions, BE runs to start and HP
// requests to inject.
func (l *loop) takeDue(draining bool, now time.Duration) error {
	dev := l.d.dev
	comps, ci := l.d.comps, 0
	for ci < len(comps) || (l.next < len(l.timeline) && l.timeline[l.next].Time <= now) {
		if ci < len(comps) && (l.next >= len(l.timeline) || l.timeline[l.next].Time > now || comps[ci].Time <= l.timeline[l.next].Time) {
			if err := l.feed(comps[ci]); err != nil {
				return err
			}
			ci++
			continue
		}
		ev := l.timeline[l.next]
		l.next++
		l.lastProg = now
		if err := l.input(ev); err != nil {
			return err
		}
	}
	if l.o != nil && !draining {
		l.takeInbox(now)
		if err := l.pauseCancelled(); err != nil {
			return err
		}
	}
	if err := l.startBE(draining, dev.Now()); err != nil {
		return err
	}
	if err := l.injectHP(draining, dev.Now()); err != nil {
		return err
	}
	return nil
}

// input takes one timeline input: an HP arrival joins its client's
// requests, a BE start queues the client's run, the stop goes to the core.
func (l *loop) input(ev Event) error {
	switch ev.Kind {
	case EvArrive:
		c := l.route(ev.Client.Index)
		l.pend[c] = append(l.pend[c], &request{client: c, id: uint64(ev.Request), arrival: ev.Time})
		return l.injectHP(false, ev.Time)
	case EvReady:
		i := ev.Client.Index
		l.beQ[i] = append(l.beQ[i], &beRun{run: BERun{Iterations: ev.Iterations}, prog: newBEProgress(0)})
		return l.startBE(false, ev.Time)
	}
	return l.feed(ev)
}

// route is the HP client an arrival of client c goes to: c, or in a group
// (HPWorkload.Group) the member with the fewest requests unfinished.
func (l *loop) route(c int) int {
	return leastBusy(c, l.d.groups[c], func(m int) int { return len(l.in[m]) + len(l.pend[m]) })
}

// wantsWork reports whether the core holds work the policy should be
// launching: an HP request, or a BE client with an active run.
func (l *loop) wantsWork() bool {
	st := l.d.core.State()
	if st.HPBusy() {
		return true
	}
	if st.Stopping() {
		return false
	}
	for i := range st.BE() {
		if l.beActive(i) {
			return true
		}
	}
	return false
}

// beActive reports whether BE client i has a run the policy should be
// serving: started, not cancelled, and (the core's view) still ready, so
// its budget is not spent.
func (l *loop) beActive(i int) bool {
	r := l.beCur[i]
	return r != nil && !r.cancelled && l.d.core.State().BE()[i].Ready()
}

// failStuckBE ends the active BE runs that the policy does not launch: it
// pauses their clients (EvPause); startBE then ends the runs with
// ErrStuck.
func (l *loop) failStuckBE() error {
	st := l.d.core.State()
	for i, b := range st.BE() {
		if r := l.beCur[i]; r != nil && l.beActive(i) && b.InFlight() == 0 {
			r.cancelled = true
			r.endErr = fmt.Errorf("%w: policy %s launches nothing for BE client %s while the GPU is idle: %s",
				ErrStuck, l.d.opt.Policy.Name(), l.d.beNames[i], l.d.core.Describe())
		}
	}
	return l.pauseCancelled()
}

// pauseCancelled sends EvPause for every cancelled run whose client the
// core still runs, so nothing more of it launches.
func (l *loop) pauseCancelled() error {
	for i, b := range l.d.core.State().BE() {
		if r := l.beCur[i]; r != nil && r.cancelled && b.Ready() {
			if err := l.feed(Event{Kind: EvPause, Time: l.d.dev.Now(), Client: BEClientID(i)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// wallDev is the device time the wall clock says it is (Pace).
func (l *loop) wallDev() time.Duration { return l.devStart + time.Since(l.wallStart) }

func (l *loop) waitErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return devErr("Wait", err)
}

// wait waits for the device until the next timeline input, the next wake
// or the quantum (Online: or a submission, or stopCtx). On an idle round
// it blocks for a submission. dctx bounds device waits.
func (l *loop) wait(dctx, stopCtx context.Context, idle bool) error {
	dev := l.d.dev
	now := dev.Now()
	if idle {
		select {
		case <-l.o.notify:
		case <-stopCtx.Done():
		case <-dctx.Done():
		}
		return nil
	}
	until := time.Duration(-1)
	if l.next < len(l.timeline) {
		until = l.timeline[l.next].Time
	}
	if w, ok := l.d.core.NextWake(); ok && (until < 0 || w < until) {
		until = w
	}
	if l.o != nil || l.d.core.InFlight() > 0 {
		if until < 0 || until > now+l.quantum {
			until = now + l.quantum
		}
	}
	if l.pace {
		if target := l.wallDev(); target < until {
			if now < target {
				if err := dev.Wait(dctx, target); err != nil {
					return l.waitErr(dctx, err)
				}
			}
			// Caught up with the wall clock: sleep until the next wake or
			// the quantum (at most the quantum), but wake for a
			// submission. Device events in between are seen at the next
			// round; catching up in steps of the microseconds a round
			// takes instead kept a core busy with nothing to do.
			l.timer.Reset(until - target)
			select {
			case <-l.o.notify:
			case <-stopCtx.Done():
			case <-dctx.Done():
			case <-l.timer.C:
			}
			l.timer.Stop()
			return nil
		}
	}
	if until > now {
		if err := dev.Wait(dctx, until); err != nil {
			return l.waitErr(dctx, err)
		}
		if dev.Now() < now {
			return fmt.Errorf("%w: device clock went back from %v to %v", ErrDevice, now, dev.Now())
		}
	}
	return nil
}

// takeInbox moves new submissions and BE controls into the loop. A cancel
// of a running run only marks it; pauseCancelled tells the core.
func (l *loop) takeInbox(now time.Duration) {
	o := l.o
	select {
	case <-o.notify:
	default:
	}
	o.mu.Lock()
	inbox, ctl := o.mu.inbox, o.mu.ctl
	o.mu.inbox, o.mu.ctl = nil, nil
	o.mu.Unlock()
	for _, r := range inbox {
		r.arrival = now
		l.pend[r.client] = append(l.pend[r.client], r)
	}
	for _, c := range ctl {
		if !c.stop {
			l.beQ[c.client] = append(l.beQ[c.client], &beRun{id: c.id, run: c.run, prog: c.prog})
			continue
		}
		if r := l.beCur[c.client]; r != nil && r.id == c.id {
			r.cancelled = true
			continue
		}
		q := l.beQ[c.client]
		for i, r := range q {
			if r.id == c.id {
				l.beQ[c.client] = append(q[:i], q[i+1:]...)
				r.end(0, fmt.Errorf("%w: before it started", ErrCancelled))
				break
			}
		}
	}
}

// injectHP hands each HP client with room in the core (perClient) its next
// waiting requests, as arrivals at time at.
func (l *loop) injectHP(draining bool, at time.Duration) error {
	if draining {
		return nil
	}
	for c := range l.pend {
		for len(l.pend[c]) > 0 && (l.perClient == 0 || l.batching[c] || len(l.in[c]) < l.perClient) {
			r := l.pend[c][0]
			l.pend[c][0] = nil
			l.pend[c] = l.pend[c][1:]
			if h := l.hooks.BeforeRequest; h != nil && !l.batching[c] {
				t0 := time.Now()
				err := h(c, r.id, r.tag)
				r.input = time.Since(t0)
				if err != nil {
					l.finish(r, OnlineResult{Err: fmt.Errorf("sched: before request %d of %s: %w", r.id, l.d.hpNames[c], err)})
					continue
				}
			}
			l.in[c] = append(l.in[c], r)
			if err := l.feed(Event{Kind: EvArrive, Time: at, Client: HPClientID(c), Request: int(r.id)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// startBE ends cancelled runs whose launches have drained and starts the
// next queued run of each idle BE client at time at.
func (l *loop) startBE(draining bool, at time.Duration) error {
	st := l.d.core.State()
	for i, b := range st.BE() {
		if r := l.beCur[i]; r != nil {
			if !r.cancelled || b.InFlight() > 0 {
				continue
			}
			l.beCur[i] = nil
			err := r.endErr
			if err == nil {
				err = fmt.Errorf("%w after %d of %d iterations", ErrCancelled, r.done, r.run.Iterations)
			}
			r.end(r.done, err)
		}
		if draining || len(l.beQ[i]) == 0 || b.InFlight() > 0 {
			continue
		}
		r := l.beQ[i][0]
		if b.Ready() {
			return fmt.Errorf("%w: BE client %s is still running when run %d should start: %s", ErrEvent, l.d.beNames[i], r.id, l.d.core.Describe())
		}
		l.beQ[i] = l.beQ[i][1:]
		if r.run.Setup != nil {
			if err := r.run.Setup(); err != nil {
				r.end(0, fmt.Errorf("sched: start of BE run on %s: %w", l.d.beNames[i], err))
				continue
			}
		}
		r.prog.start()
		// The client is not ready here (a run ends only once the core
		// has stopped it: budget spent, or EvPause), so EvReady starts
		// a fresh iteration with this run's budget; the core drops
		// whatever a cancelled run left unfinished.
		l.beCur[i] = r
		if err := l.feed(Event{Kind: EvReady, Time: at, Client: BEClientID(i), Iterations: r.run.Iterations}); err != nil {
			return err
		}
	}
	return nil
}

// feed steps the core with ev and applies its decisions.
func (l *loop) feed(ev Event) error {
	d := l.d
	if !d.haveA && ev.Time >= d.opt.Warmup {
		d.snapA, d.haveA = d.core.State().StatsAt(d.opt.Warmup), true
	}
	if ev.Kind == EvStop {
		if !d.haveA {
			d.snapA, d.haveA = d.core.State().StatsAt(d.opt.Warmup), true
		}
		s := d.core.State().StatsAt(ev.Time)
		for i, w := range s.BEWorkByClient {
			d.trace.BEWorkByClient[i] = w - d.snapA.BEWorkByClient[i]
			d.trace.BEWork += d.trace.BEWorkByClient[i]
		}
		d.trace.HPBusy = s.HPBusy - d.snapA.HPBusy
		d.trace.BEWorkHPBusy = s.BEWorkHPBusy - d.snapA.BEWorkHPBusy
		d.stopped = true
	}
	t0 := time.Now()
	if err := d.core.Step(ev); err != nil {
		return fmt.Errorf("sched: %s at %s: %w", ev.Kind, us(ev.Time), err)
	}
	decs := d.core.Decisions()
	d.stepped(ev.Kind, decs, time.Since(t0))
	l.passes(decs)
	if !l.hpFirst && len(l.beHeld) == 0 {
		return d.applyAll(decs, l.apply)
	}
	return l.holdBE(decs)
}

// stepped books a core step's host time dt (Trace.Host) and tells a
// device that models the host's time of the step's launch decisions.
func (d *driver) stepped(kind EventKind, decs []Decision, dt time.Duration) {
	h := &d.trace.Host
	h.Step += dt
	h.Steps++
	if kind == EvArrive {
		h.Arrive += dt
		h.Arrives++
	}
	if d.host == nil {
		return
	}
	n := 0
	for i := range decs {
		if decs[i].Kind == DecLaunch {
			n++
		}
	}
	d.host.Decided(n)
}

// holdBE applies decs but their BE launches, which join beHeld (also
// outside a round's feeding while launches are still held, so that a BE
// client's launches keep their order). Whatever acts on BE launches
// already decided — a flag raised or lowered, a progress counter reset, a
// padded launch whose pad continues a BE client's work — first sends all
// the held ones, in order.
func (l *loop) holdBE(decs []Decision) error {
	d := l.d
	rest := l.rest[:0]
	defer func() { l.rest = rest[:0] }()
	for _, dec := range decs {
		switch {
		case dec.Kind == DecLaunch && dec.Launch.Client.Class == BE:
			l.beHeld = append(l.beHeld, dec)
			continue
		case dec.Kind == DecRaise || dec.Kind == DecLower || dec.Kind == DecResetProgress ||
			(dec.Kind == DecLaunch && dec.Launch.Form == gpu.Padded):
			if err := d.applyAll(rest, l.apply); err != nil {
				return err
			}
			rest = rest[:0]
			if err := l.flushBE(false); err != nil {
				return err
			}
		}
		rest = append(rest, dec)
	}
	return d.applyAll(rest, l.apply)
}

// flushBE sends the BE launches held back, in order (a whole BE chunk as
// one graph, begraphs.go). With forHP it stops
// early, keeping the rest held for the next round, when an HP arrival has
// come due meanwhile (each launch takes the host microseconds), so that
// the arrival goes first.
func (l *loop) flushBE(forHP bool) error {
	n := 0
	defer func() {
		l.beHeld = l.beHeld[:copy(l.beHeld, l.beHeld[n:])]
	}()
	for n < len(l.beHeld) {
		if forHP && l.hpDue() {
			return nil
		}
		if ch := l.d.wholeChunk(l.beHeld[n:]); ch != nil {
			err := l.d.launchChunk(ch, l.beHeld[n:n+ch.n])
			n += ch.n
			if err != nil {
				return err
			}
			continue
		}
		err := l.apply(l.beHeld[n])
		n++
		if err != nil {
			return err
		}
	}
	return nil
}

// hpDue reports whether an HP request may be waiting to be taken in: the
// next timeline input is an arrival whose time has come, or (Online) a
// submission has woken the loop since it last took its inbox.
func (l *loop) hpDue() bool {
	if l.o != nil {
		return len(l.o.notify) > 0
	}
	return l.next < len(l.timeline) && l.timeline[l.next].Kind == EvArrive && l.timeline[l.next].Time <= l.d.dev.Now()
}

// passes places the requests of each pass of a batching client that decs
// start (its first kernel launched) and runs BeforePass for each, before
// any of decs reaches the device. The core forms a pass from the oldest
// requests no pass has taken; a batching client's next pass starts only
// once its stream is empty, so its buffers are free.
func (l *loop) passes(decs []Decision) {
	if !l.anyBatching {
		return
	}
	for _, dec := range decs {
		ln := dec.Launch
		if dec.Kind != DecLaunch || ln.Client.Class != HP || ln.Kernel != 0 || !l.batching[ln.Client.Index] {
			continue
		}
		c := ln.Client.Index
		n := l.d.core.State().HP()[c].vars[ln.Variant].reqs
		for slot, r := range l.in[c][l.formed[c] : l.formed[c]+n] {
			r.variant, r.slot = ln.Variant, slot
			if h := l.hooks.BeforePass; h != nil {
				t0 := time.Now()
				if err := h(c, ln.Variant, slot, r.id, r.tag); err != nil {
					r.err = fmt.Errorf("sched: before request %d of %s: %w", r.id, l.d.hpNames[c], err)
				}
				r.input = time.Since(t0)
			}
		}
		l.formed[c] += n
	}
}

// apply carries out one decision: records here, device work in the driver.
func (l *loop) apply(dec Decision) error {
	d := l.d
	switch dec.Kind {
	case DecRequestDone:
		if d.opt.OnDecision != nil {
			d.opt.OnDecision(dec)
		}
		rec := dec.Request
		measured := l.keep && rec.Arrival >= d.opt.Warmup
		d.attr.request(&rec, measured)
		if measured {
			d.trace.Requests = append(d.trace.Requests, rec)
		}
		c := rec.Client.Index
		if len(l.in[c]) == 0 || int(l.in[c][0].id) != rec.ID {
			return fmt.Errorf("%w: request %d of %s done, but it is not the oldest in flight", ErrEvent, rec.ID, rec.Client)
		}
		r := l.in[c][0]
		l.in[c][0] = nil
		l.in[c] = l.in[c][1:]
		if l.batching[c] {
			l.formed[c]--
		}
		if r.out == nil {
			return nil
		}
		res := OnlineResult{Start: rec.Start, End: rec.End, Queue: max(rec.Start-r.arrival, 0), Service: rec.Service(), Batch: rec.Batch, Input: r.input, Causes: rec.Causes}
		t0 := time.Now()
		var err error
		switch {
		case l.batching[c] && l.hooks.AfterPass != nil:
			err = l.hooks.AfterPass(c, r.variant, r.slot, r.id, r.tag)
		case !l.batching[c] && l.hooks.AfterRequest != nil:
			err = l.hooks.AfterRequest(c, r.id, r.tag)
		}
		res.Output = time.Since(t0)
		switch {
		case r.err != nil:
			res.Err = r.err
		case err != nil:
			res.Err = fmt.Errorf("sched: after request %d of %s: %w", r.id, d.hpNames[c], err)
		}
		l.finish(r, res)
	case DecIterationDone:
		if d.opt.OnDecision != nil {
			d.opt.OnDecision(dec)
		}
		if it := dec.Iteration; l.keep && it.Start >= d.opt.Warmup && it.End <= d.opt.Duration {
			d.trace.Iterations = append(d.trace.Iterations, it)
		}
		i := dec.Iteration.Client.Index
		r := l.beCur[i]
		if r == nil {
			return nil
		}
		r.done++
		if r.run.Collect != nil {
			r.run.Collect(dec.Iteration)
		}
		r.prog.iterated(r.done, dec.Iteration)
		if r.run.Iterations > 0 && r.done >= r.run.Iterations && !r.cancelled {
			l.beCur[i] = nil
			l.publish()
			r.end(r.done, nil)
		}
	case DecPreemptionDone:
		if d.opt.OnDecision != nil {
			d.opt.OnDecision(dec)
		}
		if p := dec.Preemption; l.keep && p.Decided >= d.opt.Warmup && p.Decided < d.opt.Duration {
			d.trace.Preemptions = append(d.trace.Preemptions, p)
		}
		if l.o != nil {
			l.o.mu.Lock()
			if len(l.o.mu.preempts) < 4096 {
				l.o.mu.preempts = append(l.o.mu.preempts, dec.Preemption.Latency())
			}
			l.o.mu.Unlock()
		}
	default:
		return d.apply(dec)
	}
	return nil
}

// finish answers r (Online: Run's requests end in apply) and frees its
// queue slot.
func (l *loop) finish(r *request, res OnlineResult) {
	res.Client, res.ID, res.Tag, res.Arrival = r.client, r.id, r.tag, r.arrival
	l.publish() // the counters include this request when its caller looks
	l.o.mu.Lock()
	l.o.mu.depth[r.client]--
	l.o.mu.Unlock()
	r.out <- res
}

// publish copies the core's counters where Online's Stats reads them.
func (l *loop) publish() {
	o := l.o
	if o == nil {
		return
	}
	st := l.d.core.State()
	o.mu.Lock()
	s := st.stats
	s.BEWorkByClient = nil
	o.mu.stats.Core = s
	copy(o.mu.beWork, st.stats.BEWorkByClient)
	o.mu.stats.Launches = l.d.trace.Launches
	o.mu.stats.PaddedLaunches = l.d.trace.PaddedLaunches
	o.mu.Unlock()
}

// shutdown (Online) stops accepting, fails what waits, stops BE and lets
// the requests in the core finish within the configured Drain.
func (l *loop) shutdown() error {
	o := l.o
	o.mu.Lock()
	o.mu.state = 2
	o.mu.Unlock()
	stopped := fmt.Errorf("%w: shutting down", ErrStopped)
	l.takeInbox(l.d.dev.Now())
	for c := range l.pend {
		for _, r := range l.pend[c] {
			l.finish(r, OnlineResult{Err: stopped})
		}
		l.pend[c] = nil
	}
	for i := range l.beQ {
		for _, r := range l.beQ[i] {
			r.end(0, stopped)
		}
		l.beQ[i] = nil
	}
	for _, r := range l.beCur {
		if r != nil {
			r.cancelled, r.endErr = true, stopped
		}
	}
	if err := l.feed(Event{Kind: EvStop, Time: l.d.dev.Now()}); err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(context.Background(), o.cfg.Drain)
	defer cancel()
	for {
		if _, err := l.round(dctx, true); err != nil {
			if dctx.Err() == nil {
				return err
			}
		}
		if l.d.core.Quiescent() || dctx.Err() != nil {
			break
		}
		if err := l.wait(dctx, dctx, false); err != nil && dctx.Err() == nil {
			return err
		}
	}
	if !l.d.core.Quiescent() {
		l.failEverything(fmt.Errorf("%w: requests in flight did not finish within %v of shutdown: %s", ErrStopped, o.cfg.Drain, l.d.core.Describe()))
		return nil
	}
	l.failEverything(stopped) // BE runs still open end here
	return nil
}

// failEverything (Online) answers every request and run the loop still
// holds.
func (l *loop) failEverything(err error) {
	l.o.mu.Lock()
	l.o.mu.state = 2
	l.o.mu.Unlock()
	l.takeInbox(l.d.dev.Now())
	for c := range l.pend {
		for _, r := range l.in[c] {
			l.finish(r, OnlineResult{Err: err})
		}
		l.in[c] = nil
		for _, r := range l.pend[c] {
			l.finish(r, OnlineResult{Err: err})
		}
		l.pend[c] = nil
	}
	for i := range l.beCur {
		if r := l.beCur[i]; r != nil {
			l.beCur[i] = nil
			r.end(r.done, err)
		}
		for _, r := range l.beQ[i] {
			r.end(0, err)
		}
		l.beQ[i] = nil
	}
}
