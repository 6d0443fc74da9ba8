package sched

import (
	"context"
	"errors"
	"fmt"
	"time"

	"atoll/gpu"
)

// beRun is a BE run the loop holds. The core does the stopping: the run
// starts with EvReady{Iterations}, so the core itself marks the client
// not ready when its last iteration completes; a cancel sends EvPause.
type beRun struct {
	id        uint64
	run       BERun
	done      int
	cancelled bool
	endErr    error // why it was cancelled when not by StopBE
}

type onlineLoop struct {
	o         *Online
	d         *driver
	hpPend    [][]*onReq // per HP client: waiting, not in the core
	hpCur     []*onReq   // per HP client: in the core
	beCur     []*beRun
	beQ       [][]*beRun
	wallStart time.Time
	devStart  time.Duration
	timer     *time.Timer
	lastProg  time.Duration
}

// beActive reports whether BE client i has a run the policy should be
// serving: started, not cancelled, and (the core's view) still ready, so
// its budget is not spent.
func (l *onlineLoop) beActive(i int) bool {
	r := l.beCur[i]
	return r != nil && !r.cancelled && l.d.core.State().BE()[i].Ready()
}

func (l *onlineLoop) dev() gpu.Device { return l.d.dev }

// wallDev is the device time the wall clock says it is (Pace).
func (l *onlineLoop) wallDev() time.Duration { return l.devStart + time.Since(l.wallStart) }

// serve is the main loop; it returns nil after a clean drain.
func (l *onlineLoop) serve(ctx context.Context) error {
	l.lastProg = l.dev().Now()
	for {
		if ctx.Err() != nil {
			return l.shutdown()
		}
		idle, err := l.iterate(ctx, false)
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return l.shutdown()
			}
			return err
		}
		if err := l.wait(ctx, ctx, idle); err != nil {
			if ctx.Err() != nil {
				return l.shutdown()
			}
			return err
		}
	}
}

// iterate runs one round: catch up (Pace), poll, feed completions, take new
// submissions, inject arrivals and BE starts, tick. It reports whether the
// loop may block until something is submitted.
func (l *onlineLoop) iterate(ctx context.Context, draining bool) (bool, error) {
	dev := l.dev()
	if l.o.cfg.Pace {
		if t := l.wallDev(); dev.Now() < t {
			if err := dev.Wait(ctx, t); err != nil {
				return false, l.waitErr(ctx, err)
			}
		}
	}
	now := dev.Now()
	if l.d.core.InFlight() == 0 {
		// Nothing in flight, so no stall can be accruing: an idle spell
		// (paced virtual time, or a real GPU waiting for requests) must not
		// count against the launches the next request makes.
		l.lastProg = now
	}
	n, err := l.d.poll()
	if err != nil {
		return false, err
	}
	if n > 0 {
		l.lastProg = now
	}
	for _, ev := range l.d.comps {
		if err := l.feed(ev); err != nil {
			return false, err
		}
	}
	if !draining {
		l.takeInbox(now)
		if err := l.pauseCancelled(); err != nil {
			return false, err
		}
	}
	if err := l.startBE(draining); err != nil {
		return false, err
	}
	if err := l.injectHP(draining); err != nil {
		return false, err
	}
	core := l.d.core
	if w, ok := core.NextWake(); ok && w <= dev.Now() {
		if err := l.feed(Event{Kind: EvTick, Time: dev.Now()}); err != nil {
			return false, err
		}
		if err := l.startBE(draining); err != nil {
			return false, err
		}
	}
	l.publish()
	_, wake := core.NextWake()
	if core.InFlight() == 0 {
		l.lastProg = dev.Now()
		if !wake && core.State().HPBusy() {
			return false, fmt.Errorf("%w: nothing in flight and nothing to wait for, but HP requests wait: %s", ErrStuck, core.Describe())
		}
		if !wake && l.wantsWork() {
			// The policy launches no BE work although nothing else runs
			// (e.g. "dedicated"): end the BE runs, keep serving HP.
			if err := l.failStuckBE(); err != nil {
				return false, err
			}
			if err := l.startBE(draining); err != nil {
				return false, err
			}
		}
		return !wake, nil
	}
	if dev.Now()-l.lastProg > l.o.cfg.Stall {
		return false, fmt.Errorf("%w: %d launches in flight and none completed in %v: %s", ErrStuck, core.InFlight(), l.o.cfg.Stall, core.Describe())
	}
	return false, nil
}

