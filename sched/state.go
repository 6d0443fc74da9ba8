package sched

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"atoll/gpu"
	"atoll/profiles"
)

// State is the scheduler's bookkeeping, handed to Policy.Schedule. Its
// methods make decisions (they append to the core's output) and keep the
// books consistent, so policies stay short: a policy says what to launch,
// the State checks it is legal (stream order, one resumable instance per
// client, no reset launch under a raised flag) and refuses it otherwise.
//
// State is owned by the Core; policies must not keep it past Schedule.
//
// BE lifecycle. A BE client runs only between events: EvReady starts a
// run (with an iteration budget, 0 = unlimited), EvPause or the budget's
// last iteration ends it (the client is then not Ready and nothing of it
// launches; the budget check happens while the completion is applied,
// before the policy runs). Launches in flight at the end complete and are
// accounted as usual; the flag is not touched. The next EvReady, once
// nothing of the client is in flight, starts a fresh iteration: head and
// issued go back to kernel 0, a partly done iteration is dropped without
// an iteration record (its finished kernels stay in the work counters),
// and saved progress is forgotten, so the next resumable or padded
// instance is preceded by a DecResetProgress. Policies see none of this
// except through Ready, CanLaunchBE and CanPad.
type State struct {
	spec        gpu.Spec
	now         time.Duration
	hp          []*HPClient
	be          []*BEClient
	flights     flightTable
	nextID      LaunchID
	out         []Decision
	wake        time.Duration
	stopping    bool
	hpBusy      int
	hpBusySince time.Duration
	hpIdleSince time.Duration
	stats       Stats
}

type flight struct {
	l    Launch
	at   time.Duration
	req  int // HP: request id of the HP body
	gen  int // BE own-stream launches: the client's generation at launch
	inst int // BE resumable/pad: the body instance
	// callEnd marks a BE launch that ends a device submission: a launch
	// of its own, or the last of a chunk (BEClient.Calls).
	callEnd bool
}

// Stats are the core's running counters.
type Stats struct {
	Launches       int // every launch decision
	HPLaunches     int // HP kernels launched (padded ones included)
	BELaunches     int // BE launches on BE streams
	PaddedLaunches int
	Cuts           int // reset launches cut (and launches discarded after them)
	Preempted      int // resumable or pad bodies that exited unfinished
	Preemptions    int // flags raised by policies
	Requests       int // HP requests finished
	Iterations     int // BE iterations finished
	BEKernels      int // BE kernels finished (each counted once)
	BEWork         time.Duration
	BEWorkByClient []time.Duration
	// HPBusy is the time at least one HP request was in flight (arrived,
	// not finished), to the core's latest event; BEWorkHPBusy is the part
	// of BEWork whose kernels the core saw finish in that time. Their
	// ratio against the rest says how much BE got done beside busy HP
	// and how much while HP was idle, the same way on every device.
	HPBusy       time.Duration
	BEWorkHPBusy time.Duration
}

// HPClient is one HP client's state: requests arrived and not finished, in
// arrival order, and its launches in flight (on its stream, in order).
//
// A pass is one run of a kernel sequence serving one request or, for a
// client with batched profiles (HPWorkload.Batched), several: such a
// client forms its next pass only when its stream is empty, from the
// requests waiting then — the largest batch that does not exceed them —
// so that requests queued behind a pass are served together by the next.
type HPClient struct {
	id        ClientID
	vars      []variant // vars[0]: the client's profile, serving one request
	reqs      []hpRequest
	launchReq int // index in reqs of the first request of the pass being launched
	launchK   int // next kernel of that pass
	launchV   int // variant of that pass (while launchK > 0)
	inflight  []LaunchID
}

// variant is one of an HP client's passes: a profile and how many
// requests it serves.
type variant struct {
	prof *profiles.Profile
	reqs int
}

type hpRequest struct {
	id      int
	arrival time.Duration
	start   time.Duration
	started bool
	done    int // kernels of its pass completed (first request of a pass)
	v       int // its pass's variant (first request of a pass, once launched)
}

