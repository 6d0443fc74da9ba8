package kernels

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"

	"atoll/gpu"
)

// Library compiles and launches the kernels of ops on one device. Modules
// are compiled on first use (NVRTC, through Device.LoadModule) — one module
// per kernel instance, one per padded pair — and cached with their
// functions for the Library's life.
//
// A Library belongs to the goroutine that owns its Device (gpu.Device is not
// safe for concurrent use, and neither is this).
type Library struct {
	dev   gpu.Device
	info  gpu.Info
	mods  map[string]gpu.Module
	funcs map[string]gpu.Func
	regs  map[string]int // registers per thread the driver reports, by kernel instance
	epoch int32          // launch serial number, stamped into each Ctl
	// Compiles counts modules loaded so far.
	Compiles int
	// AsyncPairs makes LaunchPadded compile a pair kernel it has not got
	// off the owner's goroutine (on devices that are gpu.Compilers) and
	// answer ErrCompiling until it is ready, instead of blocking for the
	// compile. Schedulers set it: a first padded launch must not stall the
	// latency-critical work for a compile (hundreds of ms with NVRTC).
	AsyncPairs bool
	// NoBLAS keeps every op on the library's own kernels. Otherwise a
	// whole Plain launch of a GEMM or a 1x1 convolution runs on the
	// device's BLAS (gpu.BLAS: cuBLASLt on a GPU) where the device has one
	// that takes the product; reset, resumable, padded and sliced launches
	// always run the library's own kernels.
	NoBLAS  bool
	blasErr error // the first refusal of a product by the device's BLAS

	amu    sync.Mutex
	async  map[string]*asyncModule // pair compiles started in the background, by module key
	frozen bool                    // FreezePairs: start no more background compiles
	sem    chan struct{}           // bounds the background compiles running at once

	// The launch path's caches (Launch allocates only the launch itself):
	// each op's spec, launch names and functions per form, and a scratch
	// slice for the tensors' pointers.
	specs map[Op]*kentry
	ptrs  []gpu.Ptr
}

// kentry is what Launch needs of one op, kept across launches.
type kentry struct {
	k     *kspec
	names [gpu.Padded + 1]string
	funcs [gpu.Padded + 1]gpu.Func
	args  int // bytes of the last launch's arguments (to size the next)
	// blas says whether whole Plain launches run on the device's BLAS;
	// blasFunc is the product's Func there and blasAt where its operands
	// are among the op's tensors (matmulOf).
	blas     blasUse
	blasFunc gpu.Func
	blasAt   [5]int
	blasWhy  error // the device's refusal
}

// entry is op's cached kspec (built on first use). Ops of a type that is
// not comparable (none of the library's today: TestOpsAreCacheable) are
// not cached.
func (l *Library) entry(op Op) (*kentry, error) {
	cacheable := op != nil && reflect.TypeOf(op).Comparable()
	if cacheable {
		if e, ok := l.specs[op]; ok {
			return e, nil
		}
	}
	k, err := spec(op)
	if err != nil {
		return nil, err
	}
	e := &kentry{k: k}
	for _, f := range []gpu.Form{gpu.Plain, gpu.Reset, gpu.Resumable, gpu.Padded} {
		e.names[f] = k.name + "/" + f.String()
	}
	if cacheable {
		if l.specs == nil {
			l.specs = map[Op]*kentry{}
		}
		l.specs[op] = e
	}
	return e, nil
}

// asyncModule is one background compile: src is set (or err) once done is
// closed.
type asyncModule struct {
	done      chan struct{}
	src       gpu.ModuleSource
	err       error
	cancelled bool // frozen before it started: never compiled
}

// ErrCompiling says a launch needs a module that is still being compiled in
// the background (Library.AsyncPairs); ask again later.
var ErrCompiling = errors.New("kernels: module still compiling")

// New returns a Library for dev. Nothing is compiled until needed.
func New(dev gpu.Device) *Library {
	return &Library{dev: dev, info: dev.Info(), mods: map[string]gpu.Module{}, funcs: map[string]gpu.Func{}, regs: map[string]int{}}
}

// Device is the library's device.
func (l *Library) Device() gpu.Device { return l.dev }

func (l *Library) module(key, src string) (gpu.Module, error) {
	return l.load(key, gpu.ModuleSource{Name: key, CUDA: src})
}

