package sim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"atoll/gpu"
)

// resources are SM capacity in the units the occupancy rules count.
type resources struct{ warps, regs, smem, blocks int }

func (r resources) fits(b resources) bool {
	return r.warps >= b.warps && r.regs >= b.regs && r.smem >= b.smem && r.blocks >= b.blocks
}

// room is how many blocks of usage b (b.blocks is 1) fit in r.
func (r resources) room(b resources) int {
	n := r.blocks / b.blocks
	if b.warps > 0 {
		n = min(n, r.warps/b.warps)
	}
	if b.regs > 0 {
		n = min(n, r.regs/b.regs)
	}
	if b.smem > 0 {
		n = min(n, r.smem/b.smem)
	}
	return n
}

func (r *resources) add(b resources, k int) {
	r.warps += k * b.warps
	r.regs += k * b.regs
	r.smem += k * b.smem
	r.blocks += k * b.blocks
}

// smCapacity is an empty SM.
func smCapacity(s gpu.Spec) resources {
	return resources{warps: s.MaxThreadsPerSM / s.WarpSize, regs: s.RegistersPerSM, smem: s.SharedMemPerSM, blocks: s.MaxBlocksPerSM}
}

// blockUsage is what one block takes from its SM, rounded exactly as
// gpu.Spec.Occupancy rounds, so that an empty SM holds Occupancy blocks.
func blockUsage(s gpu.Spec, threads, regs, smem int) resources {
	warps := (threads + s.WarpSize - 1) / s.WarpSize
	r := resources{warps: warps, blocks: 1}
	if regs > 0 {
		unit := max(s.RegisterAllocUnit, 1)
		r.regs = (regs*s.WarpSize + unit - 1) / unit * unit * warps
	}
	if smem > 0 {
		unit := max(s.SharedMemAlloc, 1)
		r.smem = (smem+unit-1)/unit*unit + s.SharedMemReserved
	}
	return r
}

// part is one body of a kernel: the launch's own, or a padded launch's Pad.
type part struct {
	k     *kernel
	index int
	name  string
	res   resources // per block
	// Solo duration of one block (for resumable bodies: of one logical
	// block), ns, and its compute and DRAM demand shares.
	tb, c, m float64
	// mu is one block's DRAM use for the co-run interference: its bytes
	// over its duration as a share of the spec's DRAM bandwidth (not
	// capped at the profile's measured peak, as m is), split over its
	// resident blocks.
	mu float64

	pending  int // blocks not yet dispatched
	resident int // blocks on SMs, suspended ones included

	reset     bool // reads flag at dispatch
	hostRead  bool // reset without relay: each block's start reads the host word (see readHost)
	resumable bool // persistent workers over logical blocks
	flag      gpu.HostWord
	done      gpu.HostWord
	counter   gpu.Ptr
	logical   int
	taken     int // logical blocks this launch's workers took and have not finished

	// full is its machine's freed count + 1 when place last found no SM
	// with room for a block of it (0: not known to be full): until a block
	// leaves an SM of that machine, placing it again would find none.
	full uint64
}

// kernel is one launch in flight.
type kernel struct {
	seq      uint64
	name     string
	st       *stream
	parts    [2]part
	nparts   int
	eligible bool    // at the head of its stream, past launch latency
	elig     float64 // when it became eligible
	started  bool
	inGraph  bool // a step of a graph (Device.profileHeld)
	// yield is the factor of its blocks' rate while a more urgent stream's
	// blocks are active (Config.GraphYield; 0: none).
	yield float64
	occ   int     // SMs its active groups hold (rates, with co-run interference)
	use   float64 // DRAM use of its active groups (rates, with co-run interference)
	stamp uint64  // the rates call occ and use were counted in
}

func (k *kernel) pendingBlocks() int {
	n := 0
	for i := range k.nparts {
		n += k.parts[i].pending
	}
	return n
}

// cur is the part whose blocks dispatch next (blocks dispatch in index order).
func (k *kernel) cur() *part {
	for i := range k.nparts {
		if k.parts[i].pending > 0 {
			return &k.parts[i]
		}
	}
	return nil
}

func (k *kernel) finished() bool {
	for i := range k.nparts {
		if k.parts[i].pending > 0 || k.parts[i].resident > 0 {
			return false
		}
	}
	return true
}