// ID is the client's id.
func (c *HPClient) ID() ClientID { return c.id }

// Profile is the client's kernel sequence for one request.
func (c *HPClient) Profile() *profiles.Profile { return c.vars[0].prof }

// Pass is the profile of the pass being launched, or of the pass the next
// launch would start.
func (c *HPClient) Pass() *profiles.Profile {
	if c.launchK > 0 {
		return c.vars[c.launchV].prof
	}
	v, _ := c.nextVariant()
	return c.vars[v].prof
}

// Variant is the profile of c's pass v (Launch.Variant).
func (c *HPClient) Variant(v int) *profiles.Profile { return c.vars[v].prof }

// Busy reports whether a request has arrived and not finished.
func (c *HPClient) Busy() bool { return len(c.reqs) > 0 }

// Requests is the number of requests arrived and not finished.
func (c *HPClient) Requests() int { return len(c.reqs) }

// InFlight is the number of the client's launches not yet completed.
func (c *HPClient) InFlight() int { return len(c.inflight) }

// Next is the next HP kernel to launch and its index in its pass, or nil:
// nothing waits, or a batching client waits for its stream to empty.
func (c *HPClient) Next() (*profiles.Kernel, int) {
	if c.launchReq >= len(c.reqs) {
		return nil, -1
	}
	if c.launchK > 0 {
		return &c.vars[c.launchV].prof.Kernels[c.launchK], c.launchK
	}
	v, ok := c.nextVariant()
	if !ok {
		return nil, -1
	}
	return &c.vars[v].prof.Kernels[0], 0
}

// nextVariant is the variant of the pass the next launch would start, and
// false while a batching client's stream is not empty.
func (c *HPClient) nextVariant() (int, bool) {
	if len(c.vars) == 1 {
		return 0, true
	}
	if len(c.inflight) > 0 {
		return 0, false
	}
	waiting, v := len(c.reqs)-c.launchReq, 0
	for i := range c.vars {
		if c.vars[i].reqs <= waiting {
			v = i
		}
	}
	return v, true
}

// BEClient is one BE client's state: where it is in its iteration, its
// flag, and its launches in flight.
type BEClient struct {
	id        ClientID
	prof      *profiles.Profile
	ready     bool
	runs      int // runs started (EvReady on a client not ready)
	budget    int // iterations of the current run (0 = unlimited)
	runStart  int // iter when the current run started
	iter      int
	iterStart time.Duration
	iterWork  time.Duration
	head      int // first kernel of the iteration not yet finished
	issued    int // next kernel to launch on the client's own stream (>= head)
	gen       int // bumped by a cut: launches of older generations are void
	inst      int // instance number of the head kernel's body
	started   bool
	partial   bool
	raised    bool
	inflight  []LaunchID
	nOwn      int           // Plain/Reset launches in flight on its stream
	queued    time.Duration // profiled solo time of its own-stream launches in flight
	nReset    int           // Reset launches in flight
	nResume   int           // Resumable launches in flight (at most one)
	nPads     int           // pads in flight (all on padStream)
	padStream ClientID
	opens     []*openPreemption
	// chunkEnd is, per kernel, the end of its chunk (chunks.go); nil
	// when chunks are off. calls counts device submissions in flight.
	chunkEnd []int
	calls    int
}

type openPreemption struct {
	rec     PreemptionRecord
	waiting []LaunchID
}

// ID is the client's id.
func (b *BEClient) ID() ClientID { return b.id }

// Profile is the client's kernel sequence (one iteration).
func (b *BEClient) Profile() *profiles.Profile { return b.prof }

// Ready reports whether the client is running its loop: it has had an
// EvReady and since then neither an EvPause nor the end of its iteration
// budget. Nothing of a client that is not ready is launched.
func (b *BEClient) Ready() bool { return b.ready }

// Budget is the iteration budget of the client's current (or last) run;
// 0 means unlimited.
func (b *BEClient) Budget() int { return b.budget }

