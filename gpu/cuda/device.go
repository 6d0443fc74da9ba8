package cuda

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"atoll/gpu"
)

// maxContexts bounds the contexts of one Device (the primary one included).
const maxContexts = 8

// Driver constants used below (values from cuda.h).
const (
	cuStreamNonBlocking    = 0x1
	cuEventDefault         = 0x0
	cuMemHostAllocPortable = 0x01
	cuMemHostAllocDevMap   = 0x02

	launchParamEnd        = 0x00
	launchParamBufferPtr  = 0x01
	launchParamBufferSize = 0x02

	funcAttrMaxThreadsPerBlock = 0
	funcAttrSharedSizeBytes    = 1
	funcAttrNumRegs            = 4
	funcAttrMaxDynSharedBytes  = 8

	defaultDynSharedLimit = 48 << 10
)

// Device attributes (CUdevice_attribute).
const (
	attrMaxThreadsPerBlock   = 1
	attrMaxBlockDimX         = 2
	attrMaxBlockDimY         = 3
	attrMaxBlockDimZ         = 4
	attrMaxGridDimX          = 5
	attrMaxGridDimY          = 6
	attrMaxGridDimZ          = 7
	attrWarpSize             = 10
	attrMultiprocessorCount  = 16
	attrCanMapHostMemory     = 19
	attrMemoryClockRate      = 36
	attrGlobalMemoryBusWidth = 37
	attrMaxThreadsPerSM      = 39
	attrComputeCapMajor      = 75
	attrComputeCapMinor      = 76
	attrMaxSharedPerSM       = 81
	attrMaxRegistersPerSM    = 82
	attrMaxSharedOptin       = 97
	attrMaxBlocksPerSM       = 106
	attrReservedSharedPerBlk = 111
)

type ctxRec struct {
	h       uintptr // CUcontext
	green   uintptr // CUgreenCtx when the context is an SM partition
	sms     int     // SMs of a partition (NewPartition's size); 0: the whole device
	rest    bool    // the SMs a partition of sms leaves (NewPartitionRest)
	copyStr uintptr // internal stream: synchronous copies and clock base events
	capStr  uintptr // internal stream graphs are captured on (made on first use)
	base    uintptr // clock base event
	baseAt  time.Duration
	next    uintptr // re-basing event, recorded once base is >1 s old
	nextRec bool
	// nextHost is the host clock when next was seen complete within
	// hostAnchor of its record, nextSpan how long that took (its host
	// time is known to within half of it); nextHost is -1 otherwise.
	nextHost, nextSpan time.Duration
	// shift is the total of the steering steps applied at rebases: a
	// completion's time read after them is shift-prevShift later than
	// the same completion read before.
	shift time.Duration
}

type streamRec struct {
	h    uintptr
	ctx  int32
	prio int
	live bool
	ws   workspace // cuBLASLt's and the convolutions' workspaces, made by the stream's first product
	// last is the time Time answered for the event of this stream
	// recorded latest among those answered so far, lastSeq its record.
	last    time.Duration
	lastSeq uint64
}

type eventRec struct {
	native  [maxContexts]uintptr // one CUevent per context it was recorded in
	ctx     int32                // context of the last Record; -1: never recorded
	live    bool
	pending bool // recorded and not yet seen complete
	done    bool // the latest record was seen complete (Time need not query again)
	// byGraph: the latest record is a graph's event-record node, whose
	// state a query may read from the previous replay until the GPU
	// reaches it (query compares with prevAt).
	byGraph bool
	// prevAt is the completion time of the event's latest record seen
	// complete, and prevShift its context's steering total then (hasPrev:
	// known). timed: prevAt is the latest record's own (query read it for
	// the stale check), so Time answers it without asking the driver.
	prevAt, prevShift time.Duration
	hasPrev, timed    bool
	// stream and seq say where and when (in record order) the latest
	// record was made; givenAt is the time Time answered for it (given:
	// answered): see give.
	stream  gpu.Stream
	seq     uint64
	givenAt time.Duration
	given   bool
}

type moduleRec struct {
	name   string
	image  []byte // kept to load the module into further contexts
	native [maxContexts]uintptr
}

