package sim

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"testing/quick"
	"time"

	"atoll/gpu"
)

// This file checks the fast simulator against a naive one: every block on
// every SM is tracked on its own, rates are recomputed for every block at
// every event. Same model, same dispatch policies (FIFO and RoundRobin among
// equal priorities), none of the cleverness.

type refLaunch struct {
	stream, prio              int // stream index (0-based, creation order)
	grid, threads, regs, smem int
	dur                       time.Duration
	cf, mf                    float64
}

type refBlock struct {
	k int
	w float64
}

type refSM struct {
	warps, regs, smem, blocks int // free
	res                       []refBlock
}

// refSimulate returns each launch's completion time (ns). All launches are
// made at time 0, in order.
func refSimulate(spec gpu.Spec, lat, blkMin float64, order SamePriority, ls []refLaunch) []float64 {
	type kstate struct {
		tb, c, m          float64
		warps, regs, smem int
		pending, resident int
		eligible, done    bool
		elig, end         float64
	}
	ks := make([]kstate, len(ls))
	for i, l := range ls {
		bpsm, _, err := spec.Occupancy(l.threads, l.regs, l.smem)
		if err != nil {
			panic(err)
		}
		perWave := spec.SMs * bpsm
		waves := (l.grid + perWave - 1) / perWave
		resident := min(l.grid, perWave)
		perSM := (resident + spec.SMs - 1) / spec.SMs
		k := &ks[i]
		k.tb = max(float64(l.dur)/float64(waves), blkMin)
		k.c, k.m = l.cf/float64(perSM), l.mf/float64(resident)
		k.warps = (l.threads + 31) / 32
		if l.regs > 0 {
			k.regs = (l.regs*32 + 255) / 256 * 256 * k.warps
		}
		if l.smem > 0 {
			k.smem = (l.smem+127)/128*128 + spec.SharedMemReserved
		}
		k.pending = l.grid
	}
	nstreams := 0
	for _, l := range ls {
		nstreams = max(nstreams, l.stream+1)
	}
	queues := make([][]int, nstreams)
	for i, l := range ls {
		queues[l.stream] = append(queues[l.stream], i)
	}
	lastDone := make([]float64, nstreams)
	sms := make([]refSM, spec.SMs)
	for i := range sms {
		sms[i] = refSM{warps: spec.MaxThreadsPerSM / 32, regs: spec.RegistersPerSM, smem: spec.SharedMemPerSM, blocks: spec.MaxBlocksPerSM}
	}
	fits := func(s *refSM, k *kstate) bool {
		return s.warps >= k.warps && s.regs >= k.regs && s.smem >= k.smem && s.blocks >= 1
	}
	var rr [prioLevels]int
	now := 0.0
	for {
		// Stream heads become eligible.
		var pending []int // (prio, stream) order
		for s, q := range queues {
			if len(q) == 0 {
				continue
			}
			k := &ks[q[0]]
			if !k.eligible && max(lastDone[s], lat) <= now {
				k.eligible, k.elig = true, now
			}
		}
		for p := greatestPriority; p <= leastPriority; p++ {
			for s, q := range queues {
				if len(q) > 0 && ks[q[0]].eligible && ks[q[0]].pending > 0 && ls[q[0]].prio == p && ls[q[0]].stream == s {
					pending = append(pending, q[0])
				}
			}
		}
		// placeRound places one block of ki on every SM with room for it,
		// lowest SM first, while it has pending blocks.
		placeRound := func(ki int) bool {
			k := &ks[ki]
			progress := false
			for s := range sms {
				if k.pending == 0 {
					break
				}
				if sm := &sms[s]; fits(sm, k) {
					sm.warps -= k.warps
					sm.regs -= k.regs
					sm.smem -= k.smem
					sm.blocks--
					sm.res = append(sm.res, refBlock{k: ki, w: k.tb})
					k.pending--
					k.resident++
					progress = true
				}
			}
			return progress
		}
		// FIFO: one queue over all levels, by (priority, eligibility time,
		// launch index); the first kernel that cannot place all its blocks
		// stops everything behind it.
		if order == FIFO {
			sort.Slice(pending, func(a, b int) bool {
				x, y := pending[a], pending[b]
				if ls[x].prio != ls[y].prio {
					return ls[x].prio < ls[y].prio
				}
				if ks[x].elig != ks[y].elig {
					return ks[x].elig < ks[y].elig
				}
				return x < y
			})
			for _, ki := range pending {
				for placeRound(ki) {
				}
				if ks[ki].pending > 0 {
					break
				}
			}
			pending = nil
		}
		// RoundRobin, as the fast simulator's policy says, one block at a time.
		for i := 0; i < len(pending); {
			prio := ls[pending[i]].prio
			j := i + 1
			for j < len(pending) && ls[pending[j]].prio == prio {
				j++
			}
			level := pending[i:j]
			n := len(level)
			off := rr[prio-greatestPriority] % n
			placed := false
			for {
				progress := false
				for q := range n {
					if placeRound(level[(off+q)%n]) {
						progress = true
					}
				}
				if !progress {
					break
				}
				placed = true
			}
			if placed && n > 1 {
				rr[prio-greatestPriority]++
			}
			blocked := false
			for _, ki := range level {
				blocked = blocked || ks[ki].pending > 0
			}
			if blocked {
				break
			}
			i = j
		}
		// Rates.
		mem := 0.0
		for s := range sms {
			for _, b := range sms[s].res {
				mem += ks[b.k].m
			}
		}
		next := math.Inf(1)
		rate := make([][]float64, len(sms))
		for s := range sms {
			c := 0.0
			for _, b := range sms[s].res {
				c += ks[b.k].c
			}
			for _, b := range sms[s].res {
				r := 1 / max(1, c, mem)
				rate[s] = append(rate[s], r)
				next = min(next, now+b.w/r)
			}
		}
		for s, q := range queues {
			if len(q) > 0 && !ks[q[0]].eligible {
				next = min(next, max(lastDone[s], lat))
			}
		}
		if math.IsInf(next, 1) {
			break
		}
		dt := next - now
		now = next
		for s := range sms {
			sm := &sms[s]
			kept := sm.res[:0]
			for i, b := range sm.res {
				tc := now - dt + b.w/rate[s][i]
				b.w -= rate[s][i] * dt
				if tc > now+eps {
					kept = append(kept, b)
					continue
				}
				k := &ks[b.k]
				sm.warps += k.warps
				sm.regs += k.regs
				sm.smem += k.smem
				sm.blocks++
				k.resident--
				if k.resident == 0 && k.pending == 0 {
					k.done, k.end = true, now
					st := ls[b.k].stream
					queues[st] = queues[st][1:]
					lastDone[st] = now
				}
			}
			sm.res = kept
		}
	}
	out := make([]float64, len(ks))
	for i := range ks {
		out[i] = ks[i].end
	}
	return out
}