// load loads the module key from ms unless it is loaded already.
func (l *Library) load(key string, ms gpu.ModuleSource) (gpu.Module, error) {
	if m, ok := l.mods[key]; ok {
		return m, nil
	}
	m, err := l.dev.LoadModule(ms)
	if err != nil {
		return nil, fmt.Errorf("kernels: compiling module %s: %w", key, err)
	}
	l.mods[key] = m
	l.Compiles++
	return m, nil
}

// function returns the cached function name, compiling key's module from
// src() on a miss. src is a thunk: building a module's source costs tens of
// microseconds, and this is on the launch path.
func (l *Library) function(key string, src func() string, name string) (gpu.Func, error) {
	if f, ok := l.funcs[name]; ok {
		return f, nil
	}
	m, err := l.module(key, src())
	if err != nil {
		return 0, err
	}
	return l.resolve(key, m, name)
}

// resolve looks name up in module key and caches it.
func (l *Library) resolve(key string, m gpu.Module, name string) (gpu.Func, error) {
	f, err := m.Function(name)
	if err != nil {
		return 0, fmt.Errorf("kernels: module %s has no function %s: %w", key, name, err)
	}
	l.funcs[name] = f
	return f, nil
}

func formSuffix(form gpu.Form) (string, error) {
	switch form {
	case gpu.Plain:
		return "plain", nil
	case gpu.Reset:
		return "reset", nil
	case gpu.Resumable:
		return "resumable", nil
	}
	return "", fmt.Errorf("%w: form %s here (padded launches are made with LaunchPadded)", ErrUnsupported, form)
}

// Func returns the compiled function of op in a Plain, Reset or Resumable
// form, compiling its module on first use.
//
// For the Plain form it also settles, once, whether the op's whole Plain
// launches go to the device's BLAS (and makes the product's plan there),
// so that a first launch does not pay for it: binding an instance calls
// Func for every form the scheduler may launch, before the run.
func (l *Library) Func(op Op, form gpu.Form) (gpu.Func, error) {
	e, err := l.entry(op)
	if err != nil {
		return 0, err
	}
	if form == gpu.Plain {
		if _, err := l.resolveBLAS(e, op); err != nil {
			return 0, err
		}
	}
	return l.kfunc(e.k, form)
}

// funcAttributer is implemented by devices that report a function's
// resources (gpu/cuda does).
type funcAttributer interface {
	FuncAttributes(gpu.Func) (registers, staticSharedMem, maxThreadsPerBlock int, err error)
}

func (l *Library) kfunc(k *kspec, form gpu.Form) (gpu.Func, error) {
	suf, err := formSuffix(form)
	if err != nil {
		return 0, err
	}
	f, err := l.function(k.name, func() string { return moduleSource(k) }, formFunc(k.name, suf))
	if err != nil {
		return 0, err
	}
	if _, known := l.regs[k.name]; known {
		return f, nil
	}
	if fa, ok := l.dev.(funcAttributer); ok && form == gpu.Resumable {
		if regs, _, _, err := fa.FuncAttributes(f); err == nil && regs > 0 {
			l.regs[k.name] = regs
		}
	}
	return f, nil
}

// occupancyRegs is the registers per thread used for occupancy: the
// driver's figure for the resumable function once compiled, else the
// Geometry estimate.
func (l *Library) occupancyRegs(k *kspec) {
	if r, ok := l.regs[k.name]; ok {
		k.regs = r
	}
}

// Workers is the default Resumable worker count of op on this device:
// min(logical blocks, SMs x blocks resident per SM).
func (l *Library) Workers(op Op) (int, error) {
	k, err := spec(op)
	if err != nil {
		return 0, err
	}
	if _, err := l.kfunc(k, gpu.Resumable); err != nil {
		return 0, err
	}
	l.occupancyRegs(k)
	return workers(l.info.Spec, k)
}

func capacity(s gpu.Spec, k *kspec) (int, error) {
	per, _, err := s.Occupancy(k.threads, k.regs, k.smem)
	if err != nil {
		return 0, fmt.Errorf("kernels: %s: %w", k.name, err)
	}
	return per * max(s.SMs, 1), nil
}

func workers(s gpu.Spec, k *kspec) (int, error) {
	c, err := capacity(s, k)
	if err != nil {
		return 0, err
	}
	return min(k.logical(), c), nil
}

