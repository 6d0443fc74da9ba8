package sched

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"atoll/gpu"
	"atoll/profiles"
)

// Online's sentinel errors (besides ErrConfig, ErrDevice, ErrStuck).
var (
	// ErrQueueFull: a client's bounded queue is full; retry later.
	ErrQueueFull = errors.New("sched: client queue full")
	// ErrStopped: the online driver is not running (not started yet,
	// shutting down or stopped); the request or run was not served.
	ErrStopped = errors.New("sched: online driver stopped")
	// ErrCancelled: a BE run was stopped by StopBE before its iterations
	// were done.
	ErrCancelled = errors.New("sched: BE run cancelled")
)

// OnlineClient is one client of the online driver: a name (for errors and
// logs) and the profile whose kernel sequence one request (HP) or one
// iteration (BE) runs.
type OnlineClient struct {
	Name    string
	Profile *profiles.Profile
}

// OnlineHooks are called in the goroutine that runs Online.Run (the device
// owner), so they may use the device (upload inputs, read outputs). They
// must not block for long: the scheduler loop waits for them. A hook error
// fails that request only.
type OnlineHooks struct {
	// BeforeRequest runs before an HP request's first kernel is scheduled
	// (the previous request of the client has finished, so its buffers
	// are free).
	BeforeRequest func(client int, id uint64, tag any) error
	// AfterRequest runs when an HP request's last kernel has completed,
	// before the next request of the client starts.
	AfterRequest func(client int, id uint64, tag any) error
}

// OnlineConfig configures an Online driver.
type OnlineConfig struct {
	Policy Policy
	HP     []OnlineClient
	BE     []OnlineClient
	// Bind makes the Binder once the device is open (in the owner
	// goroutine); nil means NewProfileBinder (gpu/sim).
	Bind func(dev gpu.Device) (Binder, error)
	// Release runs in the owner goroutine after the loop ends and before
	// the device is closed (free model instances there).
	Release func(dev gpu.Device)
	// Pace keeps a simulated device's virtual clock in step with the wall
	// clock (for a daemon on gpu/sim). Without it a simulator runs as fast
	// as it can (tests); a real GPU's clock is the wall clock anyway.
	Pace bool
	// MaxQueue bounds each HP client's requests accepted and not finished
	// (default 64).
	MaxQueue int
	// Quantum is the longest the loop waits on the device before it looks
	// at new submissions while work is in flight (default 100µs).
	Quantum time.Duration
	// Stall: launches in flight and none completed for this long (device
	// clock) stops the driver with ErrStuck (default 10 s).
	Stall time.Duration
	// Drain bounds (wall clock) how long shutdown waits for requests in
	// flight to finish (default 10 s).
	Drain time.Duration
	Hooks OnlineHooks
	// OnDecision sees every decision in the owner goroutine; it must not
	// block.
	OnDecision func(Decision)
}

// OnlineResult is a finished (or failed) HP request. Times are on the
// device clock.
type OnlineResult struct {
	Client  int
	ID      uint64
	Tag     any
	Arrival time.Duration // taken in by the loop
	Start   time.Duration // first kernel started
	End     time.Duration // last kernel completed
	Queue   time.Duration // Start − Arrival
	Service time.Duration // End − Start
	Input   time.Duration // host time in the BeforeRequest hook (inputs uploaded)
	Output  time.Duration // host time in the AfterRequest hook (outputs read back)
	// Causes splits End − Arrival beyond the kernels' solo time (see
	// Cause); the loop's arrival is when the request entered the core.
	Causes Causes
	Err    error
}

// BERun is a run of N iterations of a BE client's closed loop. Its
// callbacks run in the owner goroutine and must not block.
type BERun struct {
	Iterations int
	// OnStart runs before the first launch; an error ends the run.
	OnStart func() error
	// OnIteration runs after each iteration (done counts from 1).
	OnIteration func(done int, it IterationRecord)
	// OnEnd runs once: err is nil when every iteration ran, wraps
	// ErrCancelled after StopBE, ErrStopped at shutdown, or the failure.
	OnEnd func(done int, err error)
}

// OnlineStats are the online driver's counters.
type OnlineStats struct {
	Backend, Device string
	Core            Stats // the core's counters (BEWorkByClient copied)
	Launches        int
	PaddedLaunches  int
	QueueDepth      int // HP requests accepted and not finished
	Running         bool
}

// Online is the long-lived driver of a daemon: one goroutine (Run) owns the
// device and a Core; other goroutines Submit HP requests and start or stop
// BE runs. Each HP client has at most one request in the core at a time (so
// a model instance's buffers are not overwritten while in use); the rest
// wait in a bounded per-client queue.
type Online struct {
	open    func() (gpu.Device, error)
	cfg     OnlineConfig
	notify  chan struct{}
	started chan struct{}
	done    chan struct{}

	mu struct {
		sync.Mutex
		state    int // 0 new, 1 running, 2 closing/stopped
		runErr   error
		startErr error
		seq      uint64
		inbox    []*onReq
		ctl      []beCtl
		depth    []int // per HP client: accepted, not finished
		stats    OnlineStats
		beWork   []time.Duration
		preempts []time.Duration
	}
}

