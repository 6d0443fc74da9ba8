package sim

import (
	"context"
	"math"

	"atoll/gpu"
)

// eps is the tolerance, in ns of time or of remaining work, under which
// completions count as simultaneous.
const eps = 1e-6

// smClass is a set of SMs in exactly the same state: the same free room and
// the same resident groups. Each group of the class has k blocks on every
// one of its SMs.
type smClass struct {
	ids    []int16 // SM indices, ascending
	free   resources
	groups []*group // in dispatch order
	csum   float64  // Σ k·c over groups: compute demand on each SM
	gone   bool     // merged away (waiting in the free list)
	// With co-run interference (rates): the warps active groups hold on
	// each SM.
	wsum int
}

// group is k blocks of one part on every SM of its class, dispatched at the
// same instant: they progress at the same rate and finish together.
type group struct {
	part *part
	cls  *smClass
	k    int
	w    float64 // remaining solo work of each block, ns
	rate float64 // progress per ns, min(1, 1/C, 1/M)
	tc   float64 // completion time at the current rate
	born float64
	// reading: the group's blocks wait for their host reads (readHost),
	// which end in wait ns; meanwhile they hold their slots but make no
	// progress and demand nothing, and w is untouched.
	reading bool
	wait    float64
	exit    bool // blocks that exit without work: fixed lifetime, no contention
	mi      int  // index in machine.groups
	// Copies of the part's figures rates reads for every group at every
	// event (one cache line instead of three).
	kern     *kernel
	c, m, mu float64
	warps    int
}

// machine is the SM state of one GPU context. Only the active context's
// machine progresses; the others' resident blocks are suspended.
type machine struct {
	ctx     gpu.Context
	classes []*smClass // ascending by ids[0]
	groups  []*group
	pending []*kernel       // eligible kernels with undispatched blocks, in dispatch order (see addPending)
	rr      [prioLevels]int // RoundRobin: rotating offset of each level
	dirty   bool            // rates need recomputing
	next    float64         // earliest group completion at the current rates
	freed   uint64          // retirements so far: SM room only grows then (part.full)
}

func (m *machine) hasWork() bool { return len(m.groups) > 0 || len(m.pending) > 0 }

func (d *Device) newMachine(ctx gpu.Context) *machine {
	c := &smClass{free: smCapacity(d.spec), ids: make([]int16, d.spec.SMs)}
	for i := range c.ids {
		c.ids[i] = int16(i)
	}
	return &machine{ctx: ctx, classes: []*smClass{c}, next: math.Inf(1)}
}

// addPending inserts k keeping the pending order: by priority, then, for
// FIFO, by (eligibility time, launch sequence), for RoundRobin by stream.
func (m *machine) addPending(k *kernel, order SamePriority) {
	m.pending = append(m.pending, k)
	for i := len(m.pending) - 1; i > 0; i-- {
		a, b := m.pending[i-1], m.pending[i]
		if !pendingBefore(b, a, order) {
			break
		}
		m.pending[i-1], m.pending[i] = b, a
	}
}

// pendingBefore reports whether a is served strictly before b.
func pendingBefore(a, b *kernel, order SamePriority) bool {
	if a.st.prio != b.st.prio {
		return a.st.prio < b.st.prio
	}
	if order == RoundRobin {
		return a.st.id < b.st.id
	}
	if a.elig != b.elig {
		return a.elig < b.elig
	}
	return a.seq < b.seq
}

// slicer is the time-slicing state across contexts.
type slicer struct {
	active    int
	switching bool
	to        int
	end       float64 // end of the switch in progress
	sliceEnd  float64 // end of the active context's slice
}

func (d *Device) active() *machine { return d.machines[d.slice.active] }

// run is Wait's loop: settle the present, then jump to the next instant at
// which something changes.
func (d *Device) run(ctx context.Context, until float64) error {
	d.observed = false
	for i := 0; ; i++ {
		if i&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		d.settle()
		if d.observed {
			return nil
		}
		t := d.nextTime()
		if t > until {
			d.advance(until)
			return nil
		}
		d.advance(t)
		d.complete()
	}
}

// settle does everything due at the present instant that takes no time.
func (d *Device) settle() {
	d.pump()
	d.notify()
	d.timeslice()
	if d.slice.switching {
		return
	}
	m := d.active()
	d.dispatch(m)
	if m.dirty {
		d.rates(m)
	}
}