func cost(op Op) gpu.Cost { return gpu.Cost{FLOPs: op.FLOPs(), Bytes: op.Bytes()} }

// Launch returns a fully populated launch of op in form (Plain, Reset or
// Resumable) over bufs, with ctl's preemption state. It compiles the
// kernel's module on first use. Args are Ctl then the body's parameter
// struct (see CtlBytes and docs/kernels.md).
//
// Plain and Reset launch the op's logical grid (Grid = Geometry().Grid,
// shifted by ctl.Offset); Reset needs ctl.Flag. Resumable launches
// ctl.Workers (default Workers(op)) persistent blocks over Logical logical
// blocks and needs Flag, Counter (zeroed before the first launch) and Done.
func (l *Library) Launch(op Op, form gpu.Form, bufs Buffers, ctl Control) (*gpu.Launch, error) {
	e, err := l.entry(op)
	if err != nil {
		return nil, err
	}
	k := e.k
	if err := bufs.check(k); err != nil {
		return nil, err
	}
	if k.split() && (form == gpu.Plain || form == gpu.Reset) && (ctl.Offset != 0 || (ctl.Blocks > 0 && ctl.Blocks < k.logical())) {
		return nil, fmt.Errorf("%w: %s (%s) is split-K and runs whole: no sliced launch (Control.Offset, Blocks)", ErrUnsupported, k.name, op.Shape())
	}
	switch form {
	case gpu.Plain:
		if ctl.Offset < 0 || ctl.Offset >= k.logical() {
			return nil, fmt.Errorf("%w: offset %d outside [0, %d)", ErrShape, ctl.Offset, k.logical())
		}
	case gpu.Reset:
		if !ctl.Flag.Valid() {
			return nil, fmt.Errorf("%w: a reset launch of %s needs a flag (Control.Flag)", ErrUnsupported, k.name)
		}
		if ctl.Offset < 0 || ctl.Offset >= k.logical() {
			return nil, fmt.Errorf("%w: offset %d outside [0, %d)", ErrShape, ctl.Offset, k.logical())
		}
	case gpu.Resumable:
		if !ctl.Flag.Valid() || ctl.Counter == 0 || !ctl.Done.Valid() {
			return nil, fmt.Errorf("%w: a resumable launch of %s needs Control.Flag, Counter and Done", ErrUnsupported, k.name)
		}
	}
	if form == gpu.Plain && ctl.Offset == 0 && (ctl.Blocks <= 0 || ctl.Blocks >= k.logical()) {
		if ln, ok, err := l.launchBLAS(e, op, bufs); ok || err != nil {
			return ln, err
		}
	}
	f := e.funcs[form]
	if f == 0 {
		if f, err = l.kfunc(k, form); err != nil {
			return nil, err
		}
		e.funcs[form] = f
	}
	ln := &gpu.Launch{
		Name:      e.names[form],
		Func:      f,
		Grid:      k.grid,
		Block:     gpu.D1(k.threads),
		SharedMem: k.smem,
		Registers: k.regs,
		Cost:      cost(op),
		Form:      form,
		Flag:      ctl.Flag,
	}
	if form == gpu.Plain || form == gpu.Reset {
		// A slice [Offset, Offset+Blocks) runs as a 1-D grid.
		n := k.logical() - ctl.Offset
		if ctl.Blocks > 0 {
			n = min(n, ctl.Blocks)
		}
		if n != k.logical() {
			ln.Grid = gpu.D1(n)
		}
	}
	switch form {
	case gpu.Reset:
		ln.Counter = ctl.Counter
	case gpu.Resumable:
		w := ctl.Workers
		if w <= 0 {
			l.occupancyRegs(k)
			if w, err = workers(l.info.Spec, k); err != nil {
				return nil, err
			}
			ln.Registers = k.regs
		}
		if ctl.Chunk <= 0 {
			ctl.Chunk = k.chunk
		}
		ln.Grid = gpu.D1(min(w, ceilDiv(k.logical(), ctl.Chunk)))
		ln.Counter, ln.Done, ln.Logical = ctl.Counter, ctl.Done, k.logical()
		ctl.Offset = 0
	}
	l.epoch++
	ln.Args.Grow(max(e.args, 128))
	packCtl(&ln.Args, ctl, k.logical(), l.epoch)
	l.ptrs = bufs.appendPtrs(l.ptrs[:0])
	k.pack(&ln.Args, l.ptrs)
	var progress gpu.Ptr
	if form == gpu.Resumable {
		progress = ctl.Counter
	}
	packRunTail(&ln.Args, k, progress, l.epoch)
	e.args = ln.Args.Len()
	return ln, nil
}

