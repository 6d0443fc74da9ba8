package sched

import (
	"fmt"
	"slices"
	"time"

	"atoll/gpu"
	"atoll/profiles"
)

// Cause is one reason an HP request took longer than the sum of its
// kernels' solo (profiled) durations. The driver splits every request's
// timeline, arrival to completion, into its kernels' solo durations and
// these causes, so that for each request
//
//	Latency() == Solo + Σ Causes
//
// holds exactly (to the nanosecond of the device clock).
type Cause uint8

const (
	// CauseHPQueue: waiting behind earlier requests of the same HP client
	// (present in a dedicated run too).
	CauseHPQueue Cause = iota
	// CausePolicy: the stream was free but the policy decided the launch
	// later (a held launch, a tick).
	CausePolicy
	// CauseHost: decided, but the launch call not yet made: the driver's
	// poll and bind (the call itself counts in the kernel's span).
	CauseHost
	// CauseDrain: the kernel ran longer than its profile while a BE
	// preemption was draining (flag raised, BE blocks still resident).
	CauseDrain
	// CausePadded: the kernel ran longer than its profile inside a padded
	// launch (the pad's BE blocks beside it).
	CausePadded
	// CauseCoRun: the kernel ran longer than its profile while BE launches
	// were in flight: waiting for SMs held by BE blocks and running slower
	// beside them (the driver's events cannot tell the two apart).
	CauseCoRun
	// CauseVariance: the kernel's time differed from its profile with no
	// BE work in flight (clocks, caches, the profile's own spread); may be
	// negative.
	CauseVariance
	// NumCauses is the number of causes.
	NumCauses
)

var causeNames = [...]string{"hp-queue", "policy", "host", "drain", "padded", "co-run", "variance"}

func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return fmt.Sprintf("cause(%d)", c)
}

// CauseNames lists the causes' names in order.
func CauseNames() []string { return causeNames[:] }

// Causes is a request's delay by cause.
type Causes [NumCauses]time.Duration

// Sum is the total delay over the request's solo kernel time.
func (c Causes) Sum() time.Duration {
	var s time.Duration
	for _, d := range c {
		s += d
	}
	return s
}

// Blame names a BE kernel an HP kernel ran beside.
type Blame struct {
	Client ClientID
	Kernel int
}

// hpKernel is what the driver knows of one HP launch.
type hpKernel struct {
	decided   time.Duration // core time of the decision
	submitted time.Duration // device clock just before the launch call
	end       time.Duration // completion (device clock); -1 until seen
	solo      time.Duration // the profile's duration
	padded    bool          // a padded launch (the pair ran)
	drain     bool          // a BE preemption drained while it was in flight
	blame     Blame         // the oldest BE launch in flight beside it
	blamed    bool
}

// attributor splits each HP request's latency into causes from the
// driver's own records: decision and submission times, completion events,
// and which BE launches were in flight. It costs one clock read per HP
// launch and no device calls.
type attributor struct {
	off     bool // Options.NoAttribution
	be      []*profiles.Profile
	pending [][]hpKernel // per HP client, in launch (= completion) order
	base    []int        // per HP client: the launch serial of pending[c][0]
	next    []int        // per HP client: the launch serial of the next kernel to complete
	// unblamed holds, per HP client, the serials of pending kernels that
	// had no BE launch beside them when launched: the next BE launch
	// blames them all at once (each kernel is visited once, so BE launches
	// cost O(1) amortised however many HP kernels are queued).
	unblamed [][]int
	lastEnd  []time.Duration     // per HP client: when its previous pass ended
	solo     [][][]time.Duration // per HP client, pass variant and kernel: the baseline (Options.KernelSolo for the client's profile, else the profile)
	batch    [][]int             // per HP client and pass variant: the requests it serves (HPClient.vars)
	left     []int               // per HP client: requests of the current pass not yet split
	spans    [][][]time.Duration // per HP client and kernel of its profile: measured device spans (Options.RecordSpans)
	// ByKernel sums, per BE kernel ("model/layer"), the delay of HP
	// kernels that ran beside it (co-run, drain and padded causes).
	byKernel map[Blame]time.Duration
}