type onReq struct {
	client  int
	id      uint64
	tag     any
	out     chan OnlineResult
	arrival time.Duration
	input   time.Duration // host time of its BeforeRequest hook
}

type beCtl struct {
	client int
	id     uint64
	stop   bool
	run    BERun
}

// NewOnline checks cfg; Run opens the device with open and serves.
func NewOnline(open func() (gpu.Device, error), cfg OnlineConfig) (*Online, error) {
	if open == nil {
		return nil, fmt.Errorf("%w: no device opener", ErrConfig)
	}
	if cfg.Policy == nil {
		return nil, fmt.Errorf("%w: no policy; pick one from policies.Names()", ErrConfig)
	}
	if len(cfg.HP)+len(cfg.BE) == 0 {
		return nil, fmt.Errorf("%w: no clients; give at least one HP or BE client", ErrConfig)
	}
	for i, c := range cfg.HP {
		if err := ValidateProfile(c.Profile); err != nil {
			return nil, fmt.Errorf("HP client %d (%s): %w", i, c.Name, err)
		}
	}
	for i, c := range cfg.BE {
		if err := ValidateProfile(c.Profile); err != nil {
			return nil, fmt.Errorf("BE client %d (%s): %w", i, c.Name, err)
		}
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 64
	}
	if cfg.Quantum <= 0 {
		cfg.Quantum = 100 * time.Microsecond
	}
	if cfg.Stall <= 0 {
		cfg.Stall = 10 * time.Second
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 10 * time.Second
	}
	o := &Online{open: open, cfg: cfg, notify: make(chan struct{}, 1),
		started: make(chan struct{}), done: make(chan struct{})}
	o.mu.depth = make([]int, len(cfg.HP))
	o.mu.beWork = make([]time.Duration, len(cfg.BE))
	return o, nil
}

// Started is closed once Run has opened the device and set up (or failed
// to: see StartErr).
func (o *Online) Started() <-chan struct{} { return o.started }

// StartErr is the setup error, valid after Started is closed.
func (o *Online) StartErr() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.startErr
}

// Done is closed when Run has returned.
func (o *Online) Done() <-chan struct{} { return o.done }

// Err is Run's result once Done is closed.
func (o *Online) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.runErr
}

func (o *Online) wake() {
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// Submit queues an HP request of client (an index into cfg.HP); tag is
// handed to the hooks and back in the result. The channel receives exactly
// one result. Errors wrap ErrConfig (unknown client), ErrQueueFull or
// ErrStopped.
func (o *Online) Submit(client int, tag any) (<-chan OnlineResult, error) {
	if client < 0 || client >= len(o.cfg.HP) {
		return nil, fmt.Errorf("%w: no HP client %d (have %d)", ErrConfig, client, len(o.cfg.HP))
	}
	o.mu.Lock()
	if o.mu.state != 1 {
		o.mu.Unlock()
		return nil, fmt.Errorf("%w: not accepting requests", ErrStopped)
	}
	if o.mu.depth[client] >= o.cfg.MaxQueue {
		o.mu.Unlock()
		return nil, fmt.Errorf("%w: HP client %s has %d requests waiting (limit %d)", ErrQueueFull, o.cfg.HP[client].Name, o.cfg.MaxQueue, o.cfg.MaxQueue)
	}
	o.mu.depth[client]++
	o.mu.seq++
	r := &onReq{client: client, id: o.mu.seq, tag: tag, out: make(chan OnlineResult, 1)}
	o.mu.inbox = append(o.mu.inbox, r)
	o.mu.Unlock()
	o.wake()
	return r.out, nil
}

// StartBE queues a run of BE client (an index into cfg.BE); it starts when
// the client's earlier runs have ended. It returns the run's id for StopBE.
func (o *Online) StartBE(client int, r BERun) (uint64, error) {
	if client < 0 || client >= len(o.cfg.BE) {
		return 0, fmt.Errorf("%w: no BE client %d (have %d)", ErrConfig, client, len(o.cfg.BE))
	}
	if r.Iterations <= 0 {
		return 0, fmt.Errorf("%w: a BE run needs at least 1 iteration, got %d", ErrConfig, r.Iterations)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.mu.state != 1 {
		return 0, fmt.Errorf("%w: not accepting BE runs", ErrStopped)
	}
	o.mu.seq++
	o.mu.ctl = append(o.mu.ctl, beCtl{client: client, id: o.mu.seq, run: r})
	o.wake()
	return o.mu.seq, nil
}

// StopBE cancels run id of BE client, queued or running: no further
// launches; its OnEnd gets ErrCancelled once its launches in flight have
// completed. Stopping a run that already ended does nothing.
func (o *Online) StopBE(client int, id uint64) error {
	if client < 0 || client >= len(o.cfg.BE) {
		return fmt.Errorf("%w: no BE client %d (have %d)", ErrConfig, client, len(o.cfg.BE))
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.mu.state != 1 {
		return fmt.Errorf("%w: not running", ErrStopped)
	}
	o.mu.ctl = append(o.mu.ctl, beCtl{client: client, id: id, stop: true})
	o.wake()
	return nil
}

// Stats returns the latest counters.
func (o *Online) Stats() OnlineStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.mu.stats
	s.Core.BEWorkByClient = append([]time.Duration(nil), o.mu.beWork...)
	s.QueueDepth = 0
	for _, d := range o.mu.depth {
		s.QueueDepth += d
	}
	s.Running = o.mu.state == 1
	return s
}

// TakePreemptionLatencies returns the preemption latencies recorded since
// the last call (at most 4096 are kept between calls).
func (o *Online) TakePreemptionLatencies() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	p := o.mu.preempts
	o.mu.preempts = nil
	return p
}

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

// Run opens the device and serves until ctx ends (then it drains: queued
// requests fail with ErrStopped, requests in the core get up to
// cfg.Drain to finish, BE runs end with ErrStopped) or a device call fails
// (every request and run then fails with the error, wrapping ErrDevice).
// It closes the device before returning. The calling goroutine is locked
// to its OS thread for the call (the CUDA device requires it). Run returns
// nil after a clean shutdown. It may be called once.
func (o *Online) Run(ctx context.Context) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	o.mu.Lock()
	if o.mu.state != 0 {
		o.mu.Unlock()
		return fmt.Errorf("%w: Run called twice", ErrConfig)
	}
	o.mu.state = 1
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.mu.state = 2
		o.mu.runErr = err
		o.mu.Unlock()
		close(o.done)
	}()
	l, dev, err := o.setup()
	o.mu.Lock()
	o.mu.startErr = err
	if err != nil {
		o.mu.state = 2
	}
	o.mu.Unlock()
	close(o.started)
	if err != nil {
		o.failAll(err)
		return err
	}
	err = l.serve(ctx)
	if err != nil {
		l.failEverything(err)
	}
	l.d.release()
	if o.cfg.Release != nil {
		o.cfg.Release(dev)
	}
	if cerr := dev.Close(); cerr != nil && err == nil {
		err = devErr("Close", cerr)
	}
	return err
}

