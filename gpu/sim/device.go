package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"atoll/gpu"
)

// Priority range of the simulated GPUs (Hopper's: 0 least, -5 most urgent).
const (
	leastPriority    = 0
	greatestPriority = -5
	prioLevels       = leastPriority - greatestPriority + 1
)

// ModelVersion names the timing model; it is Info().Driver.
const ModelVersion = "atoll-sim/1 (fluid block model)"

// Device is a simulated GPU. Make one with New. It implements gpu.Device;
// like every gpu.Device it is owned by one goroutine, except for HostWord
// Load and Store.
type Device struct {
	cfg     Config
	spec    gpu.Spec
	lat     float64 // launch latency, ns
	blkMin  float64 // BlockMin, ns
	hostLat float64 // HostReadLatency, ns
	rng     *rand.Rand
	closed  bool
	// fault is the sticky error a fault kernel left (FaultPrefix): every
	// later call but the destroys and Close returns it, as a CUDA context's
	// calls do after a kernel fault.
	fault error

	now      float64 // virtual time, ns
	observed bool    // an event completed or a kernel stored a HostWord during this Wait
	// unseen: something observable happened while the host was busy in a
	// call (hostBusy) since the last Wait returned; the next Wait returns
	// at once, as the real GPU's does when an event it would wait for has
	// already completed.
	unseen   bool
	notice   float64   // NoticeLatency, ns
	seenAt   []float64 // when completions not yet seen by the host become seen
	seq      uint64    // launches so far
	hostFree float64   // when the GPU-wide host-read server is next free, ns

	streams  []*stream   // handle-1
	events   []eventSlot // handle-1
	freeEv   []int       // indexes of destroyed events, reused first
	funcs    []string    // handle-1
	fkind    []fnKind    // handle-1: what a launch of it costs the host
	graphs   []simGraph  // handle-1
	fnByName map[string]gpu.Func

	machines []*machine // per time-sliced context: the primary one first
	ctxs     []simCtx   // per context handle
	slice    slicer

	mem   memory
	words hostWords

	// Free lists and scratch space, so that steady-state simulation does
	// not allocate.
	kpool      []*kernel
	vendorBpsm []int // scratch: a launch's vendor launches' blocks per SM (checkVendor)
	gpool      []*group
	cpool      []*smClass
	cands      []*smClass
	chosen     []*smClass
	due        []*group
	touched    []*smClass
	blocked    []smSpan // dispatch scratch: SMs a pending kernel holds back
	// mergeBuf: mergeSorted's scratch.
	mergeBuf []int16

	// co and coMem: co-run interference is on, and its memory term;
	// smShare[w] is the share of an SM's warp slots w warps hold, at most
	// 1 (rates and coRun, computed once).
	co, coMem bool
	smShare   []float64
	stamp     uint64 // rates calls so far (kernel.stamp)
}

// New makes a simulated device.
func New(cfg Config) (*Device, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Device{
		cfg:      cfg,
		spec:     cfg.Spec,
		lat:      float64(cfg.LaunchLatency),
		notice:   float64(cfg.NoticeLatency),
		blkMin:   float64(cfg.BlockMin),
		hostLat:  float64(cfg.HostReadLatency),
		rng:      rand.New(rand.NewPCG(cfg.Seed, 0x61746f6c6c)), // "atoll"
		fnByName: map[string]gpu.Func{},
	}
	d.co = cfg.CoRunDevice > 0 || cfg.CoRunSM > 0 || cfg.CoRunMemory > 0
	d.coMem = cfg.CoRunMemory > 0
	d.smShare = make([]float64, cfg.Spec.MaxThreadsPerSM/max(cfg.Spec.WarpSize, 1)+1)
	for w := range d.smShare {
		d.smShare[w] = min(1, float64(w)*32/float64(cfg.Spec.MaxThreadsPerSM))
	}
	d.mem.init(cfg.Memory)
	d.words.init()
	d.machines = append(d.machines, d.newMachine(0))
	d.ctxs = append(d.ctxs, simCtx{})
	return d, nil
}

var _ gpu.Device = (*Device)(nil)

var errClosed = fmt.Errorf("%w: simulated device is closed", gpu.ErrInvalidHandle)

// Info describes the simulated device.
func (d *Device) Info() gpu.Info {
	info := gpu.Info{
		Backend:    "sim",
		Name:       "sim:" + d.spec.Name,
		Driver:     ModelVersion,
		Spec:       d.spec,
		Priorities: gpu.Priorities{Least: leastPriority, Greatest: greatestPriority},
	}
	if d.cfg.BLAS {
		info.BLAS = "simulated BLAS"
	}
	return info
}