type funcRec struct {
	name       string
	mod        int
	native     [maxContexts]uintptr
	dynSmem    [maxContexts]int // dynamic shared memory limit set per context
	maxThreads int
	staticSmem int
	regs       int
	paramBytes int        // 0: unknown
	matmul     *matmulRec // a cuBLASLt product (gpu.BLAS), not a kernel
	conv       *convRec   // a convolution pass on cuBLASLt (gpu.BLAS), not a kernel
}

type allocRec struct {
	bytes int64
	ctx   int32
}

type hostChunk struct {
	host unsafe.Pointer
	n    int
}

// Device is the real GPU behind gpu.Device, through the CUDA driver API.
//
// One goroutine owns a Device and must stay on one OS thread: Open locks the
// calling goroutine to its thread (runtime.LockOSThread) and every call checks
// the thread's current CUDA context (cuCtxGetCurrent) and switches it when a
// stream of another context is used or the goroutine was not locked. Store
// and Load of HostWords are the only methods safe from other goroutines.
type Device struct {
	drv     *driver
	ordinal int
	dev     uintptr // CUdevice
	arch    int     // compute capability, e.g. 90
	info    gpu.Info
	t0      time.Time
	clockUn time.Duration // uncertainty of the host/GPU clock alignment

	maxGrid  [3]int
	maxBlock [3]int
	optin    int // max dynamic+static shared memory per block (opt-in)

	ctxs    []ctxRec
	streams []streamRec
	// spare holds the CUDA streams DestroyStream let go, per context and
	// priority, for NewStream to hand out again (see NewStream).
	spare   spareStreams
	events  []eventRec
	modules []*moduleRec
	funcs   []funcRec
	graphs  []graphRec // handle-1
	allocs  map[gpu.Ptr]allocRec
	chunks  []hostChunk
	words   atomic.Pointer[[]*uint32]
	snap    []uint32
	// pending holds, per stream, the events recorded there and not yet
	// seen complete, in record order: work in a stream completes in
	// order, so a poll queries each stream's oldest only (O(streams +
	// completions), not O(events in flight)).
	pending  map[gpu.Stream][]gpu.Event
	npending int
	steered  time.Duration // ClockSteering
	maxStep  time.Duration
	cm       *cmem
	bl       *blasState // cuBLASLt, opened by the first Matmul
	recSeq   uint64     // records made so far (eventRec.seq)
	cmBytes  []byte
	argv     []uintptr
	cacheDir string
	closed   bool
	stale    int // StaleGraphEvents
	stalls   gpu.HostStalls
}

var _ gpu.Device = (*Device)(nil)

// Open opens GPU ordinal through the CUDA driver and makes its primary
// context current on the calling goroutine's OS thread. It locks the calling
// goroutine to its OS thread (runtime.LockOSThread); Close, called from the
// same goroutine, unlocks it. Use the Device from that goroutine only.
//
// On a machine without the driver or without a GPU it returns an error
// wrapping gpu.ErrNoDevice; it never exits or panics.
func Open(ordinal int) (*Device, error) {
	drv, err := loadDriver()
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	d, err := open(drv, ordinal)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return d, nil
}

// Run locks the calling goroutine to its OS thread, opens GPU ordinal, calls
// fn and closes the device: the simplest correct way to use a Device.
func Run(ordinal int, fn func(d *Device) error) (err error) {
	d, err := Open(ordinal)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := d.Close(); err == nil {
			err = cerr
		}
	}()
	return fn(d)
}