func (d *Device) nextTime() float64 {
	t := math.Inf(1)
	for _, s := range d.streams {
		t = min(t, s.wake)
	}
	for _, s := range d.seenAt {
		t = min(t, s)
	}
	if d.slice.switching {
		return min(t, d.slice.end)
	}
	t = min(t, d.active().next)
	if len(d.machines) > 1 && d.slice.sliceEnd > d.now && d.othersHaveWork() {
		t = min(t, d.slice.sliceEnd)
	}
	return t
}

func (d *Device) othersHaveWork() bool {
	for i, m := range d.machines {
		if i != d.slice.active && m.hasWork() {
			return true
		}
	}
	return false
}

// advance moves virtual time to t, progressing the active context's blocks.
func (d *Device) advance(t float64) {
	if dt := t - d.now; dt > 0 && !d.slice.switching {
		for _, g := range d.active().groups {
			if g.reading {
				g.wait -= dt
			} else {
				g.w -= g.rate * dt
			}
		}
	}
	d.now = max(d.now, t)
}

// timeslice switches contexts: at once when the active one has no work and
// another has, or when the active one's slice is over and another has work.
func (d *Device) timeslice() {
	if len(d.machines) == 1 {
		return
	}
	sl := &d.slice
	if sl.switching {
		if d.now < sl.end {
			return
		}
		sl.switching, sl.active = false, sl.to
		sl.sliceEnd = d.now + float64(d.cfg.TimeSlice)
		d.active().dirty = true
	}
	cur := d.active()
	if cur.hasWork() && d.now < sl.sliceEnd {
		return
	}
	for i := 1; i < len(d.machines); i++ {
		j := (sl.active + i) % len(d.machines)
		if d.machines[j].hasWork() {
			sl.switching, sl.to, sl.end = true, j, d.now+float64(d.cfg.SwitchCost)
			if d.cfg.Trace != nil {
				d.trace(TraceEvent{Kind: TraceSwitch, Context: d.machines[j].ctx})
			}
			return
		}
	}
}

// rates recomputes every resident group's rate and completion time.
func (d *Device) rates(m *machine) {
	co, coMem := d.co, d.coMem
	// total: SMs held by active groups, use: their DRAM use (co-run
	// interference; use only with its memory term). A kernel's own
	// counts start from zero at its first active group of this call.
	d.stamp++
	mem, total, use := 0.0, 0, 0.0
	urgent := leastPriority + 1 // the most urgent stream with active blocks (Config.GraphYield)
	for _, g := range m.groups {
		if !g.exit && !g.reading {
			n := len(g.cls.ids)
			urgent = min(urgent, g.kern.st.prio)
			mem += float64(g.k*n) * g.m
			if co {
				k := g.kern
				if k.stamp != d.stamp {
					k.stamp, k.occ, k.use = d.stamp, 0, 0
				}
				k.occ += n
				total += n
			}
			if coMem {
				gu := float64(g.k*n) * g.mu
				g.kern.use += gu
				use += gu
			}
		}
	}
	for _, c := range m.classes {
		s := 0.0
		w := 0
		for _, g := range c.groups {
			if !g.exit && !g.reading {
				s += float64(g.k) * g.c
				w += g.k * g.warps
			}
		}
		c.wsum = w
		c.csum = s
	}
	lim := max(1, mem)
	next := math.Inf(1)
	for _, g := range m.groups {
		r := 1.0
		if !g.exit {
			// Plain compares: no NaN reaches here, and min and max
			// would pay for one.
			den := lim
			if cs := g.cls.csum; cs > den {
				den = cs
			}
			r = 1 / den
			if co && !g.reading {
				r /= 1 + d.coRun(g, total, use)
			}
			if k := g.kern; k.yield != 0 && k.st.prio > urgent {
				r *= k.yield
			}
		}
		g.rate = r
		var tc float64
		if g.reading {
			tc = d.now + max(g.wait, 0)
		} else {
			tc = d.now + g.w/r
		}
		g.tc = tc
		if tc < next {
			next = tc
		}
	}
	m.next, m.dirty = next, false
}