// newAttributor splits the requests of the core's clients hp and be.
func newAttributor(hp []*HPClient, be []*BEClient, opt Options) *attributor {
	a := &attributor{
		off:      opt.NoAttribution,
		pending:  make([][]hpKernel, len(hp)),
		base:     make([]int, len(hp)),
		next:     make([]int, len(hp)),
		unblamed: make([][]int, len(hp)),
		lastEnd:  make([]time.Duration, len(hp)),
		left:     make([]int, len(hp)),
		byKernel: map[Blame]time.Duration{},
	}
	for i, c := range hp {
		var vs [][]time.Duration
		var bs []int
		for v, pass := range c.vars {
			solo := make([]time.Duration, len(pass.prof.Kernels))
			for k := range solo {
				solo[k] = pass.prof.Kernels[k].Duration()
				if v == 0 && i < len(opt.KernelSolo) && k < len(opt.KernelSolo[i]) {
					solo[k] = opt.KernelSolo[i][k]
				}
			}
			vs, bs = append(vs, solo), append(bs, pass.reqs)
		}
		a.solo, a.batch = append(a.solo, vs), append(a.batch, bs)
		if opt.RecordSpans {
			a.spans = append(a.spans, make([][]time.Duration, len(vs[0])))
		}
	}
	for _, c := range be {
		a.be = append(a.be, c.prof)
	}
	return a
}

// launched records an HP launch (Plain or Padded) just submitted;
// beside is the oldest BE launch in flight, if any.
func (a *attributor) launched(l Launch, decided, submitted time.Duration, padded bool, beside *Blame, draining bool) {
	if a.off {
		return
	}
	c := l.Client.Index
	k := hpKernel{decided: decided, submitted: submitted, end: -1, solo: a.solo[c][l.Variant][l.Kernel],
		padded: padded, drain: draining}
	if beside != nil {
		k.blame, k.blamed = *beside, true
	} else {
		a.unblamed[c] = append(a.unblamed[c], a.base[c]+len(a.pending[c]))
	}
	a.pending[c] = append(a.pending[c], k)
}

// beLaunched marks every HP kernel in flight as running beside b (when it
// has no BE neighbour yet).
func (a *attributor) beLaunched(b Blame) {
	if a.off {
		return
	}
	for c := range a.pending {
		for _, serial := range a.unblamed[c] {
			i := serial - a.base[c]
			if i < 0 || i >= len(a.pending[c]) {
				continue // its request is done
			}
			if k := &a.pending[c][i]; k.end < 0 && !k.blamed {
				k.blame, k.blamed = b, true
			}
		}
		a.unblamed[c] = a.unblamed[c][:0]
	}
}

// raised marks the HP kernels in flight as running beside a drain: a BE
// client's flag was just raised.
func (a *attributor) raised() {
	if a.off {
		return
	}
	for c := range a.pending {
		for i := range a.pending[c] {
			if k := &a.pending[c][i]; k.end < 0 {
				k.drain = true
			}
		}
	}
}

// completed records the completion of HP client c's oldest kernel in
// flight.
func (a *attributor) completed(c int, t time.Duration) {
	if a.off {
		return
	}
	if i := a.next[c] - a.base[c]; i >= 0 && i < len(a.pending[c]) {
		a.pending[c][i].end = t
		a.next[c]++
	}
}

// request splits the finished request r (the kernels of its pass are the
// oldest records of its client) and fills r.Solo and r.Causes; measured
// requests add to byKernel. The requests of one pass come one after
// another and share its records, which the last of them releases.
func (a *attributor) request(r *RequestRecord, measured bool) {
	if a.off {
		return
	}
	c := r.Client.Index
	v := slices.Index(a.batch[c], r.Batch)
	if v < 0 {
		return // no such pass (cannot happen with a consistent driver)
	}
	n := len(a.solo[c][v])
	if len(a.pending[c]) < n {
		return // records missing (cannot happen with a consistent driver)
	}
	if a.left[c] == 0 {
		a.left[c] = a.batch[c][v]
	}
	a.left[c]--
	last := a.left[c] == 0
	ks := a.pending[c][:n]
	t := r.Arrival
	prev := a.lastEnd[c]
	var cs Causes
	var solo time.Duration
	// Kernels that completed at one time (an HP graph's chunk shares one
	// event: Options.HPKernelEvents) are split as one: their span against
	// the sum of their solo times, blamed on the first of them with a BE
	// launch beside it.
	for i := 0; i < len(ks); {
		j := i + 1
		for j < len(ks) && ks[j].end == ks[i].end {
			j++
		}
		g := ks[i:j]
		end := max(g[0].end, t)
		add := func(cause Cause, until time.Duration) {
			until = min(until, end)
			if until > t {
				cs[cause] += until - t
				t = until
			}
		}
		if i == 0 {
			add(CauseHPQueue, prev)
		}
		add(CausePolicy, g[0].decided)
		add(CauseHost, g[0].submitted)
		var gsolo time.Duration
		var k *hpKernel // the kernel whose cause the group's excess takes
		for m := range g {
			gsolo += g[m].solo
			if k == nil && (g[m].padded || g[m].blamed) {
				k = &g[m]
			}
		}
		solo += gsolo
		if measured && a.spans != nil && v == 0 {
			a.spans[c][i] = append(a.spans[c][i], end-t)
			for m := i + 1; m < j; m++ {
				a.spans[c][m] = append(a.spans[c][m], 0)
			}
		}
		excess := end - t - gsolo
		t = end
		cause := CauseVariance
		switch {
		case k == nil:
		case k.padded:
			cause = CausePadded
		case k.drain && k.blamed:
			cause = CauseDrain
		case k.blamed:
			cause = CauseCoRun
		}
		cs[cause] += excess
		if measured && cause != CauseVariance && excess > 0 && k.blamed {
			a.byKernel[k.blame] += excess
		}
		i = j
	}
	// The record's End is the last kernel's completion; keep the sum exact
	// even if the core's End differs (it cannot with a consistent driver).
	cs[CauseVariance] += r.End - t
	r.Solo, r.Causes = solo, cs
	if !last {
		return
	}
	a.lastEnd[c] = r.End
	a.pending[c] = a.pending[c][n:] // no copy: see driver.poll
	a.base[c] += n
}