func invalid(l *gpu.Launch, role, format string, args ...any) error {
	return fmt.Errorf("%w: %s %q: %s", gpu.ErrInvalidLaunch, role, l.Name, fmt.Sprintf(format, args...))
}

// checkBody validates the shape and cost of one body and returns its
// occupancy alone.
func (d *Device) checkBody(l *gpu.Launch, role string) (int, error) {
	if l.Func <= 0 || int(l.Func) > len(d.funcs) {
		return 0, fmt.Errorf("%w: %s %q: Func %d was not resolved by this device (use Module.Function)", gpu.ErrInvalidHandle, role, l.Name, l.Func)
	}
	for _, g := range []struct {
		what string
		d    gpu.Dim3
	}{{"Grid", l.Grid}, {"Block", l.Block}} {
		if g.d.X <= 0 || g.d.Y < 0 || g.d.Z < 0 {
			return 0, invalid(l, role, "%s %v: X must be >= 1 and Y, Z >= 0 (0 counts as 1)", g.what, g.d)
		}
	}
	if l.Grid.Count() > math.MaxInt32 {
		return 0, invalid(l, role, "Grid %v has more than 2^31-1 blocks", l.Grid)
	}
	bpsm, _, err := d.spec.Occupancy(l.Block.Count(), l.Registers, l.SharedMem)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", role, l.Name, err)
	}
	c := l.Cost
	if c.Duration < 0 || c.FLOPs < 0 || c.Bytes < 0 || c.FLOPs != c.FLOPs || c.Bytes != c.Bytes {
		return 0, invalid(l, role, "Cost %+v has a negative or NaN field", c)
	}
	if !(c.ComputeFrac >= 0 && c.ComputeFrac <= 1) || !(c.MemoryFrac >= 0 && c.MemoryFrac <= 1) {
		return 0, invalid(l, role, "Cost.ComputeFrac %v and MemoryFrac %v must lie in [0, 1] (a profile's percent / 100)", c.ComputeFrac, c.MemoryFrac)
	}
	return bpsm, nil
}

// checkVendor checks l's vendor launches (gpu.Launch.Vendor) and returns
// each one's blocks per SM, appended to bpsm[:0].
func (d *Device) checkVendor(l *gpu.Launch, role string, bpsm []int) ([]int, error) {
	bpsm = bpsm[:0]
	if len(l.Vendor) > 0 && l.Form != gpu.Plain {
		return bpsm, invalid(l, role, "form %s with vendor launches: only a Plain launch is a vendor call", l.Form)
	}
	for i, v := range l.Vendor {
		if v.Grid < 1 || v.Grid > math.MaxInt32 {
			return bpsm, invalid(l, role, "vendor launch %d (%s): grid %d must be in 1..2^31-1", i, v.Name, v.Grid)
		}
		if !(v.Share > 0 && v.Share <= 1) || !(v.ComputeFrac >= 0 && v.ComputeFrac <= 1) || !(v.MemoryFrac >= 0 && v.MemoryFrac <= 1) {
			return bpsm, invalid(l, role, "vendor launch %d (%s): Share %v must lie in (0, 1], ComputeFrac %v and MemoryFrac %v in [0, 1]", i, v.Name, v.Share, v.ComputeFrac, v.MemoryFrac)
		}
		n, _, err := d.spec.Occupancy(v.Block, v.Registers, v.SharedMem)
		if err != nil {
			return bpsm, fmt.Errorf("%s %q: vendor launch %d (%s): %w", role, l.Name, i, v.Name, err)
		}
		bpsm = append(bpsm, n)
	}
	return bpsm, nil
}

func (d *Device) checkResumable(l *gpu.Launch, role string) error {
	if l.Logical <= 0 {
		return invalid(l, role, "resumable body needs Logical > 0 (the logical blocks of the body), got %d", l.Logical)
	}
	if l.Counter == 0 {
		return invalid(l, role, "resumable body needs Counter: an int32 in device memory (Alloc it and Memset32 it to 0)")
	}
	if err := d.checkRange(l.Counter, 4); err != nil {
		return fmt.Errorf("%s %q: Counter: %w", role, l.Name, err)
	}
	return d.checkWords(l, role)
}