// randomWorkload makes a small workload on a small GPU, so that SMs
// fragment and priorities collide.
func randomWorkload(rng *rand.Rand, contention bool) (gpu.Spec, []refLaunch, int) {
	spec := gpu.H100SXM
	spec.SMs = 1 + rng.IntN(8)
	nstreams := 1 + rng.IntN(4)
	prios := make([]int, nstreams)
	for i := range prios {
		prios[i] = []int{-5, -2, 0, 0}[rng.IntN(4)]
	}
	var ls []refLaunch
	for range 1 + rng.IntN(14) {
		s := rng.IntN(nstreams)
		l := refLaunch{
			stream: s, prio: prios[s],
			grid:    1 + rng.IntN(200),
			threads: []int{32, 64, 128, 256, 512, 1024}[rng.IntN(6)],
			regs:    []int{0, 32, 64}[rng.IntN(3)],
			smem:    []int{0, 1 << 10, 16 << 10, 48 << 10, 100 << 10}[rng.IntN(5)],
			dur:     time.Duration(1+rng.IntN(300)) * us,
		}
		if contention {
			l.cf, l.mf = rng.Float64(), rng.Float64()
		}
		ls = append(ls, l)
	}
	return spec, ls, nstreams
}

// fastRun runs the workload on the fast simulator and checks its
// invariants; it returns completion times (ns) by launch index.
func fastRun(t *testing.T, spec gpu.Spec, order SamePriority, ls []refLaunch, nstreams int) ([]float64, []TraceEvent, bool) {
	r := newRig(t, Config{Spec: spec, BlockMin: 1, SamePriority: order})
	var streams []gpu.Stream
	for s := range nstreams {
		p := 0
		for _, l := range ls {
			if l.stream == s {
				p = l.prio
			}
		}
		streams = append(streams, r.stream(p))
	}
	for _, l := range ls {
		r.launch(streams[l.stream], gpu.Launch{Grid: gpu.D1(l.grid), Block: gpu.D1(l.threads), Registers: l.regs, SharedMem: l.smem,
			Cost: gpu.Cost{Duration: l.dur, ComputeFrac: l.cf, MemoryFrac: l.mf}})
	}
	r.drain()
	ok := checkInvariants(t, spec, order, ls, r.trace)
	ends := r.ends()
	out := make([]float64, len(ls))
	for i := range ls {
		out[i] = float64(ends[uint64(i+1)])
	}
	return out, r.trace, ok
}