func open(drv *driver, ordinal int) (*Device, error) {
	var count int32
	if err := check("cuDeviceGetCount", drv.call(drv.cuDeviceGetCount, uintptr(unsafe.Pointer(&count)))); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= int(count) {
		return nil, fmt.Errorf("%w: cuda: GPU %d requested, the driver sees %d GPU(s)", gpu.ErrNoDevice, ordinal, count)
	}
	var dev int32
	if err := check("cuDeviceGet", drv.call(drv.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(ordinal))); err != nil {
		return nil, err
	}
	cmBytes, err := syscall.Mmap(-1, 0, int(unsafe.Sizeof(cmem{})), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("cuda: mmap of the launch scratch area: %w", err)
	}
	d := &Device{
		drv:     drv,
		ordinal: ordinal,
		dev:     uintptr(dev),
		t0:      time.Now(),
		cmBytes: cmBytes,
		cm:      (*cmem)(unsafe.Pointer(&cmBytes[0])),
		argv:    make([]uintptr, 16),
		allocs:  make(map[gpu.Ptr]allocRec),
		pending: map[gpu.Stream][]gpu.Event{},
		streams: make([]streamRec, 1, 64), // handle 0 is never valid
		events:  make([]eventRec, 1, 256),
		funcs:   make([]funcRec, 1, 64),
	}
	d.cm.initExtra()
	empty := make([]*uint32, 1)
	d.words.Store(&empty)
	if dir, err := os.UserCacheDir(); err == nil {
		d.cacheDir = filepath.Join(dir, "atoll", "kernels")
	}
	var primary uintptr
	if err := check("cuDevicePrimaryCtxRetain", drv.call(drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&primary)), d.dev)); err != nil {
		_ = syscall.Munmap(cmBytes)
		return nil, err
	}
	d.ctxs = append(d.ctxs, ctxRec{h: primary})
	if err := check("cuCtxSetCurrent", drv.call(drv.cuCtxSetCurrent, primary)); err != nil {
		d.release()
		return nil, err
	}
	if err := d.describe(); err != nil {
		d.release()
		return nil, err
	}
	if err := d.initContext(0); err != nil {
		d.release()
		return nil, err
	}
	return d, nil
}

// attr reads one device attribute.
func (d *Device) attr(a int) (int, error) {
	var v int32
	if err := check("cuDeviceGetAttribute", d.drv.call(d.drv.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), d.dev)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// describe fills Info from the driver's attributes and the built-in specs.
func (d *Device) describe() error {
	var name [256]byte
	if err := check("cuDeviceGetName", d.drv.call(d.drv.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), d.dev)); err != nil {
		return err
	}
	n := string(name[:max(bytes.IndexByte(name[:], 0), 0)])
	var ver int32
	if err := check("cuDriverGetVersion", d.drv.call(d.drv.cuDriverGetVersion, uintptr(unsafe.Pointer(&ver)))); err != nil {
		return err
	}
	get := map[int]*int{}
	var (
		maxTPB, warp, sms, canMap, memClock, busWidth, tpsm, ccMaj, ccMin int
		smemSM, regsSM, optin, blocksSM, reserved                         int
	)
	get[attrMaxThreadsPerBlock] = &maxTPB
	get[attrMaxBlockDimX] = &d.maxBlock[0]
	get[attrMaxBlockDimY] = &d.maxBlock[1]
	get[attrMaxBlockDimZ] = &d.maxBlock[2]
	get[attrMaxGridDimX] = &d.maxGrid[0]
	get[attrMaxGridDimY] = &d.maxGrid[1]
	get[attrMaxGridDimZ] = &d.maxGrid[2]
	get[attrWarpSize] = &warp
	get[attrMultiprocessorCount] = &sms
	get[attrCanMapHostMemory] = &canMap
	get[attrMaxThreadsPerSM] = &tpsm
	get[attrComputeCapMajor] = &ccMaj
	get[attrComputeCapMinor] = &ccMin
	get[attrMaxSharedPerSM] = &smemSM
	get[attrMaxRegistersPerSM] = &regsSM
	get[attrMaxSharedOptin] = &optin
	get[attrMaxBlocksPerSM] = &blocksSM
	get[attrReservedSharedPerBlk] = &reserved
	for a, p := range get {
		v, err := d.attr(a)
		if err != nil {
			return err
		}
		*p = v
	}
	// Deprecated on newer drivers; only used to estimate an unknown GPU's
	// bandwidth, so failures are ignored.
	memClock, _ = d.attr(attrMemoryClockRate)
	busWidth, _ = d.attr(attrGlobalMemoryBusWidth)
	if canMap == 0 {
		return fmt.Errorf("%w: cuda: %s cannot map host memory, which preemption flags need", gpu.ErrNoDevice, n)
	}
	d.arch = ccMaj*10 + ccMin
	d.optin = optin

	spec, err := gpu.LookupSpec(n)
	if err != nil {
		spec = gpu.Spec{
			Name:                n,
			MaxRegistersPerThrd: 255,
			RegisterAllocUnit:   256,
			SharedMemAlloc:      128,
			LaunchLatency:       4 * time.Microsecond,
		}
		if memClock > 0 && busWidth > 0 {
			spec.DRAMBandwidth = float64(memClock) * 1e3 * 2 * float64(busWidth) / 8
		}
	}
	spec.SMs = sms
	spec.MaxThreadsPerSM = tpsm
	spec.MaxBlocksPerSM = blocksSM
	spec.RegistersPerSM = regsSM
	spec.SharedMemPerSM = smemSM
	spec.SharedMemReserved = reserved
	spec.MaxThreadsPerBlock = maxTPB
	spec.MaxSharedMemPerBlock = optin
	spec.WarpSize = warp
	// Green-context SM granularity (cuDevSmResourceSplitByCount): 8 SMs
	// from sm_90, 2 before.
	spec.PartitionStep = 2
	if ccMaj >= 9 {
		spec.PartitionStep = 8
	}

	var least, greatest int32
	if err := check("cuCtxGetStreamPriorityRange", d.drv.call(d.drv.cuCtxGetStreamPriorityRange,
		uintptr(unsafe.Pointer(&least)), uintptr(unsafe.Pointer(&greatest)))); err != nil {
		return err
	}
	d.info = gpu.Info{
		Backend:    "cuda",
		Name:       n,
		Driver:     fmt.Sprintf("CUDA driver API %d.%d (sm_%d)", ver/1000, (ver%1000)/10, d.arch),
		Spec:       spec,
		Priorities: gpu.Priorities{Least: int(least), Greatest: int(greatest)},
	}
	if l, err := loadBLAS(); err == nil {
		d.info.BLAS = l.String()
	}
	return nil
}