// RunIterations is the number of iterations completed since the client's
// current (or last) run started. Iterations finished by launches still in
// flight at a pause count too.
func (b *BEClient) RunIterations() int { return b.iter - b.runStart }

// Raised reports whether its preemption flag is raised.
func (b *BEClient) Raised() bool { return b.raised }

// InFlight is the number of its launches not yet completed (pads included).
func (b *BEClient) InFlight() int { return len(b.inflight) }

// Queued is the profiled solo time of b's launches in flight on its own
// stream: how long its queued work keeps the GPU busy once launched.
func (b *BEClient) Queued() time.Duration { return b.queued }

// OwnInFlight is the number of its Plain/Reset launches in flight.
func (b *BEClient) OwnInFlight() int { return b.nOwn }

// PreemptibleInFlight is the number of its launches in flight that a
// raised flag stops (Reset and Resumable; Plain launches and pads ignore
// it).
func (b *BEClient) PreemptibleInFlight() int { return b.nReset + b.nResume }

// ResumableInFlight reports whether a Resumable launch of it is in flight.
func (b *BEClient) ResumableInFlight() bool { return b.nResume > 0 }

// PadsInFlight is the number of padded launches carrying its body.
func (b *BEClient) PadsInFlight() int { return b.nPads }

// Head is the first kernel of the iteration not yet finished, and its index.
func (b *BEClient) Head() (*profiles.Kernel, int) { return &b.prof.Kernels[b.head], b.head }

// Next is the kernel the next own-stream launch would run, and its index,
// or nil when the rest of the iteration is already in flight.
func (b *BEClient) Next() (*profiles.Kernel, int) {
	if b.issued >= len(b.prof.Kernels) {
		return nil, -1
	}
	return &b.prof.Kernels[b.issued], b.issued
}

// Partial reports whether the head kernel has progress saved by a
// resumable or padded launch that exited unfinished. Such a kernel can
// only continue in Resumable form (or in a pad).
func (b *BEClient) Partial() bool { return b.partial }

// Iteration is the number of the iteration under way (the client's
// iterations completed so far, over all its runs).
func (b *BEClient) Iteration() int { return b.iter }

// Spec is the device's description.
func (s *State) Spec() gpu.Spec { return s.spec }

// Now is the core's clock: the latest event time seen.
func (s *State) Now() time.Duration { return s.now }

// HP and BE list the clients, in Workload order.
func (s *State) HP() []*HPClient { return s.hp }
func (s *State) BE() []*BEClient { return s.be }

// Stopping reports whether the run has ended for BE work.
func (s *State) Stopping() bool { return s.stopping }

// HPBusy reports whether any HP request is in flight (arrived, unfinished).
func (s *State) HPBusy() bool { return s.hpBusy > 0 }

// HPIdleSince is when the last HP request finished (meaningful when
// !HPBusy; zero before any).
func (s *State) HPIdleSince() time.Duration { return s.hpIdleSince }

// RunningHP is the HP kernel the device runs now: the oldest HP launch in
// flight over all HP clients (ties: first client), or nil.
func (s *State) RunningHP() *profiles.Kernel {
	var best *flight
	for _, c := range s.hp {
		if len(c.inflight) == 0 {
			continue
		}
		f := s.flights.get(c.inflight[0])
		if best == nil || f.at < best.at {
			best = f
		}
	}
	if best == nil {
		return nil
	}
	return &s.hp[best.l.Client.Index].vars[best.l.Variant].prof.Kernels[best.l.Kernel]
}

// Stats are the running counters, to the latest event.
func (s *State) Stats() Stats { return s.StatsAt(s.now) }

// StatsAt are the running counters with an open HP busy period counted to
// t (not before the latest event): what they will be at t if no event
// comes before it.
func (s *State) StatsAt(t time.Duration) Stats {
	st := s.stats
	st.BEWorkByClient = slices.Clone(s.stats.BEWorkByClient)
	if s.hpBusy > 0 {
		st.HPBusy += max(t, s.now) - s.hpBusySince
	}
	return st
}

