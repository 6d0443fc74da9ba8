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
	// Group, when set on HP clients of one profile, makes them the streams
	// of one server (HPWorkload.Group): a request submitted to any of them
	// goes to the member with the fewest requests accepted and not finished.
	Group string
	// Batched, on an HP client, are its model's profiles at larger batch
	// sizes (HPWorkload.Batched): the requests waiting when its stream
	// empties are served together in one pass. Its hooks are then
	// BeforePass and AfterPass.
	Batched []*profiles.Profile
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
	// BeforePass and AfterPass take the place of BeforeRequest and
	// AfterRequest for a client with batched profiles
	// (OnlineClient.Batched). BeforePass runs for each request of a pass
	// when the pass is formed, before its first kernel is submitted, with
	// the pass's variant (0: the client's profile, one request; v: its
	// Batched[v-1]) and the request's slot in the pass (0..n-1, arrival
	// order); AfterPass when the pass's last kernel has completed. A
	// BeforePass error fails that request only (the pass still runs).
	BeforePass func(client, variant, slot int, id uint64, tag any) error
	AfterPass  func(client, variant, slot int, id uint64, tag any) error
}

// Workload is the workload c's clients make: its HP clients, and its BE
// clients, which start only when a run is started for them (StartBE).
func (c OnlineConfig) Workload() Workload {
	var w Workload
	for _, h := range c.HP {
		w.HP = append(w.HP, HPWorkload{Name: h.Name, Profile: h.Profile, Group: h.Group, Batched: h.Batched})
	}
	for _, b := range c.BE {
		w.BE = append(w.BE, BEWorkload{Name: b.Name, Profile: b.Profile, Start: forever})
	}
	return w
}

// forever is the online driver's run length and its BE clients' start:
// longer than any daemon lives.
const forever = time.Duration(1 << 62)

// OnlineConfig configures an Online driver.
type OnlineConfig struct {
	Policy Policy
	HP     []OnlineClient
	BE     []OnlineClient
	// Bind makes the Binder once the device is open (in the owner
	// goroutine); nil means NewProfileBinder (gpu/sim) over Workload().
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
	// NoHPGraphs launches HP requests kernel by kernel (Options.NoHPGraphs).
	NoHPGraphs bool
	// NoBEGraphs launches BE kernels one by one (Options.NoBEGraphs).
	NoBEGraphs bool
	// HPKernelEvents records an event after every kernel of an HP graph
	// (Options.HPKernelEvents).
	HPKernelEvents bool
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
	Batch   int           // requests served by its pass (1: alone; OnlineClient.Batched)
	Input   time.Duration // host time in the BeforeRequest hook (inputs uploaded)
	Output  time.Duration // host time in the AfterRequest hook (outputs read back)
	// Causes splits End − Arrival beyond the kernels' solo time (see
	// Cause); the loop's arrival is when the request entered the core.
	Causes Causes
	Err    error
}

// BERun is a run of N iterations of a BE client's closed loop. Its hooks
// run in the goroutine that owns the device, so they may use it (upload a
// BE request's inputs, read its outputs back); they must not block. What
// the run did is published in the BEProgress StartBE returns, never
// through a call.
type BERun struct {
	Iterations int
	// Setup runs before the first launch; an error ends the run with it.
	Setup func() error
	// Collect runs after each iteration.
	Collect func(it IterationRecord)
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
	groups  [][]int // per HP client: the members of its Group (nil: none)
	notify  chan struct{}
	started chan struct{}
	done    chan struct{}

	mu struct {
		sync.Mutex
		state    int // 0 new, 1 running, 2 closing/stopped
		runErr   error
		startErr error
		seq      uint64
		inbox    []*request
		ctl      []beCtl
		depth    []int // per HP client: accepted, not finished
		stats    OnlineStats
		beWork   []time.Duration
		preempts []time.Duration
	}
}

type beCtl struct {
	client int
	id     uint64
	stop   bool
	run    BERun
	prog   *BEProgress
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
	groups, err := hpGroups(cfg.Workload().HP)
	if err != nil {
		return nil, err
	}
	o := &Online{open: open, cfg: cfg, groups: groups, notify: make(chan struct{}, 1),
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

// Submit queues an HP request of client (an index into cfg.HP; in a
// Group, of the member with the fewest requests accepted and not
// finished, the first on a tie); tag is handed to the hooks and back in
// the result. The channel receives exactly one result. Errors wrap ErrConfig (unknown client), ErrQueueFull or
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
	client = leastBusy(client, o.groups[client], func(m int) int { return o.mu.depth[m] })
	if o.mu.depth[client] >= o.cfg.MaxQueue {
		o.mu.Unlock()
		return nil, fmt.Errorf("%w: HP client %s has %d requests waiting (limit %d)", ErrQueueFull, o.cfg.HP[client].Name, o.cfg.MaxQueue, o.cfg.MaxQueue)
	}
	o.mu.depth[client]++
	o.mu.seq++
	r := &request{client: client, id: o.mu.seq, tag: tag, out: make(chan OnlineResult, 1)}
	o.mu.inbox = append(o.mu.inbox, r)
	o.mu.Unlock()
	o.wake()
	return r.out, nil
}

// StartBE queues a run of BE client (an index into cfg.BE); it starts when
// the client's earlier runs have ended. The run's progress is published in
// the BEProgress returned (its ID is for StopBE).
func (o *Online) StartBE(client int, r BERun) (*BEProgress, error) {
	if client < 0 || client >= len(o.cfg.BE) {
		return nil, fmt.Errorf("%w: no BE client %d (have %d)", ErrConfig, client, len(o.cfg.BE))
	}
	if r.Iterations <= 0 {
		return nil, fmt.Errorf("%w: a BE run needs at least 1 iteration, got %d", ErrConfig, r.Iterations)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.mu.state != 1 {
		return nil, fmt.Errorf("%w: not accepting BE runs", ErrStopped)
	}
	o.mu.seq++
	p := newBEProgress(o.mu.seq)
	o.mu.ctl = append(o.mu.ctl, beCtl{client: client, id: p.id, run: r, prog: p})
	o.wake()
	return p, nil
}

// StopBE cancels run id of BE client, queued or running: no further
// launches; its BEProgress ends with ErrCancelled once its launches in
// flight have completed. Stopping a run that already ended does nothing.
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

func (o *Online) setup() (*loop, gpu.Device, error) {
	dev, err := o.open()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: open: %w", ErrDevice, err)
	}
	if dev == nil {
		return nil, nil, fmt.Errorf("%w: the opener returned no device", ErrConfig)
	}
	w := o.cfg.Workload()
	opt := Options{Policy: o.cfg.Policy, Duration: forever, Stall: o.cfg.Stall, OnDecision: o.cfg.OnDecision, NoHPGraphs: o.cfg.NoHPGraphs, NoBEGraphs: o.cfg.NoBEGraphs, HPKernelEvents: o.cfg.HPKernelEvents}
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
	l := newLoop(d, o)
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
		if !c.stop {
			c.prog.end(0, err)
		}
	}
}
