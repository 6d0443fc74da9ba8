package cuda

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"atoll/gpu"
)

// Wait spins until the device clock reaches until, a recorded event completes
// or a HostWord changes, yielding the processor between polls
// (runtime.Gosched): the scheduler's goroutine keeps a core busy while work
// is in flight, which is the price of seeing completions within
// microseconds. With no event pending it sleeps until sleepMargin before
// the deadline.
func (d *Device) Wait(ctx context.Context, until time.Duration) error {
	if err := d.live(); err != nil {
		return err
	}
	start := d.Now()
	if until <= start {
		return nil
	}
	// Keep every context's clock base under a second old (see rebase).
	for c := range d.ctxs {
		if start-d.ctxs[c].baseAt > time.Second {
			d.rebase(int32(c))
		}
	}
	words := *d.words.Load()
	d.snap = d.snap[:0]
	for _, w := range words[1:] {
		d.snap = append(d.snap, atomic.LoadUint32(w))
	}
	last := start
	for {
		done, err := d.pollPending()
		if err != nil || done {
			return err
		}
		now := d.Now()
		if gap := now - last; gap >= gpu.StallThreshold {
			d.stalls.Add(gap)
		}
		last = now
		for i, w := range words[1:] {
			if atomic.LoadUint32(w) != d.snap[i] {
				return nil
			}
		}
		if now >= until {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// With work in flight, spin: a completion must be seen within
		// microseconds, and sleeps on a VM end up to ~1 ms late (measured
		// by the physics probe, docs/physics.md). With nothing recorded
		// there is nothing to miss, so sleep until sleepMargin before the
		// deadline and spin the rest.
		if d.npending == 0 && until-now > 2*sleepMargin {
			time.Sleep(until - now - sleepMargin)
			last = d.Now() // a sleep's lateness is not a stall
		} else {
			runtime.Gosched()
		}
	}
}

// sleepMargin is how long before a deadline an idle Wait stops sleeping
// and spins, covering the lateness of timer wake-ups seen on the GPU VMs.
const sleepMargin = 1500 * time.Microsecond

// pollPending queries the recorded, not yet completed events and drops the
// completed ones; it reports whether any completed.
func (d *Device) pollPending() (bool, error) {
	any := false
	for st, q := range d.pending {
		n := 0
		for ; n < len(q); n++ {
			ev := &d.events[q[n]]
			if !ev.live || !ev.pending {
				continue
			}
			ok, err := d.query(ev)
			if err != nil {
				return false, err
			}
			if !ok {
				break // later events of the stream complete later
			}
			any = true
		}
		if n > 0 {
			d.npending -= n
			if n == len(q) {
				delete(d.pending, st)
			} else {
				d.pending[st] = append(q[:0], q[n:]...)
			}
		}
	}
	return any, nil
}

// NewEvent makes an event. Its CUDA events are created per context on first
// Record there, with timing enabled.
func (d *Device) NewEvent() (gpu.Event, error) {
	if err := d.live(); err != nil {
		return 0, err
	}
	ev := eventRec{ctx: -1, live: true}
	h, err := d.newNative(0)
	if err != nil {
		return 0, err
	}
	ev.native[0] = h
	d.events = append(d.events, ev)
	return gpu.Event(len(d.events) - 1), nil
}

func (d *Device) newNative(c int32) (uintptr, error) {
	if err := d.use(c); err != nil {
		return 0, err
	}
	var h uintptr
	err := check("cuEventCreate", d.drv.call(d.drv.cuEventCreate, uintptr(unsafe.Pointer(&h)), cuEventDefault))
	return h, err
}

func (d *Device) event(e gpu.Event) (*eventRec, error) {
	if e <= 0 || int(e) >= len(d.events) || !d.events[e].live {
		return nil, fmt.Errorf("%w: cuda: event %d", gpu.ErrInvalidHandle, e)
	}
	return &d.events[e], nil
}

// DestroyEvent destroys e.
func (d *Device) DestroyEvent(e gpu.Event) error {
	ev, err := d.event(e)
	if err != nil {
		return err
	}
	ev.live = false
	var first error
	for c, h := range ev.native {
		if h == 0 {
			continue
		}
		if err := d.use(int32(c)); err != nil && first == nil {
			first = err
		}
		if err := check("cuEventDestroy_v2", d.fast(d.drv.cuEventDestroy, h)); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Record places e in s.
func (d *Device) Record(e gpu.Event, s gpu.Stream) error {
	ev, err := d.event(e)
	if err != nil {
		return err
	}
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	c := st.ctx
	if ev.native[c] == 0 {
		h, err := d.newNative(c)
		if err != nil {
			return err
		}
		ev.native[c] = h
	}
	if err := d.use(c); err != nil {
		return err
	}
	if err := check("cuEventRecord", d.fast(d.drv.cuEventRecord, ev.native[c], st.h)); err != nil {
		return err
	}
	d.recorded(e, c, s, false)
	return nil
}

// staleMargin bounds the rounding between two reads of one completion's
// time (float32 milliseconds from the base, re-based in between): far less
// than the time between two replays of a graph.
const staleMargin = time.Microsecond

// StaleGraphEvents counts the queries that found a graph's event complete
// at its previous completion's time (the previous replay's state, read
// before the GPU reached the node) and answered not complete.
func (d *Device) StaleGraphEvents() int { return d.stale }

// TakeHostStalls returns the stalls seen in Wait since the last call and
// starts counting afresh: a gap of gpu.StallThreshold or more between two
// polls of the GPU while Wait spun (not while it slept on purpose).
func (d *Device) TakeHostStalls() gpu.HostStalls {
	s := d.stalls
	d.stalls = gpu.HostStalls{}
	return s
}

// recorded notes that e was just recorded in stream s of context c, by a
// graph's event-record node when byGraph.
func (d *Device) recorded(e gpu.Event, c int32, s gpu.Stream, byGraph bool) {
	ev := &d.events[e]
	d.recSeq++
	ev.ctx, ev.done, ev.byGraph, ev.timed, ev.stream, ev.seq, ev.given = c, false, byGraph, false, s, d.recSeq, false
	if !ev.pending {
		ev.pending = true
		d.pending[s] = append(d.pending[s], e)
		d.npending++
	}
}

func (d *Device) query(ev *eventRec) (bool, error) {
	if ev.ctx < 0 {
		return false, nil
	}
	if ev.done {
		return true, nil // this record was seen complete already
	}
	// No context switch: the driver answers cuEventQuery and
	// cuEventElapsedTime for an event of any context of the device
	// whichever is current, and switching cost 0.9–1.8 µs per pair of
	// polls on H200s (TestGPUQueryAcrossContexts) — a BE event in its
	// partition's context and an HP event in the primary one, polled in
	// turn.
	switch r := d.fast(d.drv.cuEventQuery, ev.native[ev.ctx]); r {
	case resultSuccess:
		if ev.byGraph || ev.hasPrev {
			// A graph's event-record node may show the previous
			// replay's state until the GPU reaches it: a completion no
			// later than the previous one is that one. Compared on the
			// event clock alone (the host clock drifts from it).
			cr := &d.ctxs[ev.ctx]
			t, err := d.since(cr, ev.native[ev.ctx])
			if err != nil {
				return false, err
			}
			if ev.byGraph && ev.hasPrev && t <= ev.prevAt+(cr.shift-ev.prevShift)+staleMargin {
				d.stale++
				return false, nil
			}
			ev.prevAt, ev.prevShift, ev.hasPrev, ev.timed, ev.byGraph = t, cr.shift, true, true, false
		}
		ev.pending = false // seen: Wait need not report it again
		ev.done = true
		return true, nil
	case resultNotReady:
		return false, nil
	default:
		return false, check("cuEventQuery", r)
	}
}

// Query reports whether e has completed. An event never recorded has not.
func (d *Device) Query(e gpu.Event) (bool, error) {
	ev, err := d.event(e)
	if err != nil {
		return false, err
	}
	return d.query(ev)
}

// Time is the device-clock time at which e completed: the time of its
// context's base event plus cuEventElapsedTime(base, e). Resolution is that of
// CUDA event timestamps (about 0.5 µs); the offset to the host clock is
// uncertain by ClockUncertainty.
func (d *Device) Time(e gpu.Event) (time.Duration, error) {
	ev, err := d.event(e)
	if err != nil {
		return 0, err
	}
	if !ev.done {
		ok, err := d.query(ev)
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, fmt.Errorf("%w: cuda: event %d has not completed", gpu.ErrNotReady, e)
		}
	}
	if ev.given {
		return ev.givenAt, nil
	}
	cr := &d.ctxs[ev.ctx]
	t := ev.prevAt
	if !ev.timed {
		if t, err = d.since(cr, ev.native[ev.ctx]); err != nil {
			return 0, err
		}
		if t-cr.baseAt > time.Second {
			d.rebase(ev.ctx)
		}
	}
	return d.give(ev, t), nil
}

// give fixes t as ev's completion time. Asked in record order (as a
// scheduler polls), the events of a stream get times that never run
// backwards: work in a stream completes in order, but a rebase that steers
// the clock back (by up to maxSteer) between two events' readings would
// otherwise time the later one first. An event asked for after a later one
// of its stream keeps its own reading.
func (d *Device) give(ev *eventRec, t time.Duration) time.Duration {
	if s := ev.stream; s > 0 && int(s) < len(d.streams) {
		if st := &d.streams[s]; ev.seq > st.lastSeq {
			t = max(t, st.last)
			st.last, st.lastSeq = t, ev.seq
		}
	}
	ev.givenAt, ev.given = t, true
	return t
}

// since is the device-clock time of completed event h of context cr.
func (d *Device) since(cr *ctxRec, h uintptr) (time.Duration, error) {
	if err := check("cuEventElapsedTime", d.fast(d.drv.cuEventElapsedTime, uintptr(unsafe.Pointer(&d.cm.ms)), cr.base, h)); err != nil {
		return 0, err
	}
	return cr.baseAt + time.Duration(float64(d.cm.ms)*1e6), nil
}

// rebase keeps elapsed times short: cuEventElapsedTime returns float32
// milliseconds, whose resolution decays with distance from the base (61 ns at
// 1 s, 62 µs at 1000 s). Once the base is over a second old a new base event
// is recorded; when it has completed its time is derived from the old base
// and it replaces it.
func (d *Device) rebase(c int32) {
	cr := &d.ctxs[c]
	if d.use(c) != nil {
		return
	}
	if !cr.nextRec {
		t1 := d.Now()
		if d.fast(d.drv.cuEventRecord, cr.next, cr.copyStr) != resultSuccess {
			return
		}
		cr.nextRec, cr.nextHost = true, -1
		// The copy stream is idle between uploads: the event completes
		// within microseconds, and then its host time is known to within
		// half the spin.
		for d.Now()-t1 < hostAnchor {
			if d.fast(d.drv.cuEventQuery, cr.next) == resultSuccess {
				t2 := d.Now()
				cr.nextHost, cr.nextSpan = t1+(t2-t1)/2, t2-t1
				break
			}
		}
		if cr.nextHost < 0 {
			return
		}
	}
	if d.fast(d.drv.cuEventQuery, cr.next) != resultSuccess {
		return
	}
	at, err := d.since(cr, cr.next)
	if err != nil {
		return
	}
	// Steer the GPU-derived clock toward the host's: events are timed by
	// the GPU's timer, arrivals and launches by the host's, and the two
	// drift apart (tens of ppm); unsteered, latencies drifted by about a
	// millisecond a minute on an H100. A step is bounded, so event times
	// move by at most maxSteer across one rebase.
	if cr.nextHost >= 0 {
		step := steerStep(cr.nextHost-at, cr.nextSpan)
		at += step
		cr.shift += step
		d.steered += step.Abs()
		d.maxStep = max(d.maxStep, step.Abs())
	}
	cr.base, cr.next = cr.next, cr.base
	cr.baseAt = at
	cr.nextRec = false
}

// hostAnchor is how long rebase spins for its event to complete (so that
// its host time is known to within half of it). An anchor found within
// tightAnchor may correct the GPU-derived clock toward the host's by up to
// maxSteer at one rebase (about one a second: 200 ppm); a looser one (the
// host or the GPU busy: a training job's kernels, a stalled VM) by up to
// looseSteer, still above the clocks' drift (tens of ppm), so the clock
// keeps following the host's however busy the machine is, its error from
// one loose anchor bounded by looseSteer.
const (
	hostAnchor  = 200 * time.Microsecond
	tightAnchor = 20 * time.Microsecond
	maxSteer    = 200 * time.Microsecond
	looseSteer  = 50 * time.Microsecond
)

// steerStep is the correction rebase applies for an event clock offset
// from the host's by off (host minus event), whose host time was found
// within a spin of span.
func steerStep(off, span time.Duration) time.Duration {
	bound := maxSteer
	if span > tightAnchor {
		bound = looseSteer
	}
	return min(max(off, -bound), bound)
}

// ClockSteering reports how far rebases have moved the event clock toward
// the host clock in total, and the largest single step.
func (d *Device) ClockSteering() (total, maxStep time.Duration) { return d.steered, d.maxStep }