// fast calls a driver entry point from the hot path without allocating. Its
// arguments must be integers or addresses outside the Go heap (d.cm).
func (d *Device) fast(fn uintptr, args ...uintptr) Result {
	n := copy(d.argv, args)
	return d.drv.call(fn, d.argv[:n]...)
}

// use makes context c current on this OS thread if it is not already.
func (d *Device) use(c int32) error {
	want := d.ctxs[c].h
	if r := d.fast(d.drv.cuCtxGetCurrent, uintptr(unsafe.Pointer(&d.cm.cur))); r != resultSuccess {
		return check("cuCtxGetCurrent", r)
	}
	if d.cm.cur == want {
		return nil
	}
	return check("cuCtxSetCurrent", d.fast(d.drv.cuCtxSetCurrent, want))
}

// alignTries bounds the recordings initContext makes to align a context's
// clock base with the host's.
const alignTries = 50

// initContext creates context c's internal stream and aligns its clock base.
func (d *Device) initContext(c int32) error {
	if err := d.use(c); err != nil {
		return err
	}
	cr := &d.ctxs[c]
	var s, e uintptr
	if err := check("cuStreamCreateWithPriority", d.drv.call(d.drv.cuStreamCreateWithPriority,
		uintptr(unsafe.Pointer(&s)), cuStreamNonBlocking, uintptr(d.info.Priorities.Greatest))); err != nil {
		return err
	}
	cr.copyStr = s
	if err := check("cuEventCreate", d.drv.call(d.drv.cuEventCreate, uintptr(unsafe.Pointer(&e)), cuEventDefault)); err != nil {
		return err
	}
	cr.base = e
	if err := check("cuEventCreate", d.drv.call(d.drv.cuEventCreate, uintptr(unsafe.Pointer(&e)), cuEventDefault)); err != nil {
		return err
	}
	cr.next = e
	// Align: record an event on an idle stream and spin until it
	// completes. The GPU stamped it between the two host readings; take the
	// midpoint. Retry while the window is wide (first calls are slow, a
	// busy host stalls), keeping the narrowest window: the candidate is
	// always recorded into the event that does not hold the best so far.
	best := time.Duration(-1)
	for try := 0; try < alignTries; try++ {
		cand := cr.next
		t1 := d.Now()
		if err := check("cuEventRecord", d.fast(d.drv.cuEventRecord, cand, cr.copyStr)); err != nil {
			return err
		}
		for {
			r := d.fast(d.drv.cuEventQuery, cand)
			if r == resultSuccess {
				break
			}
			if r != resultNotReady {
				return check("cuEventQuery", r)
			}
		}
		t2 := d.Now()
		if un := (t2 - t1) / 2; best < 0 || un < best {
			best = un
			cr.base, cr.next = cand, cr.base
			cr.baseAt = t1 + un
		}
		if best < 5*time.Microsecond {
			break
		}
	}
	if c == 0 {
		d.clockUn = best
	} else {
		d.clockUn = max(d.clockUn, best)
	}
	return nil
}