// coRun is the interference term of g's rate (Config.CoRunDevice,
// CoRunSM, CoRunMemory): total is the SMs held by every active group and
// use their DRAM use; each kernel's occ and use are its own share of them.
//
//   - The device term is whole while any other kernel's blocks are active,
//     however few SMs they hold: on an H200, ResNet-50 bs1 slowed 1.14×
//     beside its training step confined to 16 SMs and 1.15–1.21× on the 36
//     SMs a 96-SM partition left it (results/corun-h200), so what they
//     share beyond SMs — L2, memory, the front end — is there as soon as
//     the other kernel runs.
//   - The SM term is the share of its own SM's warp slots other kernels'
//     blocks hold.
//   - The memory term is the fourth power of the share of the DRAM
//     bandwidth the other kernels move (bytes over duration, at most 1):
//     beside kernels of ResNet-50's training step moving half the
//     bandwidth or less HP slowed little more than beside compute-bound
//     ones, and 5.6× beside VGG-19's first classifier layer, which moves
//     86 % of it (results/corun-h200 s29a, s30).
func (d *Device) coRun(g *group, total int, use float64) float64 {
	k := g.kern
	dev := 0.0
	if total > k.occ {
		dev = 1
	}
	warps := g.cls.wsum - g.cls.warpsOf(k)
	var sm float64
	if warps < len(d.smShare) {
		sm = d.smShare[warps]
	} else {
		sm = min(1, float64(warps)*32/float64(d.spec.MaxThreadsPerSM))
	}
	f := d.cfg.CoRunDevice*dev + d.cfg.CoRunSM*sm
	if d.cfg.CoRunMemory > 0 {
		u := min(1, max(0, use-k.use))
		u2 := u * u
		f += d.cfg.CoRunMemory * u2 * u2
	}
	return f
}

// warpsOf is the warps kernel k's active groups hold on each SM of c.
func (c *smClass) warpsOf(k *kernel) int {
	w := 0
	for _, g := range c.groups {
		if g.kern == k && !g.exit && !g.reading {
			w += g.k * g.warps
		}
	}
	return w
}

// dispatch places pending blocks: priority levels from the most urgent,
// within a level in the Config.SamePriority order. A level that still has
// pending blocks after its turn blocks all less urgent levels.
func (d *Device) dispatch(m *machine) {
	if len(m.pending) == 0 {
		return
	}
	if d.cfg.SamePriority == RoundRobin {
		d.dispatchRR(m)
	} else {
		d.dispatchFIFO(m)
	}
	out := m.pending[:0]
	for _, k := range m.pending {
		if k.pendingBlocks() > 0 {
			out = append(out, k)
		}
	}
	clear(m.pending[len(out):])
	m.pending = out
}

// dispatchFIFO serves the pending kernels in order: each places as many
// blocks as fit (one block per SM with room per round, breadth first), and
// a kernel left with blocks pending (unable to place them, or stopped by
// one before it) stops the dispatch on its SMs: no kernel behind it, of its
// level or a less urgent one, that may use any of those SMs places any.
// Kernels confined to other SMs (SM partitions apart from it) go on.
func (d *Device) dispatchFIFO(m *machine) {
	blocked := d.blocked[:0]
	for _, k := range m.pending {
		lo, hi := d.smRange(k.st)
		if !overlaps(blocked, lo, hi) {
			for k.pendingBlocks() > 0 && d.placeLevel(m, k, true) > 0 {
			}
		}
		if k.pendingBlocks() > 0 {
			if d.everySM(lo, hi) {
				break
			}
			blocked = append(blocked, smSpan{lo, hi})
		}
	}
	d.blocked = blocked[:0]
}

// everySM reports whether [lo, hi) is the whole device: a kernel pending
// there holds back every kernel behind it.
func (d *Device) everySM(lo, hi int16) bool { return lo == 0 && int(hi) == d.spec.SMs }

// smSpan is a range of SMs, [lo, hi).
type smSpan struct{ lo, hi int16 }

// smRange is the SMs s's blocks may use.
func (d *Device) smRange(s *stream) (lo, hi int16) {
	if s.hi > 0 {
		return s.lo, s.hi
	}
	return s.lo, int16(d.spec.SMs)
}

// overlaps reports whether [lo, hi) shares an SM with any of spans.
func overlaps(spans []smSpan, lo, hi int16) bool {
	for _, b := range spans {
		if lo < b.hi && b.lo < hi {
			return true
		}
	}
	return false
}