// Now is the virtual device clock.
func (d *Device) Now() time.Duration { return dur(d.now) }

func dur(ns float64) time.Duration {
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// Wait advances virtual time to until, or to the first instant before it at
// which the host sees an event complete (Config.NoticeLatency after it
// did) or a kernel stored a HostWord, whichever is first. With no work on
// the device it jumps to until. It returns ctx.Err() if ctx is cancelled
// (virtual time then stops wherever it got to).
func (d *Device) Wait(ctx context.Context, until time.Duration) error {
	if d.fault != nil {
		return d.fault
	}
	if d.closed {
		return errClosed
	}
	if float64(until) <= d.now {
		return nil
	}
	if d.unseen {
		d.unseen = false
		return ctx.Err()
	}
	if err := d.run(ctx, float64(until)); err != nil || d.observed {
		return err
	}
	if w := float64(d.cfg.WakeLatency); w > 0 {
		// The host sees the deadline at the end of its loop's round
		// (Config.WakeLatency); a completion seen first ends the wait.
		return d.run(ctx, float64(until)+w)
	}
	return nil
}

// NewContext makes a further GPU context. Streams of different contexts
// never have blocks resident at the same time: the GPU time-slices.
func (d *Device) NewContext() (gpu.Context, error) {
	if d.fault != nil {
		return 0, d.fault
	}
	if d.closed {
		return 0, errClosed
	}
	c := gpu.Context(len(d.ctxs))
	d.machines = append(d.machines, d.newMachine(c))
	d.ctxs = append(d.ctxs, simCtx{machine: len(d.machines) - 1})
	return c, nil
}

// simCtx is what a context handle stands for: a time-sliced machine, and
// for an SM partition the SMs its streams may use, [lo, hi) (hi 0: up to
// the last SM).
type simCtx struct {
	machine   int
	lo, hi    int16
	partition bool
}

// NewPartition makes an SM partition of the primary context: its streams'
// blocks are placed on the device's highest sms SMs only, concurrently with
// the primary context's streams (which may use every SM and place on the
// lowest first). Asking again for a size already made returns the same
// context. Partitions of different sizes overlap; a real GPU's green
// contexts made from one split would not.
func (d *Device) NewPartition(sms int) (gpu.Context, error) {
	return d.partition(sms, false)
}

// NewPartitionRest makes the context of the SMs NewPartition(sms) leaves:
// its streams' blocks are placed on the device's lowest SMs − sms SMs only.
func (d *Device) NewPartitionRest(sms int) (gpu.Context, error) {
	return d.partition(sms, true)
}

// partition makes (or finds) the context of the top sms SMs, [SMs − sms,
// SMs), or with rest of the others, [0, SMs − sms).
func (d *Device) partition(sms int, rest bool) (gpu.Context, error) {
	if d.fault != nil {
		return 0, d.fault
	}
	if d.closed {
		return 0, errClosed
	}
	if err := gpu.CheckPartition(d.spec, sms); err != nil {
		return 0, err
	}
	x := simCtx{lo: int16(d.spec.SMs - sms), partition: true}
	if rest {
		x.lo, x.hi = 0, int16(d.spec.SMs-sms)
	}
	for c, y := range d.ctxs {
		if y == x {
			return gpu.Context(c), nil
		}
	}
	d.ctxs = append(d.ctxs, x)
	return gpu.Context(len(d.ctxs) - 1), nil
}

// NewStream makes a stream. The priority must lie in Info().Priorities.
func (d *Device) NewStream(opt gpu.StreamOptions) (gpu.Stream, error) {
	if d.fault != nil {
		return 0, d.fault
	}
	if d.closed {
		return 0, errClosed
	}
	if opt.Priority > leastPriority || opt.Priority < greatestPriority {
		return 0, fmt.Errorf("sim: stream priority %d outside [%d, %d] (lower is more urgent; use Info().Priorities.Clamp)",
			opt.Priority, greatestPriority, leastPriority)
	}
	if opt.Context < 0 || int(opt.Context) >= len(d.ctxs) {
		return 0, fmt.Errorf("%w: context %d (make one with NewContext; 0 is the primary context)", gpu.ErrInvalidHandle, opt.Context)
	}
	s := &stream{
		id:   gpu.Stream(len(d.streams) + 1),
		prio: opt.Priority,
		ctx:  opt.Context,
		m:    d.ctxs[opt.Context].machine,
		lo:   d.ctxs[opt.Context].lo,
		hi:   d.ctxs[opt.Context].hi,
		wake: math.Inf(1),
	}
	d.streams = append(d.streams, s)
	return s.id, nil
}

func (d *Device) stream(s gpu.Stream) (*stream, error) {
	if d.closed {
		return nil, errClosed
	}
	if s <= 0 || int(s) > len(d.streams) || d.streams[s-1].dead {
		return nil, fmt.Errorf("%w: stream %d (not made by this device, or destroyed)", gpu.ErrInvalidHandle, s)
	}
	return d.streams[s-1], nil
}

// DestroyStream releases s. Work already enqueued in it still runs to
// completion, as in CUDA; s can no longer be used.
func (d *Device) DestroyStream(s gpu.Stream) error {
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	st.dead = true
	return nil
}

type module struct {
	d    *Device
	name string
}

// LoadModule accepts any source: the simulator times kernels from their
// Launch.Cost, not their code.
func (d *Device) LoadModule(src gpu.ModuleSource) (gpu.Module, error) {
	if d.fault != nil {
		return nil, d.fault
	}
	if d.closed {
		return nil, errClosed
	}
	return &module{d: d, name: src.Name}, nil
}

// Function resolves any name to a Func; the same name gives the same Func.
func (m *module) Function(name string) (gpu.Func, error) {
	d := m.d
	if d.closed {
		return 0, errClosed
	}
	if f, ok := d.fnByName[name]; ok {
		return f, nil
	}
	d.funcs = append(d.funcs, name)
	k := fnKernel
	switch {
	case strings.HasPrefix(name, gpu.VendorConvPrefix):
		k = fnConv
	case strings.HasPrefix(name, gpu.VendorMatmulPrefix):
		k = fnMatmul
	}
	d.fkind = append(d.fkind, k)
	f := gpu.Func(len(d.funcs))
	d.fnByName[name] = f
	return f, nil
}

// fnKind is what a function is on the host's side of a launch.
type fnKind uint8

const (
	fnKernel fnKind = iota // a kernel of a module
	fnMatmul               // a vendor product (named gpu.VendorMatmulPrefix...)
	fnConv                 // a convolution (gpu.VendorConvPrefix...): several vendor calls
)

// hostCost is the host time a launch of f takes (Config.HostLaunchCost,
// HostMatmulCost, HostConvCost).
func (d *Device) hostCost(f gpu.Func) time.Duration {
	if f > 0 && int(f) <= len(d.fkind) {
		switch d.fkind[f-1] {
		case fnMatmul:
			return d.cfg.HostMatmulCost
		case fnConv:
			return d.cfg.HostConvCost
		}
	}
	return d.cfg.HostLaunchCost
}

// FuncName is the name a Func was resolved from ("" if f is unknown).
func (d *Device) FuncName(f gpu.Func) string {
	if f <= 0 || int(f) > len(d.funcs) {
		return ""
	}
	return d.funcs[f-1]
}

// Memset32 enqueues a fill of n words at p with v on s. Like a kernel it
// becomes eligible LaunchLatency after the call and after all earlier work
// in s; it then takes no time.
func (d *Device) Memset32(s gpu.Stream, p gpu.Ptr, v uint32, n int) error {
	if d.fault != nil {
		return d.fault
	}
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("%w: Memset32 of %d words", gpu.ErrInvalidLaunch, n)
	}
	if err := d.checkRange(p, int64(n)*4); err != nil {
		return fmt.Errorf("sim: Memset32: %w", err)
	}
	d.enqueue(st, op{kind: opMemset, host: d.now, ptr: p, val: v, n: n})
	return nil
}