// Info describes the device.
func (d *Device) Info() gpu.Info { return d.info }

// Arch is the compute capability as major*10+minor (90 on Hopper).
func (d *Device) Arch() int { return d.arch }

// ClockUncertainty bounds the error of aligning event timestamps with the
// host clock at Open (half the window in which the base event completed).
func (d *Device) ClockUncertainty() time.Duration { return d.clockUn }

// ContextAPI names the driver entry point NewContext uses ("cuCtxCreate_v2"
// or "cuCtxCreate_v4"), or "" if the driver has neither.
func (d *Device) ContextAPI() string { return d.drv.ctxCreateName }

// SetCacheDir sets where compiled CUDA C modules are cached ("" disables the
// cache). The default is os.UserCacheDir()/atoll/kernels. Call it before
// anything compiles: Compile reads it from other goroutines.
func (d *Device) SetCacheDir(dir string) { d.cacheDir = dir }

// Now is host monotonic time since Open.
func (d *Device) Now() time.Duration { return time.Since(d.t0) }

func (d *Device) live() error {
	if d.closed {
		return fmt.Errorf("%w: cuda: device is closed", gpu.ErrInvalidHandle)
	}
	return nil
}

// NewContext makes a further context on the device (the time-slicing
// baseline). It uses cuCtxCreate_v2 when the driver exports it, else
// cuCtxCreate_v4 with no parameters; the primary context stays current.
func (d *Device) NewContext() (gpu.Context, error) {
	if err := d.live(); err != nil {
		return 0, err
	}
	if len(d.ctxs) >= maxContexts {
		return 0, fmt.Errorf("%w: cuda: at most %d contexts per device", gpu.ErrDriver, maxContexts)
	}
	var h uintptr
	var r Result
	switch d.drv.ctxCreateName {
	case "cuCtxCreate_v2":
		r = d.drv.call(d.drv.cuCtxCreateV2, uintptr(unsafe.Pointer(&h)), 0, d.dev)
	case "cuCtxCreate_v4":
		r = d.drv.call(d.drv.cuCtxCreateV4, uintptr(unsafe.Pointer(&h)), 0, 0, d.dev)
	default:
		return 0, fmt.Errorf("%w: cuda: the driver exports neither cuCtxCreate_v2 nor cuCtxCreate_v4", gpu.ErrDriver)
	}
	if err := check(d.drv.ctxCreateName, r); err != nil {
		return 0, err
	}
	c := int32(len(d.ctxs))
	d.ctxs = append(d.ctxs, ctxRec{h: h})
	if err := d.initContext(c); err != nil {
		return 0, err
	}
	if err := d.use(0); err != nil {
		return 0, err
	}
	return gpu.Context(c), nil
}

func (d *Device) context(c gpu.Context) (int32, error) {
	if c < 0 || int(c) >= len(d.ctxs) {
		return 0, fmt.Errorf("%w: cuda: context %d", gpu.ErrInvalidHandle, c)
	}
	return int32(c), nil
}