// blamed is byKernel by kernel name ("model/layer").
func (a *attributor) blamed() map[string]time.Duration {
	out := make(map[string]time.Duration, len(a.byKernel))
	for b, d := range a.byKernel {
		out[a.blameName(b)] += d
	}
	return out
}

// spanStats is each HP client's spans per kernel over the measured
// requests (nil without RecordSpans); a kernel never measured takes its
// baseline.
func (a *attributor) spanStats() [][]SpanStat {
	if a.spans == nil {
		return nil
	}
	out := make([][]SpanStat, len(a.spans))
	for c := range a.spans {
		out[c] = make([]SpanStat, len(a.spans[c]))
		for k, xs := range a.spans[c] {
			solo := a.solo[c][0][k]
			st := SpanStat{Solo: solo, Median: solo, Mean: solo}
			if len(xs) > 0 {
				var sum time.Duration
				for _, x := range xs {
					sum += x
				}
				slices.Sort(xs)
				st.Median, st.Mean = xs[len(xs)/2], sum/time.Duration(len(xs))
			}
			out[c][k] = st
		}
	}
	return out
}

func (a *attributor) blameName(b Blame) string {
	if b.Client.Index < len(a.be) {
		p := a.be[b.Client.Index]
		if b.Kernel >= 0 && b.Kernel < len(p.Kernels) {
			return p.Model + "/" + p.Kernels[b.Kernel].Name
		}
	}
	return b.Client.String()
}

// attribute tells the attributor of launch l (f in flight), submitted at
// the given device time: for an HP kernel, what runs beside it; for a BE
// one, the HP kernels it now runs beside.
func (d *driver) attribute(l Launch, f *dflight, submitted time.Duration) {
	if d.attr.off {
		return
	}
	if l.Client.Class == BE {
		d.attr.beLaunched(Blame{Client: l.Client, Kernel: l.Kernel})
		return
	}
	padded := l.Form == gpu.Padded && !f.unpadded
	var beside *Blame
	if padded {
		beside = &Blame{Client: l.Pad.Client, Kernel: l.Pad.Kernel}
	} else {
		beside = d.oldestBE()
	}
	d.attr.launched(l, d.core.State().Now(), submitted, padded, beside, d.draining())
}

// attributeWhole is attribute for every kernel of an HP request submitted
// whole (Plain, one instant): the BE launch beside them and whether a BE
// flag drains are the same for all, so they are found once.
func (d *driver) attributeWhole(h heldLaunch, submitted time.Duration) {
	if d.attr.off {
		return
	}
	beside, drain, now := d.oldestBE(), d.draining(), d.core.State().Now()
	for k := range h.n {
		d.attr.launched(h.decision(k).Launch, now, submitted, false, beside, drain)
	}
}

// oldestBE is the oldest BE launch in flight on any stream (pads
// included), or nil.
func (d *driver) oldestBE() *Blame {
	var best *dflight
	for _, s := range d.qorder {
		q := d.queues[s]
		if len(q) == 0 || (q[0].l.Client.Class == HP && d.padsInFlight == 0) {
			continue // an HP stream without pads holds no BE work
		}
		for _, f := range q {
			isBE := f.l.Client.Class == BE || (f.l.Form == gpu.Padded && !f.unpadded)
			if !isBE {
				continue
			}
			if best == nil || f.l.ID < best.l.ID {
				best = f
			}
			break // later launches of a stream are younger
		}
	}
	if best == nil {
		return nil
	}
	if best.l.Client.Class == BE {
		return &Blame{Client: best.l.Client, Kernel: best.l.Kernel}
	}
	return &Blame{Client: best.l.Pad.Client, Kernel: best.l.Pad.Kernel}
}

// draining reports whether a BE client's flag is raised while launches of
// it (pads included) are still in flight.
func (d *driver) draining() bool {
	for _, b := range d.core.State().BE() {
		if b.Raised() && b.InFlight() > 0 {
			return true
		}
	}
	return false
}