// dispatchRR: within a level, kernels take turns placing one block per SM
// with room (breadth first), starting from a rotating offset.
// A kernel left with blocks pending stops the less urgent levels on its
// SMs, as in dispatchFIFO.
func (d *Device) dispatchRR(m *machine) {
	blocked := d.blocked[:0]
	for i := 0; i < len(m.pending); {
		prio := m.pending[i].st.prio
		j := i + 1
		for j < len(m.pending) && m.pending[j].st.prio == prio {
			j++
		}
		level := m.pending[i:j]
		n := len(level)
		off := m.rr[prio-greatestPriority] % n
		placed := false
		for {
			progress := false
			for q := range n {
				k := level[(off+q)%n]
				if k.pendingBlocks() == 0 {
					continue
				}
				if lo, hi := d.smRange(k.st); !overlaps(blocked, lo, hi) && d.placeLevel(m, k, false) > 0 {
					progress = true
				}
			}
			if !progress {
				break
			}
			placed = true
		}
		if placed && n > 1 {
			m.rr[prio-greatestPriority]++
		}
		for _, k := range level {
			if k.pendingBlocks() > 0 {
				lo, hi := d.smRange(k.st)
				if d.everySM(lo, hi) {
					d.blocked = blocked[:0]
					return
				}
				blocked = append(blocked, smSpan{lo, hi})
			}
		}
		i = j
	}
	d.blocked = blocked[:0]
}

// placeLevel places at most one block of k's current part on each SM with
// room (with rounds, as many as place's rounds allow), reading the part's
// flag and counter as its blocks would.
func (d *Device) placeLevel(m *machine, k *kernel, rounds bool) int {
	p := k.cur()
	limit, exit := p.pending, false
	// A block reading the host word directly learns the flag only when its
	// read completes (readDone); the others read it (or its relay) now.
	if (p.reset || p.resumable) && !p.hostRead && p.flag.Valid() && d.words.load(p.flag.Index) != 0 {
		exit = true
	}
	counter := 0
	if p.resumable && !exit {
		counter = int(int32(d.loadU32(p.counter)))
		if avail := p.logical - counter; avail <= 0 {
			exit = true
		} else {
			limit = min(limit, avail)
		}
	}
	if p.full == m.freed+1 {
		return 0
	}
	n := d.place(m, p, limit, exit, rounds)
	if n > 0 && p.resumable && !exit {
		d.take(p, counter, n)
	}
	return n
}

// take records that workers of p took logical blocks [first, first+n).
func (d *Device) take(p *part, first, n int) {
	d.storeU32(p.counter, uint32(int32(first+n)))
	p.taken += n
	if d.cfg.Trace != nil {
		s := p.k.st
		d.trace(TraceEvent{Kind: TraceTake, Kernel: p.k.seq, Name: p.name, Stream: s.id, Context: s.ctx, Priority: s.prio, Part: p.index, First: first, Blocks: n})
	}
}

// place puts one block of p on each of at most limit SMs with room, lowest
// SM index first, splitting classes as needed; with rounds, it repeats that
// while the same SMs would all take another (a caller placing the part
// until it places none: FIFO). It returns the blocks placed.
func (d *Device) place(m *machine, p *part, limit int, exit, rounds bool) int {
	cands, total := d.cands[:0], 0
	lo, hi := p.k.st.lo, p.k.st.hi
	if lo > 0 && limit > 0 {
		d.splitAt(m, lo)
	}
	if hi > 0 && limit > 0 {
		d.splitAt(m, hi)
	} else {
		hi = int16(d.spec.SMs)
	}
	whole := d.everySM(lo, hi)
	for _, c := range m.classes {
		if c.free.fits(p.res) && (whole || c.ids[0] >= lo && c.ids[len(c.ids)-1] < hi) {
			cands = append(cands, c)
			total += len(c.ids)
		}
	}
	if total == 0 && limit > 0 {
		p.full = m.freed + 1
	}
	// chosen: the classes that take a block, all candidates or some of
	// them (kept in d.chosen's storage); the scratch lists keep stale
	// pointers, which name classes that live on in the machine or the pool.
	var chosen []*smClass
	switch {
	case total == 0 || limit <= 0:
	case limit >= total:
		chosen = cands
	case len(cands) == 1:
		chosen = append(d.chosen[:0], d.splitLow(m, cands[0], limit))
		d.chosen = chosen
		sortClasses(m)
	default:
		theta := lowestSM(cands, limit)
		chosen = d.chosen[:0]
		for _, c := range cands {
			switch n := atOrBelow(c.ids, theta); n {
			case 0:
			case len(c.ids):
				chosen = append(chosen, c)
			default:
				chosen = append(chosen, d.splitLow(m, c, n))
			}
		}
		d.chosen = chosen
		sortClasses(m)
	}
	// Every candidate takes a block: as long as each still has room and
	// the limit allows, the next rounds would place one more on the same
	// SMs, so place those rounds at once (not with host reads, whose
	// blocks each queue a read).
	r := 1
	if rounds && len(chosen) > 0 && limit >= total && !p.hostRead {
		r = limit / total
		for _, c := range chosen {
			r = min(r, c.free.room(p.res))
		}
	}
	placed, roomLeft := 0, false
	for _, c := range chosen {
		d.addBlocks(m, c, p, exit, r)
		placed += r * len(c.ids)
		roomLeft = roomLeft || c.free.fits(p.res)
	}
	if limit > 0 && limit >= total && !roomLeft {
		// Every SM that had room for it has none now.
		p.full = m.freed + 1
	}
	d.cands = cands[:0]
	return placed
}