// wantsWork reports whether the core holds work the policy should be
// launching: an HP request, or a BE client with an active run.
func (l *onlineLoop) wantsWork() bool {
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

// failStuckBE ends the active BE runs that the policy does not launch: it
// pauses their clients (EvPause); startBE then ends the runs with
// ErrStuck.
func (l *onlineLoop) failStuckBE() error {
	st := l.d.core.State()
	for i, b := range st.BE() {
		if r := l.beCur[i]; r != nil && l.beActive(i) && b.InFlight() == 0 {
			r.cancelled = true
			r.endErr = fmt.Errorf("%w: policy %s launches nothing for BE client %s while the GPU is idle: %s",
				ErrStuck, l.o.cfg.Policy.Name(), l.o.cfg.BE[i].Name, l.d.core.Describe())
		}
	}
	return l.pauseCancelled()
}

// pauseCancelled sends EvPause for every cancelled run whose client the
// core still runs, so nothing more of it launches.
func (l *onlineLoop) pauseCancelled() error {
	for i, b := range l.d.core.State().BE() {
		if r := l.beCur[i]; r != nil && r.cancelled && b.Ready() {
			if err := l.feed(Event{Kind: EvPause, Time: l.dev().Now(), Client: BEClientID(i)}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *onlineLoop) waitErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return devErr("Wait", err)
}

// wait waits for the device, the next wake, a submission or ctx. stopCtx
// (the run's ctx) ends a block on submissions; dctx bounds device waits.
func (l *onlineLoop) wait(dctx, stopCtx context.Context, idle bool) error {
	dev := l.dev()
	now := dev.Now()
	if idle {
		select {
		case <-l.o.notify:
		case <-stopCtx.Done():
		case <-dctx.Done():
		}
		return nil
	}
	until := now + l.o.cfg.Quantum
	if w, ok := l.d.core.NextWake(); ok && w < until {
		until = w
	}
	if l.o.cfg.Pace {
		if target := l.wallDev(); target < until {
			if now < target {
				if err := dev.Wait(dctx, target); err != nil {
					return l.waitErr(dctx, err)
				}
			}
			// Caught up with the wall clock: sleep until the next wake or
			// the quantum (at most cfg.Quantum), but wake for a
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
func (l *onlineLoop) takeInbox(now time.Duration) {
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
		l.hpPend[r.client] = append(l.hpPend[r.client], r)
	}
	for _, c := range ctl {
		if !c.stop {
			l.beQ[c.client] = append(l.beQ[c.client], &beRun{id: c.id, run: c.run})
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
				if r.run.OnEnd != nil {
					r.run.OnEnd(0, fmt.Errorf("%w: before it started", ErrCancelled))
				}
				break
			}
		}
	}
}

// injectHP hands each idle HP client its next waiting request.
func (l *onlineLoop) injectHP(draining bool) error {
	for c := range l.hpPend {
		for l.hpCur[c] == nil && len(l.hpPend[c]) > 0 && !draining {
			r := l.hpPend[c][0]
			l.hpPend[c] = l.hpPend[c][1:]
			if h := l.o.cfg.Hooks.BeforeRequest; h != nil {
				t0 := time.Now()
				err := h(c, r.id, r.tag)
				r.input = time.Since(t0)
				if err != nil {
					l.finish(r, OnlineResult{Err: fmt.Errorf("sched: before request %d of %s: %w", r.id, l.o.cfg.HP[c].Name, err)})
					continue
				}
			}
			l.hpCur[c] = r
			if err := l.feed(Event{Kind: EvArrive, Time: l.dev().Now(), Client: HPClientID(c), Request: int(r.id)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// startBE ends cancelled runs whose launches have drained and starts the
// next queued run of each idle BE client.
func (l *onlineLoop) startBE(draining bool) error {
	st := l.d.core.State()
	for i, b := range st.BE() {
		if r := l.beCur[i]; r != nil {
			if !r.cancelled || b.InFlight() > 0 {
				continue
			}
			l.beCur[i] = nil
			if r.run.OnEnd != nil {
				err := r.endErr
				if err == nil {
					err = fmt.Errorf("%w after %d of %d iterations", ErrCancelled, r.done, r.run.Iterations)
				}
				r.run.OnEnd(r.done, err)
			}
		}
		if draining || len(l.beQ[i]) == 0 || b.InFlight() > 0 {
			continue
		}
		r := l.beQ[i][0]
		if b.Ready() {
			return fmt.Errorf("%w: BE client %s is still running when run %d should start: %s", ErrEvent, l.o.cfg.BE[i].Name, r.id, l.d.core.Describe())
		}
		l.beQ[i] = l.beQ[i][1:]
		if r.run.OnStart != nil {
			if err := r.run.OnStart(); err != nil {
				if r.run.OnEnd != nil {
					r.run.OnEnd(0, fmt.Errorf("sched: start of BE run on %s: %w", l.o.cfg.BE[i].Name, err))
				}
				continue
			}
		}
		// The client is not ready here (a run ends only once the core
		// has stopped it: budget spent, or EvPause), so EvReady starts
		// a fresh iteration with this run's budget; the core drops
		// whatever a cancelled run left unfinished.
		l.beCur[i] = r
		if err := l.feed(Event{Kind: EvReady, Time: l.dev().Now(), Client: BEClientID(i), Iterations: r.run.Iterations}); err != nil {
			return err
		}
	}
	return nil
}

func (l *onlineLoop) feed(ev Event) error {
	core := l.d.core
	if err := core.Step(ev); err != nil {
		return fmt.Errorf("sched: %s at %s: %w", ev.Kind, us(ev.Time), err)
	}
	return l.d.applyAll(core.Decisions(), l.apply)
}

func (l *onlineLoop) apply(dec Decision) error {
	switch dec.Kind {
	case DecRequestDone:
		if l.o.cfg.OnDecision != nil {
			l.o.cfg.OnDecision(dec)
		}
		rec := dec.Request
		l.d.attr.request(&rec, false)
		c := rec.Client.Index
		r := l.hpCur[c]
		if r == nil || int(r.id) != rec.ID {
			return fmt.Errorf("%w: request %d of %s done, but it is not the one in flight", ErrEvent, rec.ID, rec.Client)
		}
		l.hpCur[c] = nil
		res := OnlineResult{Start: rec.Start, End: rec.End, Queue: max(rec.Start-r.arrival, 0), Service: rec.Service(), Input: r.input, Causes: rec.Causes}
		if h := l.o.cfg.Hooks.AfterRequest; h != nil {
			t0 := time.Now()
			err := h(c, r.id, r.tag)
			res.Output = time.Since(t0)
			if err != nil {
				res.Err = fmt.Errorf("sched: after request %d of %s: %w", r.id, l.o.cfg.HP[c].Name, err)
			}
		}
		l.finish(r, res)
	case DecIterationDone:
		if l.o.cfg.OnDecision != nil {
			l.o.cfg.OnDecision(dec)
		}
		i := dec.Iteration.Client.Index
		r := l.beCur[i]
		if r == nil {
			return nil
		}
		r.done++
		if r.run.OnIteration != nil {
			r.run.OnIteration(r.done, dec.Iteration)
		}
		if r.done >= r.run.Iterations && !r.cancelled {
			l.beCur[i] = nil
			l.publish()
			if r.run.OnEnd != nil {
				r.run.OnEnd(r.done, nil)
			}
		}
	case DecPreemptionDone:
		if l.o.cfg.OnDecision != nil {
			l.o.cfg.OnDecision(dec)
		}
		l.o.mu.Lock()
		if len(l.o.mu.preempts) < 4096 {
			l.o.mu.preempts = append(l.o.mu.preempts, dec.Preemption.Latency())
		}
		l.o.mu.Unlock()
	default:
		return l.d.apply(dec)
	}
	return nil
}

// finish answers r and frees its queue slot.
func (l *onlineLoop) finish(r *onReq, res OnlineResult) {
	res.Client, res.ID, res.Tag, res.Arrival = r.client, r.id, r.tag, r.arrival
	l.publish() // the counters include this request when its caller looks
	l.o.mu.Lock()
	l.o.mu.depth[r.client]--
	l.o.mu.Unlock()
	r.out <- res
}

func (l *onlineLoop) publish() {
	st := l.d.core.State()
	o := l.o
	o.mu.Lock()
	s := st.stats
	s.BEWorkByClient = nil
	o.mu.stats.Core = s
	copy(o.mu.beWork, st.stats.BEWorkByClient)
	o.mu.stats.Launches = l.d.trace.Launches
	o.mu.stats.PaddedLaunches = l.d.trace.PaddedLaunches
	o.mu.Unlock()
}

// shutdown stops accepting, fails what waits, stops BE and lets the
// requests in the core finish within cfg.Drain.
func (l *onlineLoop) shutdown() error {
	o := l.o
	o.mu.Lock()
	o.mu.state = 2
	o.mu.Unlock()
	stopped := fmt.Errorf("%w: shutting down", ErrStopped)
	l.takeInbox(l.dev().Now())
	for c := range l.hpPend {
		for _, r := range l.hpPend[c] {
			l.finish(r, OnlineResult{Err: stopped})
		}
		l.hpPend[c] = nil
	}
	for i := range l.beQ {
		for _, r := range l.beQ[i] {
			if r.run.OnEnd != nil {
				r.run.OnEnd(0, stopped)
			}
		}
		l.beQ[i] = nil
	}
	for _, r := range l.beCur {
		if r != nil {
			r.cancelled, r.endErr = true, stopped
		}
	}
	if err := l.feed(Event{Kind: EvStop, Time: l.dev().Now()}); err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(context.Background(), o.cfg.Drain)
	defer cancel()
	for {
		if _, err := l.iterate(dctx, true); err != nil {
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

// failEverything answers every request and run the loop still holds.
func (l *onlineLoop) failEverything(err error) {
	l.o.mu.Lock()
	l.o.mu.state = 2
	l.o.mu.Unlock()
	l.takeInbox(l.dev().Now())
	for c := range l.hpPend {
		if r := l.hpCur[c]; r != nil {
			l.hpCur[c] = nil
			l.finish(r, OnlineResult{Err: err})
		}
		for _, r := range l.hpPend[c] {
			l.finish(r, OnlineResult{Err: err})
		}
		l.hpPend[c] = nil
	}
	for i := range l.beCur {
		if r := l.beCur[i]; r != nil {
			l.beCur[i] = nil
			if r.run.OnEnd != nil {
				r.run.OnEnd(r.done, err)
			}
		}
		for _, r := range l.beQ[i] {
			if r.run.OnEnd != nil {
				r.run.OnEnd(0, err)
			}
		}
		l.beQ[i] = nil
	}
}