// functionAsync is function for a caller that must not block on a compile:
// on a gpu.Compiler device a missing module is compiled on another
// goroutine and ErrCompiling returned until it can be loaded (loading a
// cubin is quick). Other devices compile in place, as function does.
func (l *Library) functionAsync(key string, src func() string, name string) (gpu.Func, error) {
	if f, ok := l.funcs[name]; ok {
		return f, nil
	}
	c, ok := l.dev.(gpu.Compiler)
	if !ok {
		return l.function(key, src, name)
	}
	l.amu.Lock()
	a := l.async[key]
	if a == nil && l.frozen {
		l.amu.Unlock()
		return 0, fmt.Errorf("%w: %s (pair compiles frozen)", ErrCompiling, key)
	}
	if a == nil {
		if l.async == nil {
			l.async = map[string]*asyncModule{}
		}
		if l.sem == nil {
			// Leave a core to the scheduler's own goroutine.
			l.sem = make(chan struct{}, max(1, runtime.NumCPU()-2))
		}
		a = &asyncModule{done: make(chan struct{})}
		l.async[key] = a
		ms := gpu.ModuleSource{Name: key, CUDA: src()}
		go func() {
			l.sem <- struct{}{}
			l.amu.Lock()
			frozen := l.frozen
			l.amu.Unlock()
			if frozen {
				// Frozen before it started: never compiled, asked again
				// after a thaw.
				a.err, a.cancelled = fmt.Errorf("%w: cancelled by FreezePairs", ErrCompiling), true
			} else {
				a.src, a.err = c.Compile(ms)
			}
			<-l.sem
			close(a.done)
		}()
	}
	l.amu.Unlock()
	select {
	case <-a.done:
	default:
		return 0, fmt.Errorf("%w: %s", ErrCompiling, key)
	}
	if a.err != nil {
		return 0, fmt.Errorf("kernels: compiling module %s: %w", key, a.err)
	}
	m, err := l.load(key, a.src)
	if err != nil {
		return 0, err
	}
	return l.resolve(key, m, name)
}

// Precompile compiles the modules of ops not loaded yet, in parallel on
// devices that are gpu.Compilers (NVRTC on one core per module), and loads
// them: a model of hundreds of layers compiles in seconds instead of
// minutes on a cold cache. Other devices load as Func would.
func (l *Library) Precompile(ops []Op) error {
	var jobs []gpu.ModuleSource
	seen := map[string]bool{}
	for _, op := range ops {
		k, err := spec(op)
		if err != nil {
			return err
		}
		if _, ok := l.mods[k.name]; ok || seen[k.name] {
			continue
		}
		seen[k.name] = true
		jobs = append(jobs, gpu.ModuleSource{Name: k.name, CUDA: moduleSource(k)})
	}
	return l.compileAll(jobs)
}

// PrecompilePairs compiles, as Precompile does, the modules of the padded
// launches of the given (HP, BE) pairs not loaded yet (LaunchPadded's).
func (l *Library) PrecompilePairs(pairs [][2]Op) error {
	var jobs []gpu.ModuleSource
	seen := map[string]bool{}
	for _, p := range pairs {
		hk, err := spec(p[0])
		if err != nil {
			return err
		}
		bk, err := spec(p[1])
		if err != nil {
			return err
		}
		name := PaddedFunc(hk.name, bk.name)
		if _, ok := l.mods[name]; ok || seen[name] {
			continue
		}
		seen[name] = true
		jobs = append(jobs, gpu.ModuleSource{Name: name, CUDA: pairSource(hk, bk)})
	}
	return l.compileAll(jobs)
}