// WakeAt asks for an EvTick at t (the earliest requested wins). Requests at
// or before now are ignored. A wake is forgotten once reached: a policy
// that still needs one asks again.
func (s *State) WakeAt(t time.Duration) {
	if t > s.now && (s.wake == 0 || t < s.wake) {
		s.wake = t
	}
}

func (s *State) emit(d Decision) {
	d.Time = s.now
	s.out = append(s.out, d)
}

func (s *State) newLaunch(l Launch, f flight) LaunchID {
	s.nextID++
	l.ID = s.nextID
	f.l = l
	f.at = s.now
	s.flights.put(l.ID, &f)
	s.stats.Launches++
	s.emit(Decision{Kind: DecLaunch, Launch: l})
	return l.ID
}

// LaunchHP launches c's next kernel in Plain form on its stream. It returns
// false when c has nothing to launch.
func (s *State) LaunchHP(c *HPClient) (LaunchID, bool) {
	k, ki := c.Next()
	if k == nil {
		return 0, false
	}
	id := s.launchHP(c, ki, Launch{Client: c.id, Kernel: ki, Stream: c.id, Form: gpu.Plain})
	return id, true
}

func (s *State) launchHP(c *HPClient, ki int, l Launch) LaunchID {
	r := &c.reqs[c.launchReq]
	if ki == 0 {
		c.launchV, _ = c.nextVariant()
		r.v = c.launchV
		if len(c.inflight) == 0 {
			r.start, r.started = s.now, true
		}
	}
	l.Variant = c.launchV
	id := s.newLaunch(l, flight{req: r.id})
	c.inflight = append(c.inflight, id)
	s.stats.HPLaunches++
	c.launchK++
	if c.launchK == len(c.vars[c.launchV].prof.Kernels) {
		c.launchReq += c.vars[c.launchV].reqs
		c.launchK = 0
	}
	return id
}

// CanPad reports whether b's head kernel may fill a padded launch on c's
// stream now: b is running, and all its launches in flight are pads on
// c's stream (pads of one stream run in order, so they may continue the
// same body instance one after another).
func (s *State) CanPad(c *HPClient, b *BEClient) bool {
	if !b.ready || s.stopping || b.nOwn > 0 || b.nResume > 0 {
		return false
	}
	if b.nPads > 0 && b.padStream != c.id {
		return false
	}
	k, _ := c.Next()
	return k != nil
}

// PadHP launches c's next kernel as a Padded launch whose remaining block
// slots run b's head kernel (blocks worker blocks, Resumable semantics). It
// returns false when CanPad is false or blocks < 1.
func (s *State) PadHP(c *HPClient, b *BEClient, blocks int) (LaunchID, bool) {
	if blocks < 1 || !s.CanPad(c, b) {
		return 0, false
	}
	_, ki := c.Next()
	if !b.started {
		s.emit(Decision{Kind: DecResetProgress, Client: b.id, Stream: c.id})
		b.started = true
	}
	id := s.launchHP(c, ki, Launch{Client: c.id, Kernel: ki, Stream: c.id, Form: gpu.Padded,
		Pad: Pad{Client: b.id, Kernel: b.head, Blocks: blocks}})
	s.flights.get(id).inst = b.inst
	b.inflight = append(b.inflight, id)
	b.nPads++
	b.padStream = c.id
	s.stats.PaddedLaunches++
	return id, true
}

// LaunchForm is the form LaunchBE would use for b's next kernel when asked
// for want: a kernel with saved progress continues in Resumable form, and
// an in-place kernel (profiles.TagInPlace: an optimizer update) asked for in
// Reset form runs Plain — a cut would leave part of it applied and the
// re-run would apply that part twice.
func (s *State) LaunchForm(b *BEClient, want gpu.Form) gpu.Form {
	if b.issued == b.head && b.started {
		return gpu.Resumable
	}
	if want == gpu.Reset && b.issued < len(b.prof.Kernels) && b.prof.Kernels[b.issued].InPlace() {
		return gpu.Plain
	}
	return want
}