// NewStream creates a non-blocking stream (it does not synchronize with the
// legacy default stream) with the given priority in the given context.
//
// It hands out a CUDA stream an earlier DestroyStream let go where one of
// that context and priority is spare: once work has been launched on 16
// or more streams of a context (or 16 launches have moved between two
// streams, TestGPUStreamChurn), every kernel there runs slower for the
// rest of the process — cuBLASLt products 7 % and atoll's own kernels 3–4 %
// on an H200, whichever streams they use. Each run of the scheduler makes
// its own streams; with new CUDA streams each time, a process that runs
// many (atoll matrix) served HP 5–8 % slower than a fresh one
// (results/context-h200), with them reused as fast (docs/cuda.md).
func (d *Device) NewStream(opt gpu.StreamOptions) (gpu.Stream, error) {
	if err := d.live(); err != nil {
		return 0, err
	}
	c, err := d.context(opt.Context)
	if err != nil {
		return 0, err
	}
	pr := d.info.Priorities
	if opt.Priority > pr.Least || opt.Priority < pr.Greatest {
		return 0, &Error{Call: "cuStreamCreateWithPriority", Code: resultInvalidValue,
			Hint: fmt.Sprintf("priority %d outside the device's range [%d (greatest), %d (least)]: use Info().Priorities.Clamp", opt.Priority, pr.Greatest, pr.Least)}
	}
	if err := d.use(c); err != nil {
		return 0, err
	}
	if st, ok := d.spare.take(c, opt.Priority); ok {
		d.streams = append(d.streams, st)
		return gpu.Stream(len(d.streams) - 1), nil
	}
	var h uintptr
	if err := check("cuStreamCreateWithPriority", d.drv.call(d.drv.cuStreamCreateWithPriority,
		uintptr(unsafe.Pointer(&h)), cuStreamNonBlocking, uintptr(opt.Priority))); err != nil {
		return 0, err
	}
	st := streamRec{h: h, ctx: c, prio: opt.Priority, live: true}
	if d.bl != nil {
		// Products already run on cuBLASLt: give the stream its workspace
		// now rather than at its first product, on the launch path.
		if _, err := d.blasWS(&st.ws.blas); err != nil {
			_ = d.drv.call(d.drv.cuStreamDestroy, h)
			return 0, err
		}
	}
	d.streams = append(d.streams, st)
	return gpu.Stream(len(d.streams) - 1), nil
}

func (d *Device) stream(s gpu.Stream) (*streamRec, error) {
	if s <= 0 || int(s) >= len(d.streams) || !d.streams[s].live {
		return nil, fmt.Errorf("%w: cuda: stream %d", gpu.ErrInvalidHandle, s)
	}
	return &d.streams[s], nil
}

// DestroyStream destroys s: its handle is no longer valid. Work already in
// it completes first; the CUDA stream itself, with its workspaces, is kept
// for a later NewStream of the same context and priority (see NewStream).
func (d *Device) DestroyStream(s gpu.Stream) error {
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	if err := d.use(st.ctx); err != nil {
		return err
	}
	st.live = false
	if err := check("cuStreamSynchronize", d.fast(d.drv.cuStreamSynchronize, st.h)); err != nil {
		// A stream that cannot finish its work is not handed out again.
		_ = d.fast(d.drv.cuStreamDestroy, st.h)
		_ = d.freeWorkspace(&st.ws)
		return err
	}
	d.spare.put(*st)
	return nil
}

// spareStreams are CUDA streams let go by DestroyStream, per context and
// priority, for NewStream to hand out again.
type spareStreams map[spareKey][]streamRec

// spareKey is the context and priority of a spare stream.
type spareKey struct {
	ctx  int32
	prio int
}

// put keeps st (its CUDA stream and workspaces) as a spare.
func (sp *spareStreams) put(st streamRec) {
	if *sp == nil {
		*sp = spareStreams{}
	}
	key := spareKey{st.ctx, st.prio}
	(*sp)[key] = append((*sp)[key], st)
}

// take hands out the spare stream of context c and priority prio kept
// last, live, with its event-time ordering reset; ok is false where none
// is spare.
func (sp spareStreams) take(c int32, prio int) (st streamRec, ok bool) {
	key := spareKey{c, prio}
	n := len(sp[key])
	if n == 0 {
		return streamRec{}, false
	}
	st = sp[key][n-1]
	sp[key] = sp[key][:n-1]
	st.live, st.last, st.lastSeq = true, 0, 0
	return st, true
}