// NewEvent makes an event. An event never recorded counts as complete but
// has no time.
func (d *Device) NewEvent() (gpu.Event, error) {
	if d.fault != nil {
		return 0, d.fault
	}
	if d.closed {
		return 0, errClosed
	}
	for len(d.freeEv) > 0 {
		i := d.freeEv[len(d.freeEv)-1]
		d.freeEv = d.freeEv[:len(d.freeEv)-1]
		if !d.events[i].live {
			d.events[i] = eventSlot{live: true, gen: d.events[i].gen + 1, done: true}
			return gpu.Event(i + 1), nil
		}
	}
	d.events = append(d.events, eventSlot{live: true, done: true})
	return gpu.Event(len(d.events)), nil
}

type eventSlot struct {
	live     bool
	recorded bool
	done     bool
	gen      uint32 // bumped by every Record, so a stale record cannot complete it
	t        float64
	seen     float64 // when the host sees it complete: t + NoticeLatency
	// byRecord: recorded by Record (a host call), not by a graph's node;
	// noticed: a Query has seen this record complete.
	byRecord, noticed bool
}

func (d *Device) event(e gpu.Event) (*eventSlot, error) {
	if d.closed {
		return nil, errClosed
	}
	if e <= 0 || int(e) > len(d.events) || !d.events[e-1].live {
		return nil, fmt.Errorf("%w: event %d (not made by this device, or destroyed)", gpu.ErrInvalidHandle, e)
	}
	return &d.events[e-1], nil
}