// compileAll compiles jobs in parallel where the device is a gpu.Compiler
// (leaving a core free), then loads each under its name.
func (l *Library) compileAll(jobs []gpu.ModuleSource) error {
	errs := make([]error, len(jobs))
	if c, ok := l.dev.(gpu.Compiler); ok && len(jobs) > 1 {
		sem := make(chan struct{}, max(1, runtime.NumCPU()-1))
		var wg sync.WaitGroup
		for i := range jobs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				ms, err := c.Compile(jobs[i])
				if err == nil {
					jobs[i] = ms
				}
				errs[i] = err
			}()
		}
		wg.Wait()
	}
	for i, j := range jobs {
		if errs[i] != nil {
			return fmt.Errorf("kernels: compiling module %s: %w", j.Name, errs[i])
		}
		if _, err := l.load(j.Name, j); err != nil {
			return err
		}
	}
	return nil
}

// FreezePairs(true) makes LaunchPadded start no more background compiles
// (false lets it start them again): a
// pair not compiled by now answers ErrCompiling for good, so the set of
// padded pairs a scheduler can use stops changing (and no compile competes
// with it for the CPU). Benchmarks freeze after their warm-up.
func (l *Library) FreezePairs(on bool) {
	l.amu.Lock()
	defer l.amu.Unlock()
	l.frozen = on
	if on {
		return
	}
	for k, a := range l.async {
		select {
		case <-a.done:
			if a.cancelled {
				delete(l.async, k)
			}
		default:
		}
	}
}

// WaitPairs waits until every background pair compile started so far has
// finished, or ctx is done; it returns how many have finished and how many
// have not.
func (l *Library) WaitPairs(ctx context.Context) (done, pending int) {
	l.amu.Lock()
	as := make([]*asyncModule, 0, len(l.async))
	for _, a := range l.async {
		as = append(as, a)
	}
	l.amu.Unlock()
	for _, a := range as {
		select {
		case <-a.done:
			done++
		case <-ctx.Done():
			pending++
		}
	}
	return done, pending
}