// CanLaunchBE reports whether LaunchBE(b, form) would launch.
func (s *State) CanLaunchBE(b *BEClient, form gpu.Form) bool {
	if !b.ready || s.stopping || b.issued >= len(b.prof.Kernels) || b.nPads > 0 {
		return false
	}
	// An in-place kernel waits for the client's Reset launches to drain: a
	// cut of one of them voids every launch behind it, which would run the
	// in-place kernel again.
	if b.nReset > 0 && b.prof.Kernels[b.issued].InPlace() {
		return false
	}
	switch s.LaunchForm(b, form) {
	case gpu.Plain:
		return b.nResume == 0
	case gpu.Reset:
		return b.nResume == 0 && !b.raised
	case gpu.Resumable:
		return len(b.inflight) == 0 && !b.raised
	}
	return false
}

// LaunchBE launches b's next kernel on its own stream in the given form
// (Plain, Reset or Resumable; see LaunchForm). A fresh Resumable instance is
// preceded by a DecResetProgress. It returns false when CanLaunchBE is
// false: the client is not ready, the run is stopping, the rest of the
// iteration is in flight, a Reset or Resumable launch would meet a raised
// flag, or the launch would break one-instance-in-flight.
func (s *State) LaunchBE(b *BEClient, form gpu.Form) (LaunchID, bool) {
	id, ok := s.launchBE(b, form)
	if ok {
		s.flights.get(id).callEnd = true
		b.calls++
	}
	return id, ok
}

// launchBE is LaunchBE without counting a device call (LaunchBEChunk
// counts its chunk once).
func (s *State) launchBE(b *BEClient, form gpu.Form) (LaunchID, bool) {
	if !s.CanLaunchBE(b, form) {
		return 0, false
	}
	form = s.LaunchForm(b, form)
	f := flight{gen: b.gen, inst: b.inst}
	if form == gpu.Resumable {
		if !b.started {
			s.emit(Decision{Kind: DecResetProgress, Client: b.id, Stream: b.id})
			b.started = true
		}
		b.nResume++
	} else {
		b.nOwn++
		if form == gpu.Reset {
			b.nReset++
		}
	}
	id := s.newLaunch(Launch{Client: b.id, Kernel: b.issued, Stream: b.id, Form: form}, f)
	b.queued += b.prof.Kernels[b.issued].Duration()
	b.issued++
	b.inflight = append(b.inflight, id)
	s.stats.BELaunches++
	return id, true
}

// Preempt raises b's flag. If flag-sensitive launches (Reset, Resumable)
// of b are in flight, a preemption record opens; it closes when the last
// of them completes. It returns false if the flag was already raised.
func (s *State) Preempt(b *BEClient) bool {
	if b.raised {
		return false
	}
	s.raise(b)
	s.stats.Preemptions++
	var waiting []LaunchID
	for _, id := range b.inflight {
		if f := s.flights.get(id); f.l.Form == gpu.Reset || f.l.Form == gpu.Resumable {
			waiting = append(waiting, id)
		}
	}
	if len(waiting) > 0 {
		b.opens = append(b.opens, &openPreemption{
			rec:     PreemptionRecord{Client: b.id, Decided: s.now, Launches: len(waiting)},
			waiting: waiting,
		})
	}
	return true
}

func (s *State) raise(b *BEClient) {
	b.raised = true
	s.emit(Decision{Kind: DecRaise, Client: b.id})
}

// Resume lowers b's flag. It returns false if it was not raised.
func (s *State) Resume(b *BEClient) bool {
	if !b.raised {
		return false
	}
	b.raised = false
	s.emit(Decision{Kind: DecLower, Client: b.id})
	return true
}