// DestroyEvent releases e.
func (d *Device) DestroyEvent(e gpu.Event) error {
	ev, err := d.event(e)
	if err != nil {
		return err
	}
	if ev.live {
		d.freeEv = append(d.freeEv, int(e)-1)
	}
	ev.live = false
	return nil
}

// Record places e in s; it completes when all work enqueued in s before it
// has completed (at once if s is idle).
func (d *Device) Record(e gpu.Event, s gpu.Stream) error {
	if d.fault != nil {
		return d.fault
	}
	ev, err := d.event(e)
	if err != nil {
		return err
	}
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	d.record(ev, e, st, true)
	return nil
}

// record places ev in st: by a Record call (byRecord) or a graph's node.
func (d *Device) record(ev *eventSlot, e gpu.Event, st *stream, byRecord bool) {
	ev.gen++
	ev.recorded, ev.done, ev.byRecord, ev.noticed = true, false, byRecord, false
	if st.idle() {
		d.completeEvent(ev, d.now)
		return
	}
	d.enqueue(st, op{kind: opRecord, host: d.now, ev: e, gen: ev.gen})
}

// Query reports whether the host sees e complete (NoticeLatency after it did).
func (d *Device) Query(e gpu.Event) (bool, error) {
	if d.fault != nil {
		return false, d.fault
	}
	ev, err := d.event(e)
	if err != nil {
		return false, err
	}
	done := ev.done && ev.seen <= d.now
	cost := d.cfg.HostQueryCost
	if done && ev.byRecord && !ev.noticed {
		cost += d.cfg.HostCompletionCost
	}
	if done {
		ev.noticed = true
	}
	d.hostBusy(float64(cost))
	return done, nil
}

// Decided implements gpu.HostModeler: the host spends HostDecideCost on
// each of launches decisions, the device running meanwhile.
func (d *Device) Decided(launches int) {
	if d.fault == nil && launches > 0 {
		d.hostBusy(float64(launches) * float64(d.cfg.HostDecideCost))
	}
}

// completeEvent marks ev complete at t; the host sees it NoticeLatency
// later, when notify reaches it (the next settle, without one).
func (d *Device) completeEvent(ev *eventSlot, t float64) {
	ev.done, ev.t, ev.seen = true, t, t+d.notice
	d.seenAt = append(d.seenAt, ev.seen)
}

// notify marks the completions whose notice time has come as observed.
func (d *Device) notify() {
	for i := 0; i < len(d.seenAt); {
		if d.seenAt[i] <= d.now {
			d.seenAt[i] = d.seenAt[len(d.seenAt)-1]
			d.seenAt = d.seenAt[:len(d.seenAt)-1]
			d.observed = true
			continue
		}
		i++
	}
}

// Time is the virtual time at which e completed.
func (d *Device) Time(e gpu.Event) (time.Duration, error) {
	if d.fault != nil {
		return 0, d.fault
	}
	ev, err := d.event(e)
	if err != nil {
		return 0, err
	}
	switch {
	case !ev.recorded:
		return 0, fmt.Errorf("%w: event %d was never recorded", gpu.ErrNotReady, e)
	case !ev.done || ev.seen > d.now:
		return 0, fmt.Errorf("%w: event %d has not completed", gpu.ErrNotReady, e)
	}
	return dur(ev.t), nil
}

// Close releases everything; the device cannot be used afterwards.
func (d *Device) Close() error {
	if d.closed {
		return errClosed
	}
	d.closed = true
	d.streams, d.events, d.machines, d.ctxs, d.graphs = nil, nil, nil, nil, nil
	d.mem.init(0)
	return nil
}