func (d *Device) checkWords(l *gpu.Launch, role string) error {
	for _, w := range []struct {
		what string
		w    gpu.HostWord
	}{{"Flag", l.Flag}, {"Done", l.Done}} {
		if w.w.Valid() && (w.w.Index <= 0 || w.w.Index > d.words.n || w.w.Dev != hostWordBase+gpu.Ptr(4*w.w.Index)) {
			return fmt.Errorf("%w: %s %q: %s is not a host word of this device (use NewHostWords)", gpu.ErrInvalidHandle, role, l.Name, w.what)
		}
	}
	return nil
}

// Launch validates l and enqueues it on s. l is copied: the caller may reuse
// it at once.
func (d *Device) Launch(s gpu.Stream, l *gpu.Launch) error {
	if d.fault != nil {
		return d.fault
	}
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	return d.launch(st, l, true)
}

// launch checks l and enqueues it on st; hostCost charges the host time of
// one launch call (LaunchGraph charges it once for the whole graph).
func (d *Device) launch(st *stream, l *gpu.Launch, hostCost bool) error {
	if l == nil {
		return fmt.Errorf("%w: nil *Launch", gpu.ErrInvalidLaunch)
	}
	bpsm, err := d.checkBody(l, "launch")
	if err != nil {
		return err
	}
	padBpsm := 0
	switch l.Form {
	case gpu.Plain:
	case gpu.Reset:
		err = d.checkWords(l, "reset launch")
	case gpu.Resumable:
		err = d.checkResumable(l, "resumable launch")
	case gpu.Padded:
		if l.Pad == nil {
			return invalid(l, "padded launch", "Pad is nil: a padded launch needs the BE launch whose body fills the extra blocks")
		}
		if l.Pad.Pad != nil || l.Pad.Form == gpu.Padded {
			return invalid(l.Pad, "pad", "a pad cannot itself be padded")
		}
		if padBpsm, err = d.checkBody(l.Pad, "pad"); err == nil {
			err = d.checkResumable(l.Pad, "pad")
		}
	default:
		return invalid(l, "launch", "unknown form %v", l.Form)
	}
	if err != nil {
		return err
	}
	if d.vendorBpsm, err = d.checkVendor(l, "launch", d.vendorBpsm); err != nil {
		return err
	}

	if d.runsVendor(st, l) {
		d.vendorCall(st, l, d.vendorBpsm, !hostCost)
	} else {
		d.enqueueKernel(st, l, bpsm, padBpsm, !hostCost)
	}
	if hostCost {
		d.hostBusy(float64(d.hostCost(l.Func)))
	}
	if name := d.FuncName(l.Func); strings.HasPrefix(name, FaultPrefix) {
		// Accepted, as CUDA accepts the launch; the error shows from the
		// next call on.
		d.fault = fmt.Errorf("%w: %s: a kernel faulted (simulated illegal instruction or address); the context is unusable, open the device again", gpu.ErrDriver, name)
	}
	return nil
}

// enqueueKernel puts checked launch l on st as one kernel.
func (d *Device) enqueueKernel(st *stream, l *gpu.Launch, bpsm, padBpsm int, inGraph bool) {
	k := d.newKernel()
	d.seq++
	k.seq, k.name, k.st = d.seq, l.Name, st
	k.inGraph = inGraph
	k.yield = d.graphYield(l.Cost, inGraph)
	d.setPart(k, 0, l, bpsm)
	switch l.Form {
	case gpu.Reset:
		k.parts[0].reset = true
		// The kernel library reads the host word directly only when the
		// launch has no Counter to hold its device-memory relay
		// (kernels/cuda/common.cuh, flag_raised_from).
		k.parts[0].hostRead = l.Flag.Valid() && l.Counter == 0
	case gpu.Resumable:
		k.parts[0].resumable = true
	case gpu.Padded:
		d.setPart(k, 1, l.Pad, padBpsm)
		k.parts[1].resumable = true
		k.parts[1].pending = l.Pad.Grid.Count()
	}
	d.enqueue(st, op{kind: opKernel, host: d.now, k: k})
}

// runsVendor reports whether l runs as its vendor launches on st: a Plain
// launch that has them, unless st is confined to an SM partition and l's
// cost carries partition points (those time the whole call there).
func (d *Device) runsVendor(st *stream, l *gpu.Launch) bool {
	if l.Form != gpu.Plain || len(l.Vendor) == 0 {
		return false
	}
	if lo, hi := d.smRange(st); int(hi-lo) < d.spec.SMs && len(l.Cost.Partition) > 0 {
		return false
	}
	return true
}