// describe summarises the state for errors and scripts.
func (s *State) describe() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "t=%s", us(s.now))
	if s.stopping {
		sb.WriteString(" stopping")
	}
	for _, c := range s.hp {
		fmt.Fprintf(&sb, "; %s: %d requests, %d in flight", c.id, len(c.reqs), len(c.inflight))
		if k, ki := c.Next(); k != nil {
			fmt.Fprintf(&sb, ", next k%d", ki)
		}
	}
	for _, b := range s.be {
		fmt.Fprintf(&sb, "; %s:", b.id)
		if !b.ready && b.runs == 0 {
			sb.WriteString(" not ready")
			continue
		}
		if !b.ready {
			sb.WriteString(" paused")
		}
		fmt.Fprintf(&sb, " iter %d head k%d issued k%d in flight %d", b.iter, b.head, b.issued, len(b.inflight))
		if b.budget > 0 {
			fmt.Fprintf(&sb, " run %d/%d", b.iter-b.runStart, b.budget)
		}
		if b.raised {
			sb.WriteString(" flag raised")
		}
		if b.partial {
			sb.WriteString(" partial")
		}
	}
	return sb.String()
}

// Transitions: what the core's events do to the state (Core.apply).

func (s *State) advance(t time.Duration) {
	if t > s.now {
		s.now = t
	}
}

// checkOrder refuses a completion that overtakes an earlier launch on the
// same stream: streams run in order, so it means the driver is confused.
func (s *State) checkOrder(f *flight) error {
	var q []LaunchID
	if f.l.Stream.Class == HP {
		q = s.hp[f.l.Stream.Index].inflight
	} else {
		q = s.be[f.l.Stream.Index].inflight
	}
	if len(q) == 0 || q[0] != f.l.ID {
		return fmt.Errorf("%w: L%d completed before earlier launches on stream %s (%v)", ErrEvent, f.l.ID, f.l.Stream, q)
	}
	return nil
}

func (s *State) checkOutcome(f *flight, o Outcome) error {
	ok := false
	switch f.l.Form {
	case gpu.Plain:
		ok = o == Finished
	case gpu.Reset:
		ok = o == Finished || o == Cut
	case gpu.Resumable, gpu.Padded:
		ok = o == Finished || o == Preempted
	}
	if !ok {
		return fmt.Errorf("%w: L%d is a %s launch and cannot end %s", ErrEvent, f.l.ID, f.l.Form, o)
	}
	return nil
}

func (s *State) completeHP(f *flight, t time.Duration) {
	c := s.hp[f.l.Client.Index]
	c.inflight = c.inflight[1:]
	r := &c.reqs[0]
	r.done++
	if r.done == len(c.vars[r.v].prof.Kernels) {
		n, start := c.vars[r.v].reqs, r.start
		for _, m := range c.reqs[:n] {
			s.emit(Decision{Kind: DecRequestDone, Request: RequestRecord{
				Client: c.id, ID: m.id, Arrival: m.arrival, Start: start, End: t, Batch: n}})
		}
		s.stats.Requests += n
		c.reqs = c.reqs[n:]
		c.launchReq -= n
		if len(c.reqs) == 0 {
			s.hpBusy--
			if s.hpBusy == 0 {
				s.hpIdleSince = t
				s.stats.HPBusy += t - s.hpBusySince
			}
		}
	}
	// The next launch on the stream starts now; if it begins a pass, that
	// is its first request's start.
	if len(c.inflight) > 0 {
		nf := s.flights.get(c.inflight[0])
		if nf.l.Kernel == 0 {
			for i := range c.reqs {
				if c.reqs[i].id == nf.req && !c.reqs[i].started {
					c.reqs[i].start, c.reqs[i].started = t, true
				}
			}
		}
	}
}