// checkInvariants replays a trace: no SM over a limit, every block
// dispatched and retired exactly once, priorities respected at dispatch, and
// under FIFO no kernel dispatched while one of its priority that became
// eligible strictly earlier still had blocks to dispatch.
func checkInvariants(t *testing.T, spec gpu.Spec, order SamePriority, ls []refLaunch, trace []TraceEvent) bool {
	t.Helper()
	use := make([]resources, spec.SMs)
	capa := smCapacity(spec)
	disp, ret := make([]int, len(ls)), make([]int, len(ls))
	lastDisp := make([]time.Duration, len(ls))
	end := make([]time.Duration, len(ls))
	for _, e := range trace {
		i := int(e.Kernel) - 1
		if e.Kind != TraceDispatch && e.Kind != TraceRetire && e.Kind != TraceKernelEnd {
			continue
		}
		l := ls[i]
		u := blockUsage(spec, l.threads, l.regs, l.smem)
		switch e.Kind {
		case TraceKernelEnd:
			end[i] = e.Time
		case TraceDispatch:
			disp[i] += e.Blocks * len(e.SMs)
			lastDisp[i] = e.Time
			for _, s := range e.SMs {
				use[s].add(u, e.Blocks)
				if !capa.fits(use[s]) {
					t.Errorf("t=%v SM %d over its limits: %+v > %+v", e.Time, s, use[s], capa)
					return false
				}
			}
		case TraceRetire:
			ret[i] += e.Blocks * len(e.SMs)
			for _, s := range e.SMs {
				use[s].add(u, -e.Blocks)
			}
		}
	}
	for i, l := range ls {
		if disp[i] != l.grid || ret[i] != l.grid {
			t.Errorf("kernel %d: %d blocks dispatched, %d retired, grid %d", i+1, disp[i], ret[i], l.grid)
			return false
		}
	}
	// eligible[i]: launch latency and the previous kernel of its stream;
	// pred[i] is that previous kernel (-1 if none). Trace times are
	// truncated to ns, so a kernel counts as eligible at a dispatch only
	// if the dispatch comes after its predecessor's end in the trace.
	lat := spec.LaunchLatency
	eligible := make([]time.Duration, len(ls))
	pred := make([]int, len(ls))
	prev := map[int]int{}
	for i, l := range ls {
		eligible[i], pred[i] = lat, -1
		if p, ok := prev[l.stream]; ok {
			eligible[i], pred[i] = max(lat, end[p]), p
		}
		prev[l.stream] = i
	}
	endIdx := make([]int, len(ls))
	for j, e := range trace {
		if e.Kind == TraceKernelEnd {
			endIdx[int(e.Kernel)-1] = j
		}
	}
	for j, e := range trace {
		if e.Kind != TraceDispatch {
			continue
		}
		lo := int(e.Kernel) - 1
		for hi, l := range ls {
			eligibleNow := lat <= e.Time && (pred[hi] < 0 || endIdx[pred[hi]] < j)
			if l.prio < ls[lo].prio && eligibleNow && lastDisp[hi] > e.Time {
				t.Errorf("t=%v kernel %d (prio %d) dispatched while kernel %d (prio %d, eligible at %v) still had pending blocks",
					e.Time, lo+1, ls[lo].prio, hi+1, l.prio, eligible[hi])
				return false
			}
			// Trace times are truncated to ns, so only strictly earlier
			// eligibility (and strictly later dispatch) is certain.
			if order == FIFO && l.prio == ls[lo].prio && eligible[hi] < eligible[lo] && lastDisp[hi] > e.Time {
				t.Errorf("FIFO: t=%v kernel %d (prio %d, eligible at %v) dispatched while kernel %d (eligible at %v) still had pending blocks",
					e.Time, lo+1, l.prio, eligible[lo], hi+1, eligible[hi])
				return false
			}
		}
	}
	return true
}