// destroySpare destroys the spare CUDA streams and frees their workspaces.
func (d *Device) destroySpare() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for key, sts := range d.spare {
		if err := d.use(key.ctx); err != nil {
			keep(err)
			continue
		}
		for i := range sts {
			keep(check("cuStreamDestroy_v2", d.fast(d.drv.cuStreamDestroy, sts[i].h)))
			keep(d.freeWorkspace(&sts[i].ws))
		}
	}
	d.spare = nil
	return first
}

// Synchronize waits until all work in all contexts has completed.
func (d *Device) Synchronize() error {
	if err := d.live(); err != nil {
		return err
	}
	for c := range d.ctxs {
		if err := d.use(int32(c)); err != nil {
			return err
		}
		if err := check("cuCtxSynchronize", d.fast(d.drv.cuCtxSynchronize)); err != nil {
			return err
		}
	}
	return d.use(0)
}

// Close waits for outstanding work, releases everything the device made and
// unlocks the OS thread Open locked. Stop using HostWords (from any
// goroutine) before Close: their memory is freed.
func (d *Device) Close() error {
	if d.closed {
		return nil
	}
	err := d.release()
	runtime.UnlockOSThread()
	return err
}

func (d *Device) release() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for c := range d.ctxs {
		if d.use(int32(c)) == nil {
			keep(check("cuCtxSynchronize", d.fast(d.drv.cuCtxSynchronize)))
		}
	}
	for i := range d.graphs {
		if d.graphs[i].live {
			keep(d.DestroyGraph(gpu.Graph(i + 1)))
		}
	}
	for i := range d.events {
		if d.events[i].live {
			keep(d.DestroyEvent(gpu.Event(i)))
		}
	}
	for i := range d.streams {
		if d.streams[i].live {
			keep(d.DestroyStream(gpu.Stream(i)))
		}
	}
	keep(d.destroySpare())
	if d.use(0) == nil {
		d.closeBLAS()
	}
	for _, m := range d.modules {
		for c, h := range m.native {
			if h != 0 && d.use(int32(c)) == nil {
				keep(check("cuModuleUnload", d.fast(d.drv.cuModuleUnload, h)))
			}
		}
	}
	for p, a := range d.allocs {
		if d.use(a.ctx) == nil {
			keep(check("cuMemFree_v2", d.fast(d.drv.cuMemFree, uintptr(p))))
		}
	}
	empty := make([]*uint32, 1)
	d.words.Store(&empty)
	if len(d.ctxs) > 0 && d.use(0) == nil {
		for _, ch := range d.chunks {
			keep(check("cuMemFreeHost", d.drv.call(d.drv.cuMemFreeHost, uintptr(ch.host))))
		}
	}
	for c := range d.ctxs {
		cr := &d.ctxs[c]
		if d.use(int32(c)) == nil {
			for _, h := range []uintptr{cr.base, cr.next} {
				if h != 0 {
					keep(check("cuEventDestroy_v2", d.fast(d.drv.cuEventDestroy, h)))
				}
			}
			for _, h := range []uintptr{cr.copyStr, cr.capStr} {
				if h != 0 {
					keep(check("cuStreamDestroy_v2", d.fast(d.drv.cuStreamDestroy, h)))
				}
			}
		}
	}
	for c := len(d.ctxs) - 1; c >= 1; c-- {
		if g := d.ctxs[c].green; g != 0 {
			keep(check("cuGreenCtxDestroy", d.fast(d.drv.part.cuGreenCtxDestroy, g)))
			continue
		}
		keep(check("cuCtxDestroy_v2", d.fast(d.drv.cuCtxDestroy, d.ctxs[c].h)))
	}
	if len(d.ctxs) > 0 {
		d.fast(d.drv.cuCtxSetCurrent, 0)
		keep(check("cuDevicePrimaryCtxRelease_v2", d.fast(d.drv.cuDevicePrimaryCtxRelease, d.dev)))
	}
	d.closed = true
	d.cm = nil
	keep(syscall.Munmap(d.cmBytes))
	return first
}
