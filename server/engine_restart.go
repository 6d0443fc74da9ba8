package server

import (
	"context"
	"fmt"
	"time"

	"atoll/sched"
)

// The engine's recovery from a device failure: reopening the device with a
// new scheduler loop, readiness, and requests waiting for the reopen.

// maxBackoff caps the wait between device reopens.
const maxBackoff = 30 * time.Second

// supervise runs the scheduler loop and, when it stops on a device error
// while the engine is not closing, reopens the device with a new loop (up
// to maxRestarts times, with doubling backoff). It returns when the engine
// closes or gives up.
func (e *engineImpl) supervise(ctx context.Context) {
	defer close(e.stopped)
	wait := e.backoff
	for {
		on := e.loop()
		_ = on.Run(ctx)
		e.onStopped(on)
		if ctx.Err() != nil || e.closing.Load() || on.Err() == nil || e.restarts.Load() >= int64(e.maxRestarts) {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, maxBackoff)
		next, err := sched.NewOnline(e.open, e.ocfg)
		if err != nil {
			e.fail(fmt.Errorf("reopening the device: %w", err))
			return
		}
		e.keepStats(on)
		e.online.Store(next)
		e.restarts.Add(1)
		go e.readyWhenStarted(next)
	}
}

// readyWhenStarted marks the engine ready once a restarted loop has opened
// the device and bound the models.
func (e *engineImpl) readyWhenStarted(on *sched.Online) {
	select {
	case <-on.Started():
	case <-on.Done():
		return
	}
	if on.StartErr() == nil && e.loop() == on && !e.closing.Load() {
		e.ready.Store(true) // before failed is cleared: see onStopped
		e.failed.Store(nil)
	}
}

func (e *engineImpl) fail(err error) { e.failed.Store(&err) }

// Broken implements Breakable: the error that stopped the engine for good
// (the device failed with no restart left, or reopening it failed); nil
// while it serves, reopens or closes normally.
func (e *engineImpl) Broken() error {
	p := e.failed.Load()
	if p == nil || e.closing.Load() {
		return nil
	}
	select {
	case <-e.stopped:
		return *p
	default:
	}
	if e.restarts.Load() >= int64(e.maxRestarts) {
		// No reopen will come (restarts: 0, as standby workers run): the
		// engine is broken from the failure on, before its loop has
		// wound down, so every 500 a request gets for it finds the
		// engine not live.
		return *p
	}
	return nil
}

// restarting reports whether the device failed and the engine will reopen
// it (restarts left, not closing).
func (e *engineImpl) restarting() bool {
	return e.failed.Load() != nil && e.restarts.Load() < int64(e.maxRestarts) && !e.closing.Load()
}

// awaitRestart waits until the engine serves again after a device failure
// (at once false with NoWaitOnFailure):
// once failed (if not nil) has stopped, until a new loop is ready. It
// returns false at once when failed stopped for another reason than a
// device failure, and when the engine closes, gives up on the device, or
// ctx ends first.
func (e *engineImpl) awaitRestart(ctx context.Context, failed *sched.Online) bool {
	if e.noWait {
		return false
	}
	if failed != nil {
		select {
		case <-failed.Done():
		case <-ctx.Done():
			return false
		case <-e.abort:
			return false
		}
		if failed.Err() == nil {
			return false // stopped for shutdown, not a failure
		}
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if e.closing.Load() {
			return false
		}
		if e.loop() != failed && e.Ready() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-e.stopped:
			return false
		case <-e.abort:
			return false
		case <-tick.C:
		}
	}
}

// keepStats adds the counters of a stopped loop to the engine's past ones,
// so the /metrics counters never go back across a restart.
func (e *engineImpl) keepStats(on *sched.Online) {
	s := on.Stats()
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	e.past.Preemptions += uint64(s.Core.Preemptions)
	e.past.PaddedLaunches += uint64(s.PaddedLaunches)
	e.past.Launches += uint64(s.Launches)
	e.past.BEIterations += uint64(s.Core.Iterations)
	e.past.BEWorkSeconds += s.Core.BEWork.Seconds()
}

// onStopped runs when a scheduler loop has returned.
func (e *engineImpl) onStopped(on *sched.Online) {
	// failed before ready: a request that finds the engine not ready must
	// also find why (restarting), or it is told the engine is closing.
	if err := on.Err(); err != nil {
		e.failed.Store(&err)
	}
	e.ready.Store(false)
}

func (e *engineImpl) unavailable() error {
	if p := e.failed.Load(); p != nil {
		if e.restarts.Load() < int64(e.maxRestarts) && !e.closing.Load() {
			return fmt.Errorf("%w: the device failed and is being reopened (restart %d of %d); retry shortly: %v", ErrUnavailable, e.restarts.Load()+1, e.maxRestarts, *p)
		}
		return fmt.Errorf("%w: the device failed; restart the daemon: %v", ErrInternal, *p)
	}
	return fmt.Errorf("%w: the engine is closing", ErrShuttingDown)
}