// vendorCall puts checked vendor call l on st as its launches
// (gpu.Launch.Vendor, bpsm their blocks per SM), one after another as the
// library issues them in one host call: each its share of the call's GPU
// time, with its own geometry and demands. The call's profiled time
// included, besides what a kernel's profiled time holds (profiledTime),
// the turn between its launches, which the stream now takes between them
// (Config.KernelGap).
func (d *Device) vendorCall(st *stream, l *gpu.Launch, bpsm []int, inGraph bool) {
	c := l.Cost
	dur, held := d.profiledTime(c, inGraph)
	yield := d.graphYield(c, inGraph)
	total := float64(dur)
	net := total - min(held, total/2)
	net = max(net-float64(len(l.Vendor)-1)*float64(d.cfg.KernelGap), net/2)
	for i, v := range l.Vendor {
		step := gpu.Launch{Name: l.Name, Func: l.Func, Grid: gpu.D1(v.Grid), Block: gpu.D1(v.Block),
			Registers: v.Registers, SharedMem: v.SharedMem,
			Cost: gpu.Cost{Duration: time.Duration(v.Share * net), FLOPs: v.Share * c.FLOPs, Bytes: v.Share * c.Bytes,
				ComputeFrac: cmp.Or(v.ComputeFrac, c.ComputeFrac), MemoryFrac: cmp.Or(v.MemoryFrac, c.MemoryFrac)}}
		k := d.newKernel()
		d.seq++
		k.seq, k.name, k.st = d.seq, l.Name, st
		k.inGraph, k.yield = inGraph, yield
		d.fillPart(k, 0, &step, bpsm[i], step.Cost, 0)
		d.enqueue(st, op{kind: opKernel, host: d.now, k: k})
	}
}

// FaultPrefix begins the name of a kernel function that models a kernel
// fault (kernels.Fault): launching it makes every later call of the device
// but the destroys and Close fail, as a CUDA context's calls do after an
// illegal instruction or address.
const FaultPrefix = "fault_"

// hostBusy moves the clock on by dt of host time: the device runs
// meanwhile (kernels progress, events complete), as it does while a real
// host thread sits in a driver call.
func (d *Device) hostBusy(dt float64) {
	if dt <= 0 {
		return
	}
	for target := d.now + dt; d.now < target; {
		if err := d.run(context.Background(), target); err != nil {
			return
		}
		d.unseen = d.unseen || d.observed
	}
}

func (d *Device) newKernel() *kernel {
	if n := len(d.kpool); n > 0 {
		k := d.kpool[n-1]
		d.kpool = d.kpool[:n-1]
		*k = kernel{}
		return k
	}
	return new(kernel)
}

// setPart fills part i of k from body l: resources, counts and timing
// (its profiled time, profiledTime).
func (d *Device) setPart(k *kernel, i int, l *gpu.Launch, bpsm int) {
	c := l.Cost
	var held float64
	c.Duration, held = d.profiledTime(l.Cost, k.inGraph)
	d.fillPart(k, i, l, bpsm, c, held)
}

// profiledTime is the duration a launch of cost c runs from, and the GPU
// time of it the profiled figure holds beyond the kernel: launched on its
// own, Duration and profileHeld; inside a graph, its GraphDuration where
// measured, holding nothing more than the turn to the next kernel (its
// partition points scale with it; its shares of the device's rates stay
// the profile's, as the co-run fit took them).
func (d *Device) profiledTime(c gpu.Cost, inGraph bool) (time.Duration, float64) {
	if inGraph && c.GraphDuration > 0 {
		return c.GraphDuration, float64(d.cfg.KernelGap)
	}
	return c.Duration, d.profileHeld(inGraph)
}

// graphYield is the factor of the rate of a graph's kernel of cost c while
// a more urgent stream's blocks are active (Config.GraphYield): its time
// inside a graph over its time launched on its own, each less what the
// profiled figure holds beyond the kernel (profiledTime), within [1/2, 2].
// 0 when it has no such factor: not in a graph, no GraphDuration, or the
// model off.
func (d *Device) graphYield(c gpu.Cost, inGraph bool) float64 {
	if !d.cfg.GraphYield || !inGraph || c.GraphDuration <= 0 {
		return 0
	}
	gd, gh := d.profiledTime(c, true)
	ad, ah := d.profiledTime(c, false)
	graph, alone := float64(gd)-gh, float64(ad)-ah
	if graph <= 0 || alone <= 0 {
		return 0
	}
	return min(2, max(0.5, graph/alone))
}