func (s *State) completeBE(f *flight, t time.Duration, o Outcome) {
	var b *BEClient
	if f.l.Form == gpu.Padded {
		b = s.be[f.l.Pad.Client.Index]
	} else {
		b = s.be[f.l.Client.Index]
	}
	b.inflight = dropID(b.inflight, f.l.ID)
	if f.callEnd {
		b.calls--
	}
	if f.l.Form != gpu.Padded {
		b.queued -= b.prof.Kernels[f.l.Kernel].Duration()
	}
	// Close preemption records waiting for this launch.
	b.opens = slices.DeleteFunc(b.opens, func(op *openPreemption) bool {
		n := len(op.waiting)
		op.waiting = slices.DeleteFunc(op.waiting, func(id LaunchID) bool { return id == f.l.ID })
		if len(op.waiting) < n && t > op.rec.Stopped {
			op.rec.Stopped = t
		}
		if len(op.waiting) == 0 {
			if op.rec.Stopped < op.rec.Decided {
				op.rec.Stopped = op.rec.Decided
			}
			s.emit(Decision{Kind: DecPreemptionDone, Client: b.id, Preemption: op.rec})
			return true
		}
		return false
	})
	switch f.l.Form {
	case gpu.Plain, gpu.Reset:
		b.nOwn--
		if f.l.Form == gpu.Reset {
			b.nReset--
		}
		if f.gen != b.gen {
			s.stats.Cuts++ // void: it ran after a cut kernel and must re-run
			return
		}
		if o == Cut {
			s.stats.Cuts++
			b.gen++
			b.issued = f.l.Kernel
			return
		}
		s.finishBE(b, f.l.Kernel, t)
	case gpu.Resumable:
		b.nResume--
		if o == Finished {
			s.finishBE(b, f.l.Kernel, t)
			return
		}
		s.stats.Preempted++
		b.partial = true
		b.issued = b.head
	case gpu.Padded:
		b.nPads--
		if f.inst != b.inst {
			return // the body finished in an earlier pad
		}
		if o == Finished {
			s.finishBE(b, f.l.Pad.Kernel, t)
			return
		}
		s.stats.Preempted++
		b.partial = true
	}
}

func (s *State) finishBE(b *BEClient, k int, t time.Duration) {
	if k != b.head {
		// Stream order makes this impossible; keep the books sane anyway.
		return
	}
	d := b.prof.Kernels[k].Duration()
	b.iterWork += d
	s.stats.BEWork += d
	s.stats.BEWorkByClient[b.id.Index] += d
	if s.hpBusy > 0 {
		s.stats.BEWorkHPBusy += d
	}
	s.stats.BEKernels++
	b.head++
	b.issued = max(b.issued, b.head)
	b.inst++
	b.started, b.partial = false, false
	if b.head == len(b.prof.Kernels) {
		s.emit(Decision{Kind: DecIterationDone, Client: b.id, Iteration: IterationRecord{
			Client: b.id, N: b.iter, Start: b.iterStart, End: t, Work: b.iterWork}})
		s.stats.Iterations++
		b.iter++
		b.iterStart, b.iterWork = t, 0
		b.head, b.issued = 0, 0
		if b.budget > 0 && b.iter-b.runStart >= b.budget {
			// The run's budget is spent: stop here, inside the event
			// that completed the last iteration, so the policy (which
			// runs after it) cannot launch the next one.
			b.ready = false
		}
	}
}

// startBE starts a run of b (which is not ready and has nothing in
// flight) at a fresh iteration. What the previous run left unfinished is
// dropped: the kernels of a partly done iteration that did finish stay in
// the work counters (they ran) but no iteration record is emitted for
// them, and the fresh iteration reuses the iteration number. A kernel with
// saved progress starts over: started is cleared, so its next resumable
// or padded instance is preceded by a DecResetProgress; the generation and
// instance counters move on so nothing from before can be taken for the
// new run's work.
func (s *State) startBE(b *BEClient, t time.Duration, budget int) {
	b.head, b.issued = 0, 0
	b.started, b.partial = false, false
	b.gen++
	b.inst++
	b.iterStart, b.iterWork = t, 0
	b.budget, b.runStart = budget, b.iter
	b.runs++
	b.ready = true
}

// dropID removes id from ids, keeping launch order. ids holds each launch
// once; completions mostly come in launch order (a stream runs its kernels
// in order), so the head is tried first and dropped without moving the
// rest: a BE client that queued a whole iteration (hundreds of launches)
// pays O(1), not O(n), per completion.
func dropID(ids []LaunchID, id LaunchID) []LaunchID {
	if len(ids) > 0 && ids[0] == id {
		return ids[1:]
	}
	if i := slices.Index(ids, id); i >= 0 {
		return slices.Delete(ids, i, i+1)
	}
	return ids
}