// lowestSM is the limit-th lowest SM index among the classes' SMs
// (0 < limit < their total): the least t with limit SMs at or below it.
func lowestSM(cs []*smClass, limit int) int16 {
	lo, hi := int16(0), int16(0)
	for _, c := range cs {
		hi = max(hi, c.ids[len(c.ids)-1])
	}
	for lo < hi {
		t := lo + (hi-lo)/2
		n := 0
		for _, c := range cs {
			n += atOrBelow(c.ids, t)
		}
		if n >= limit {
			hi = t
		} else {
			lo = t + 1
		}
	}
	return lo
}

// atOrBelow is the number of ids (ascending) at most t.
func atOrBelow(ids []int16, t int16) int {
	i, j := 0, len(ids)
	for i < j {
		h := int(uint(i+j) >> 1)
		if ids[h] <= t {
			i = h + 1
		} else {
			j = h
		}
	}
	return i
}

// addBlocks puts r blocks of p on every SM of c (one with host reads).
func (d *Device) addBlocks(m *machine, c *smClass, p *part, exit bool, r int) {
	c.free.add(p.res, -r)
	n := len(c.ids)
	wait := 0.0
	if p.hostRead {
		wait = d.readHost(n)
	}
	grown := false
	for _, g := range c.groups {
		if g.part == p && g.born == d.now && g.exit == exit {
			// Placed at this instant: no time has passed, so the mean
			// wait over the group's blocks is exact.
			if p.hostRead {
				g.wait = (float64(g.k)*g.wait + wait) / float64(g.k+1)
			}
			g.k += r
			grown = true
			break
		}
	}
	if !grown {
		g := d.newGroup()
		*g = group{part: p, cls: c, k: r, w: p.tb, born: d.now, reading: p.hostRead, wait: wait, exit: exit, mi: len(m.groups),
			kern: p.k, c: p.c, m: p.m, mu: p.mu, warps: p.res.warps}
		if exit {
			g.w = d.blkMin
		}
		m.groups = append(m.groups, g)
		c.groups = append(c.groups, g)
	}
	p.pending -= r * n
	p.resident += r * n
	m.dirty = true
	k := p.k
	if !k.started {
		k.started = true
		if d.cfg.Trace != nil {
			d.trace(TraceEvent{Kind: TraceKernelStart, Kernel: k.seq, Name: k.name, Stream: k.st.id, Context: k.st.ctx, Priority: k.st.prio})
		}
	}
	d.traceBlocks(TraceDispatch, p, c.ids, r, exit)
}

// readHost queues n block-start reads of mapped host memory (one per block
// placed now) on the GPU-wide host-read server, which serves one read at a
// time, each taking HostReadLatency, in the order they are issued. It
// returns the mean time from now until a read of the n completes: the
// group's blocks all start then (the approximation that keeps a group one
// unit; the server is still busy for exactly n reads).
func (d *Device) readHost(n int) float64 {
	start := max(d.now, d.hostFree)
	d.hostFree = start + float64(n)*d.hostLat
	return start - d.now + float64(n+1)/2*d.hostLat
}

// readDone ends g's host reads: the blocks now see the flag as it is, and
// exit after BlockMin if it is raised or start their work if not.
func (d *Device) readDone(g *group) {
	g.reading, g.wait = false, 0
	p := g.part
	if !g.exit && p.flag.Valid() && d.words.load(p.flag.Index) != 0 {
		g.exit, g.w = true, d.blkMin
	}
	d.touched = append(d.touched, g.cls)
}