// fillPart fills part i of k from body l, timed by c (held: what of its
// duration the kernel does not spend, taken off by timing).
func (d *Device) fillPart(k *kernel, i int, l *gpu.Launch, bpsm int, c gpu.Cost, held float64) {
	p := &k.parts[i]
	*p = part{
		k: k, index: i, name: l.Name,
		res:     blockUsage(d.spec, l.Block.Count(), l.Registers, l.SharedMem),
		pending: l.Grid.Count(),
		flag:    l.Flag, done: l.Done, counter: l.Counter, logical: l.Logical,
	}
	k.nparts = i + 1
	logical := l.Grid.Count()
	if l.Form == gpu.Resumable || i == 1 {
		logical = l.Logical
	}
	sms := d.spec.SMs
	if l.Form == gpu.Plain || l.Form == gpu.Reset { // the forms a profile's partition points time
		lo, hi := d.smRange(k.st)
		sms = int(hi - lo)
	}
	p.tb, p.c, p.m, p.mu = d.timing(c, logical, bpsm, sms, held)
}

// profileHeld is the GPU time a profiled duration holds beyond its kernel
// that this launch does not spend: launched on its own with its event
// record, EventCost (the record then holds the stream that long, as it did
// when profiled); inside a graph, ProfileGap, the whole of what the
// profiler's launch-and-record paid (the graph's own events hold the
// stream EventCost each). A graph's kernel with a GraphDuration runs that
// instead (setPart).
func (d *Device) profileHeld(inGraph bool) float64 {
	ec, gap := float64(d.cfg.EventCost), float64(d.cfg.ProfileGap)
	if gap == 0 {
		gap = ec
	}
	kg := float64(d.cfg.KernelGap)
	if inGraph {
		return gap + kg
	}
	return ec + kg
}

// timing is the calibrated model: the solo duration of one block of a body
// of n logical blocks at occupancy bpsm, and its compute and DRAM shares;
// held is the GPU time the profiled duration holds beyond the kernel
// (profileHeld), taken off it (at most half of it).
// A kernel confined to sms < the device's SMs whose cost carries partition
// points takes the points' duration there (gpu.Cost.PartitionDuration),
// spread over its waves on those SMs; without points its blocks keep their
// whole-device duration and simply take more rounds.
func (d *Device) timing(c gpu.Cost, n, bpsm, sms int, held float64) (tb, cs, ms, mu float64) {
	s := d.spec
	spread := s.SMs // the SMs its waves are counted on
	total := float64(c.Duration)
	if sms < s.SMs && total > 0 {
		if on, ok := c.PartitionDuration(sms); ok {
			// Shares are of the whole device's rates: the same work over
			// a longer time demands less of them.
			c.ComputeFrac *= total / float64(on)
			c.MemoryFrac *= total / float64(on)
			total, spread = float64(on), sms
		}
	}
	if held != 0 && total > 0 {
		total -= min(held, total/2)
	}
	perWave := spread * bpsm
	waves := (n + perWave - 1) / perWave
	if total == 0 { // roofline
		total = max(c.FLOPs/s.PeakFLOPS, c.Bytes/s.DRAMBandwidth) * 1e9
	}
	cf, mf := c.ComputeFrac, c.MemoryFrac
	if total > 0 {
		if cf == 0 {
			cf = min(1, c.FLOPs/(total*1e-9*s.PeakFLOPS))
		}
		if mf == 0 {
			mf = min(1, c.Bytes/(total*1e-9*s.DRAMBandwidth))
		}
	}
	tb = max(total/float64(waves), d.blkMin)
	if j := d.cfg.Jitter; j > 0 {
		tb *= 1 + j*(2*d.rng.Float64()-1)
	}
	resident := min(n, perWave)
	perSM := (resident + spread - 1) / spread
	if total > 0 && c.Bytes > 0 {
		mu = min(1, c.Bytes/(total*1e-9*s.DRAMBandwidth)) / float64(resident)
	}
	return tb, cf / float64(perSM), mf / float64(resident), mu
}