func (o *Online) setup() (*onlineLoop, gpu.Device, error) {
	dev, err := o.open()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: open: %w", ErrDevice, err)
	}
	if dev == nil {
		return nil, nil, fmt.Errorf("%w: the opener returned no device", ErrConfig)
	}
	var w Workload
	for _, c := range o.cfg.HP {
		w.HP = append(w.HP, HPWorkload{Name: c.Name, Profile: c.Profile})
	}
	const forever = time.Duration(1 << 62)
	for _, c := range o.cfg.BE {
		w.BE = append(w.BE, BEWorkload{Name: c.Name, Profile: c.Profile, Start: forever})
	}
	opt := Options{Policy: o.cfg.Policy, Duration: forever, Stall: o.cfg.Stall, OnDecision: o.cfg.OnDecision}
	if o.cfg.Bind != nil {
		b, err := o.cfg.Bind(dev)
		if err != nil {
			if o.cfg.Release != nil {
				o.cfg.Release(dev)
			}
			_ = dev.Close()
			return nil, nil, fmt.Errorf("sched: binder: %w", err)
		}
		opt.Binder = b
	}
	d, err := newDriver(dev, w, opt)
	if err != nil {
		if o.cfg.Release != nil {
			o.cfg.Release(dev)
		}
		_ = dev.Close()
		return nil, nil, err
	}
	l := &onlineLoop{o: o, d: d,
		hpPend: make([][]*onReq, len(o.cfg.HP)), hpCur: make([]*onReq, len(o.cfg.HP)),
		beCur: make([]*beRun, len(o.cfg.BE)), beQ: make([][]*beRun, len(o.cfg.BE)),
		wallStart: time.Now(), devStart: dev.Now(), timer: time.NewTimer(time.Hour)}
	l.timer.Stop()
	o.mu.Lock()
	o.mu.stats.Backend, o.mu.stats.Device = dev.Info().Backend, dev.Info().Name
	o.mu.Unlock()
	return l, dev, nil
}

// failAll fails whatever sits in the shared inbox (setup failure).
func (o *Online) failAll(err error) {
	o.mu.Lock()
	inbox, ctl := o.mu.inbox, o.mu.ctl
	o.mu.inbox, o.mu.ctl = nil, nil
	for i := range o.mu.depth {
		o.mu.depth[i] = 0
	}
	o.mu.Unlock()
	for _, r := range inbox {
		r.out <- OnlineResult{Client: r.client, ID: r.id, Tag: r.tag, Err: err}
	}
	for _, c := range ctl {
		if !c.stop && c.run.OnEnd != nil {
			c.run.OnEnd(0, err)
		}
	}
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
				return nil
			}
			// Caught up with the wall clock: sleep, but wake for a
			// submission.
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
	for _, dec := range core.Decisions() {
		if err := l.apply(dec); err != nil {
			return err
		}
	}
	return nil
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