func (d *Device) traceBlocks(kind TraceKind, p *part, ids []int16, k int, exit bool) {
	if d.cfg.Trace == nil {
		return
	}
	s := p.k.st
	d.trace(TraceEvent{Kind: kind, Kernel: p.k.seq, Name: p.name, Stream: s.id, Context: s.ctx, Priority: s.prio, Part: p.index, SMs: ids, Blocks: k, Exit: exit})
}

func (d *Device) trace(e TraceEvent) {
	if d.cfg.Trace == nil {
		return
	}
	e.Time = dur(d.now)
	d.cfg.Trace(e)
}

// complete handles every group of the active context that finishes now.
func (d *Device) complete() {
	if d.slice.switching {
		return
	}
	m := d.active()
	if m.next > d.now+eps {
		return
	}
	due := d.due[:0]
	for _, g := range m.groups {
		if g.tc <= d.now+eps {
			due = append(due, g)
		}
	}
	for _, g := range due {
		if g.reading {
			d.readDone(g)
			continue
		}
		d.finish(m, g)
	}
	d.due = due[:0] // stale pointers name pooled groups only
	d.mergeTouched(m)
	m.dirty = true
}

// finish handles a group whose blocks (or logical blocks) are done.
func (d *Device) finish(m *machine, g *group) {
	p, c := g.part, g.cls
	n := len(c.ids)
	d.touched = append(d.touched, c)
	if !p.resumable || g.exit {
		d.retire(m, g, g.k)
		return
	}
	nk := n * g.k
	p.taken -= nk
	counter := int(int32(d.loadU32(p.counter)))
	if counter >= p.logical && p.taken == 0 {
		if p.done.Valid() {
			d.words.store(p.done.Index, 1)
			d.observed = true
		}
		if d.cfg.Trace != nil {
			s := p.k.st
			d.trace(TraceEvent{Kind: TraceDone, Kernel: p.k.seq, Name: p.name, Stream: s.id, Context: s.ctx, Priority: s.prio, Part: p.index})
		}
	}
	avail := p.logical - counter
	if avail <= 0 || (p.flag.Valid() && d.words.load(p.flag.Index) != 0) {
		d.retire(m, g, g.k)
		return
	}
	d.take(p, counter, min(avail, nk))
	if avail >= nk {
		g.w = p.tb
		return
	}
	// Only avail workers continue: q per SM, one more on the r lowest SMs.
	q, r := avail/n, avail%n
	if r > 0 {
		at := 0
		for c.groups[at] != g {
			at++
		}
		lo := d.splitLow(m, c, r)
		sortClasses(m)
		d.touched = append(d.touched, lo)
		lg := lo.groups[at]
		lg.w = p.tb
		d.retire(m, lg, lg.k-(q+1))
	}
	g.w = p.tb
	d.retire(m, g, g.k-q)
}

// retire removes drop blocks per SM of g from its SMs (all of them: the
// group leaves), and completes the kernel when it has nothing left.
func (d *Device) retire(m *machine, g *group, drop int) {
	if drop <= 0 {
		return
	}
	p, c := g.part, g.cls
	c.free.add(p.res, drop)
	m.freed++
	p.resident -= drop * len(c.ids)
	d.traceBlocks(TraceRetire, p, c.ids, drop, g.exit)
	if g.k -= drop; g.k == 0 {
		d.removeGroup(m, g)
	}
	if k := p.k; k.finished() {
		d.kernelDone(k)
	}
}

func (d *Device) removeGroup(m *machine, g *group) {
	last := m.groups[len(m.groups)-1]
	m.groups[g.mi] = last
	last.mi = g.mi
	m.groups[len(m.groups)-1] = nil
	m.groups = m.groups[:len(m.groups)-1]
	c := g.cls
	gs := c.groups
	for i, h := range gs {
		if h == g {
			copy(gs[i:], gs[i+1:])
			gs[len(gs)-1] = nil
			c.groups = gs[:len(gs)-1]
			break
		}
	}
	*g = group{}
	d.gpool = append(d.gpool, g)
}

// busy reports whether any work is enqueued or resident.
func (d *Device) busy() bool {
	for _, s := range d.streams {
		if !s.idle() {
			return true
		}
	}
	return false
}