// LaunchPadded returns one padded launch (REEF's dynamic kernel padding):
// the HP op's logical blocks [hpCtl.Offset, hpCtl.Offset+hpBlocks) run with
// plain indexing in the launch's first hpBlocks blocks (hpBlocks <= 0: all
// of the HP grid from the offset on), and beCtl.Workers further blocks run
// the BE op as resumable workers (Flag, Counter, Done as for Resumable;
// Workers 0: the BE capacity of the device less the share the HP blocks
// take, at least 1). The pair kernel is compiled on first use and cached.
//
// The returned launch has Form Padded, Func the pair kernel, Grid the HP
// blocks, Block the wider of the two bodies, SharedMem the larger, and Args
// (hpCtl, hp params, beCtl, be params). Pad describes the BE part as a
// Resumable launch of the BE op's own kernel (Grid = the workers), with the
// same Flag, Counter, Done and Logical: a device runs the padded launch as
// Func over Grid.Count() + Pad.Grid.Count() one-dimensional blocks.
func (l *Library) LaunchPadded(hp Op, hpBufs Buffers, hpCtl Control, hpBlocks int, be Op, beBufs Buffers, beCtl Control) (*gpu.Launch, error) {
	he, err := l.entry(hp)
	if err != nil {
		return nil, err
	}
	bke, err := l.entry(be)
	if err != nil {
		return nil, err
	}
	hk, bk := he.k, bke.k
	if err := hpBufs.check(hk); err != nil {
		return nil, err
	}
	if err := beBufs.check(bk); err != nil {
		return nil, err
	}
	if hpCtl.Offset < 0 || hpCtl.Offset >= hk.logical() {
		return nil, fmt.Errorf("%w: HP offset %d outside [0, %d)", ErrShape, hpCtl.Offset, hk.logical())
	}
	if hpBlocks <= 0 || hpCtl.Offset+hpBlocks > hk.logical() {
		hpBlocks = hk.logical() - hpCtl.Offset
	}
	if hk.split() && hpBlocks != hk.logical() {
		return nil, fmt.Errorf("%w: HP %s (%s) is split-K and runs whole: no sliced padded launch", ErrUnsupported, hk.name, hp.Shape())
	}
	if !beCtl.Flag.Valid() || beCtl.Counter == 0 || !beCtl.Done.Valid() {
		return nil, fmt.Errorf("%w: the BE side of a padded launch needs Control.Flag, Counter and Done", ErrUnsupported)
	}
	w := beCtl.Workers
	if w <= 0 {
		if _, err := l.kfunc(bk, gpu.Resumable); err != nil {
			return nil, err
		}
		l.occupancyRegs(bk)
		capB, err := capacity(l.info.Spec, bk)
		if err != nil {
			return nil, err
		}
		capH, err := capacity(l.info.Spec, hk)
		if err != nil {
			return nil, err
		}
		w = max(1, capB-ceilDiv(hpBlocks*capB, capH))
	}
	if beCtl.Chunk <= 0 {
		beCtl.Chunk = bk.chunk
	}
	w = min(w, ceilDiv(bk.logical(), beCtl.Chunk))
	pairName := PaddedFunc(hk.name, bk.name)
	pairSrc := func() string { return pairSource(hk, bk) }
	var f gpu.Func
	if l.AsyncPairs {
		f, err = l.functionAsync(pairName, pairSrc, pairName)
	} else {
		f, err = l.function(pairName, pairSrc, pairName)
	}
	if err != nil {
		return nil, err
	}
	beFunc, err := l.kfunc(bk, gpu.Resumable)
	if err != nil {
		return nil, err
	}
	pad := &gpu.Launch{
		Name: bk.name + "/resumable", Func: beFunc, Grid: gpu.D1(w), Block: gpu.D1(bk.threads),
		SharedMem: bk.smem, Registers: bk.regs, Cost: cost(be), Form: gpu.Resumable,
		Flag: beCtl.Flag, Counter: beCtl.Counter, Done: beCtl.Done, Logical: bk.logical(),
	}
	beCtl.Offset = 0
	l.epoch++
	packCtl(&pad.Args, beCtl, bk.logical(), l.epoch)
	bk.pack(&pad.Args, beBufs.Ptrs())
	packRunTail(&pad.Args, bk, beCtl.Counter, l.epoch)

	hpCost := cost(hp)
	frac := float64(hpBlocks) / float64(hk.logical())
	hpCost.FLOPs *= frac
	hpCost.Bytes *= frac
	ln := &gpu.Launch{
		Name: pairName, Func: f, Grid: gpu.D1(hpBlocks), Block: gpu.D1(max(hk.threads, bk.threads)),
		SharedMem: max(hk.smem, bk.smem), Registers: max(hk.regs, bk.regs), Cost: hpCost,
		Form: gpu.Padded, Pad: pad,
	}
	packCtl(&ln.Args, Control{Trace: hpCtl.Trace, Offset: hpCtl.Offset}, hpBlocks, l.epoch)
	hk.pack(&ln.Args, hpBufs.Ptrs())
	packRunTail(&ln.Args, hk, 0, l.epoch)
	packCtl(&ln.Args, beCtl, bk.logical(), l.epoch)
	bk.pack(&ln.Args, beBufs.Ptrs())
	packRunTail(&ln.Args, bk, beCtl.Counter, l.epoch)
	return ln, nil
}

// packRunTail appends the run's identity to a parameter struct that takes
// it (kspec.runTail: GemmP's progress and epoch): a split-K GEMM counts its
// finished splits per run, and a Resumable instance is one run over all
// its launches (progress: its control block), any other launch a run of
// its own (its epoch).
func packRunTail(a *gpu.Args, k *kspec, progress gpu.Ptr, epoch int32) {
	if k.runTail() {
		a.Ptr(progress).I32(epoch)
	}
}

// Watch returns a one-block launch of the flag watcher: it stores
// %globaltimer to *start as it begins (if start != 0), spins until flag is
// nonzero, then stores %globaltimer to *seen. Launch it before raising the
// flag, on a stream of its own, and always raise the flag afterwards (it
// spins until then). Any compiled module holds it; op chooses which.
func (l *Library) Watch(op Op, flag gpu.HostWord, seen, start gpu.Ptr) (*gpu.Launch, error) {
	k, err := spec(op)
	if err != nil {
		return nil, err
	}
	if !flag.Valid() || seen == 0 {
		return nil, fmt.Errorf("%w: the watcher needs a flag and a result pointer", ErrUnsupported)
	}
	f, err := l.function(k.name, func() string { return moduleSource(k) }, WatchFunc)
	if err != nil {
		return nil, err
	}
	ln := &gpu.Launch{Name: WatchFunc, Func: f, Grid: gpu.D1(1), Block: gpu.D1(32), Registers: 16}
	ln.Args.Ptr(flag.Dev).Ptr(seen).Ptr(start)
	return ln, nil
}