func TestFastMatchesReference(t *testing.T) {
	seen := map[SamePriority]int{}
	defer func() {
		if !t.Failed() && (seen[FIFO] == 0 || seen[RoundRobin] == 0) {
			t.Errorf("workloads by order %v: both orders must be exercised", seen)
		}
	}()
	for _, contention := range []bool{false, true} {
		f := func(seed uint64) bool {
			rng := rand.New(rand.NewPCG(seed, 7))
			spec, ls, ns := randomWorkload(rng, contention)
			order := []SamePriority{FIFO, RoundRobin}[rng.IntN(2)]
			seen[order]++
			fast, trace, ok := fastRun(t, spec, order, ls, ns)
			if !ok {
				t.Logf("seed %d order %v: invariant broken", seed, order)
				return false
			}
			ref := refSimulate(spec, float64(spec.LaunchLatency), 1, order, ls)
			for i := range ls {
				tol := 2.0 // ns: the fast trace truncates to whole ns
				if contention {
					tol += 1e-6 * ref[i]
				}
				if math.Abs(fast[i]-ref[i]) > tol {
					t.Logf("seed %d contention=%v order %v kernel %d: fast %v, reference %v\nworkload %+v", seed, contention, order, i+1, fast[i], ref[i], ls)
					return false
				}
			}
			again, trace2, _ := fastRun(t, spec, order, ls, ns)
			_ = again
			if len(trace) != len(trace2) {
				t.Logf("seed %d: traces differ in length", seed)
				return false
			}
			for i := range trace {
				a, b := trace[i], trace2[i]
				if a.Time != b.Time || a.Kind != b.Kind || a.Kernel != b.Kernel || a.Blocks != b.Blocks || len(a.SMs) != len(b.SMs) {
					t.Logf("seed %d: traces differ at %d: %v vs %v", seed, i, a, b)
					return false
				}
			}
			return true
		}
		n := 400
		if testing.Short() {
			n = 50
		}
		if err := quick.Check(f, &quick.Config{MaxCount: n}); err != nil {
			t.Errorf("contention=%v: %v", contention, err)
		}
	}
}

// TestResumableExactlyOnceRandom preempts resumable kernels at random times
// and relaunches them until done: each logical block runs exactly once.
func TestResumableExactlyOnceRandom(t *testing.T) {
	f := func(seed uint64) bool {
		rng := rand.New(rand.NewPCG(seed, 9))
		spec := gpu.H100SXM
		spec.SMs = 1 + rng.IntN(16)
		r := newRig(t, Config{Spec: spec, SamePriority: []SamePriority{FIFO, RoundRobin}[rng.IntN(2)]})
		d := r.d
		words, _ := d.NewHostWords(2)
		flag, done := words[0], words[1]
		ctr, _ := d.Alloc(4)
		be, hp := r.stream(0), r.stream(-5)
		logical := 1 + rng.IntN(3000)
		l := gpu.Launch{Func: r.f, Grid: gpu.D1(1 + rng.IntN(64)), Block: gpu.D1([]int{64, 256, 1024}[rng.IntN(3)]),
			Form: gpu.Resumable, Flag: flag, Counter: ctr, Done: done, Logical: logical,
			Cost: gpu.Cost{Duration: time.Duration(10+rng.IntN(2000)) * us, ComputeFrac: rng.Float64(), MemoryFrac: rng.Float64()}}
		_ = d.Memset32(be, ctr, 0, 1)
		for launches := 0; d.Load(done) == 0; launches++ {
			if launches > 10000 {
				t.Logf("seed %d: no completion after %d launches", seed, launches)
				return false
			}
			d.Store(flag, 0)
			if err := d.Launch(be, &l); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(3) == 0 { // HP traffic beside
				r.launch(hp, plain("hp", 1+rng.IntN(300), 256, time.Duration(1+rng.IntN(50))*us))
			}
			_ = d.Wait(context.Background(), d.Now()+time.Duration(rng.IntN(500))*us)
			d.Store(flag, 1)
			r.drain()
		}
		checkTakes(t, r.trace, 0, logical)
		return !t.Failed()
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 100}); err != nil {
		t.Error(err)
	}
}
