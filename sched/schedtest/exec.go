package schedtest

import (
	"fmt"
	"time"

	"atoll/gpu"
	"atoll/sched"
)

// Exec drives a Core with a small virtual device: every stream runs its
// launches in order, streams run side by side without contention, a kernel
// takes its profiled duration, and flags act as the forms say (a Reset
// launch under a raised flag is cut, a Resumable one exits after Stop with
// its remaining time saved, a pad runs its BE body for as long as the HP
// body). It is a test bed for invariants, not a performance model: use
// gpu/sim for that.
type Exec struct {
	Core *sched.Core
	// Stop is how long a flagged launch takes to notice (default 2µs).
	Stop time.Duration
	// Log receives every decision, in order.
	Log []sched.Decision
	// Check, when set, runs after every step; its error stops the run.
	Check func(st *sched.State) error
	// Probe, when positive, feeds an EvTick at every multiple of it, so
	// Check also sees quiet stretches.
	Probe time.Duration
	// Iterations, when set, is each BE client's iteration budget for the
	// EvReady that Run sends at 0 (missing or 0: unlimited).
	Iterations []int
	// Control, when set, runs once per time step of Run (after the
	// completions, arrivals, stop and tick of that time) and returns
	// extra events to feed then: EvPause, EvReady restarts, ... An event
	// with a zero Time gets the current time. An event the core refuses
	// stops the run with its error.
	Control func(st *sched.State, now time.Duration) []sched.Event

	now     time.Duration
	streams map[sched.ClientID]*execStream
	raised  map[int]time.Duration // BE index -> raise time
	rem     map[int]time.Duration // BE index -> remaining time of the resumable instance (<0: fresh)
}

type execStream struct {
	items []*execItem
}

type execItem struct {
	reset   bool // a progress reset for client be
	be      int
	l       sched.Launch
	ready   time.Duration
	started bool
	start   time.Duration
	end     time.Duration
	outcome sched.Outcome
}

// Run feeds arrivals (per HP client, ascending), BE ready at 0 and a stop
// at stop, then drains. It returns an error if the core refuses an event or
// the run does not drain within limit.
func (e *Exec) Run(arrivals [][]time.Duration, stop, limit time.Duration) error {
	if e.Stop == 0 {
		e.Stop = 2 * time.Microsecond
	}
	e.streams = map[sched.ClientID]*execStream{}
	e.raised = map[int]time.Duration{}
	e.rem = map[int]time.Duration{}
	st := e.Core.State()
	next := make([]int, len(arrivals))
	for i := range st.BE() {
		ev := sched.Event{Kind: sched.EvReady, Client: sched.BEClientID(i)}
		if i < len(e.Iterations) {
			ev.Iterations = e.Iterations[i]
		}
		if err := e.step(ev); err != nil {
			return err
		}
	}
	stopped := false
	for {
		// The earliest thing that happens next.
		t := time.Duration(-1)
		consider := func(c time.Duration) {
			if t < 0 || c < t {
				t = c
			}
		}
		for i, a := range arrivals {
			if next[i] < len(a) && a[next[i]] < stop {
				consider(a[next[i]])
			}
		}
		if w, ok := e.Core.NextWake(); ok {
			consider(w)
		}
		if !stopped {
			consider(stop)
		}
		probe := time.Duration(-1)
		if e.Probe > 0 && !e.Core.Quiescent() || e.Probe > 0 && !stopped {
			probe = (e.now/e.Probe + 1) * e.Probe
			consider(probe)
		}
		for _, s := range e.streams {
			if len(s.items) > 0 && s.items[0].started {
				consider(s.items[0].end)
			}
		}
		if t < 0 {
			if e.Core.Quiescent() {
				return nil
			}
			return fmt.Errorf("schedtest: stuck: %s", e.Core.Describe())
		}
		if t > limit {
			return fmt.Errorf("schedtest: not drained by %v: %s", limit, e.Core.Describe())
		}
		e.now = max(e.now, t)
		// Completions first, in launch order.
		for {
			var best *execStream
			for _, s := range e.streams {
				if len(s.items) > 0 && s.items[0].started && s.items[0].end <= e.now {
					if best == nil || s.items[0].l.ID < best.items[0].l.ID {
						best = s
					}
				}
			}
			if best == nil {
				break
			}
			it := best.items[0]
			best.items = best.items[1:]
			if it.reset {
				continue
			}
			if err := e.step(sched.Event{Kind: sched.EvComplete, Time: it.end, Launch: it.l.ID, Outcome: it.outcome}); err != nil {
				return err
			}
		}
		for i, a := range arrivals {
			for next[i] < len(a) && a[next[i]] <= e.now && a[next[i]] < stop {
				if err := e.step(sched.Event{Kind: sched.EvArrive, Time: a[next[i]], Client: sched.HPClientID(i), Request: next[i]}); err != nil {
					return err
				}
				next[i]++
			}
		}
		if !stopped && e.now >= stop {
			stopped = true
			if err := e.step(sched.Event{Kind: sched.EvStop, Time: stop}); err != nil {
				return err
			}
		}
		if w, ok := e.Core.NextWake(); ok && w <= e.now || e.now == probe {
			if err := e.step(sched.Event{Kind: sched.EvTick, Time: e.now}); err != nil {
				return err
			}
		}
		if e.Control != nil {
			for _, ev := range e.Control(st, e.now) {
				if err := e.step(ev); err != nil {
					return err
				}
			}
		}
		e.startHeads()
	}
}

func (e *Exec) step(ev sched.Event) error {
	if ev.Time == 0 {
		ev.Time = e.now
	}
	if err := e.Core.Step(ev); err != nil {
		return err
	}
	for _, d := range e.Core.Decisions() {
		e.Log = append(e.Log, d)
		e.apply(d)
	}
	e.startHeads()
	if e.Check != nil {
		if err := e.Check(e.Core.State()); err != nil {
			return fmt.Errorf("after %s at %v: %w", ev.Kind, ev.Time, err)
		}
	}
	return nil
}

func (e *Exec) stream(id sched.ClientID) *execStream {
	s := e.streams[id]
	if s == nil {
		s = &execStream{}
		e.streams[id] = s
	}
	return s
}

func (e *Exec) apply(d sched.Decision) {
	switch d.Kind {
	case sched.DecLaunch:
		s := e.stream(d.Launch.Stream)
		s.items = append(s.items, &execItem{l: d.Launch, ready: e.now})
	case sched.DecResetProgress:
		s := e.stream(d.Stream)
		s.items = append(s.items, &execItem{reset: true, be: d.Client.Index, ready: e.now, l: sched.Launch{ID: 1 << 62}})
	case sched.DecRaise:
		e.raised[d.Client.Index] = e.now
		// Running flag-sensitive launches of the client stop soon.
		if s := e.streams[d.Client]; s != nil && len(s.items) > 0 {
			it := s.items[0]
			if it.started && it.end > e.now {
				switch it.l.Form {
				case gpu.Reset:
					it.end, it.outcome = min(it.end, e.now+e.Stop), sched.Cut
				case gpu.Resumable:
					e.rem[d.Client.Index] -= e.now - it.start
					it.end, it.outcome = e.now+e.Stop, sched.Preempted
				}
			}
		}
	case sched.DecLower:
		delete(e.raised, d.Client.Index)
	}
}

func (e *Exec) startHeads() {
	st := e.Core.State()
	for _, s := range e.streams {
		for len(s.items) > 0 && !s.items[0].started {
			it := s.items[0]
			it.started = true
			it.start = max(e.now, it.ready)
			if it.reset {
				e.rem[it.be] = -1
				it.end = it.start
				s.items = s.items[1:]
				continue
			}
			l := it.l
			if l.Client.Class == sched.HP {
				k := &st.HP()[l.Client.Index].Variant(l.Variant).Kernels[l.Kernel]
				it.end = it.start + k.Duration()
				if l.Form == gpu.Padded {
					b := l.Pad.Client.Index
					bk := &st.BE()[b].Profile().Kernels[l.Pad.Kernel]
					if e.rem[b] < 0 {
						e.rem[b] = bk.Duration()
					}
					if e.rem[b] <= k.Duration() {
						it.outcome = sched.Finished
						e.rem[b] = 0
					} else {
						it.outcome = sched.Preempted
						e.rem[b] -= k.Duration()
					}
				}
				break
			}
			b := l.Client.Index
			k := &st.BE()[b].Profile().Kernels[l.Kernel]
			_, up := e.raised[b]
			switch l.Form {
			case gpu.Plain:
				it.end = it.start + k.Duration()
			case gpu.Reset:
				if up {
					it.end, it.outcome = it.start+e.Stop, sched.Cut
				} else {
					it.end = it.start + k.Duration()
				}
			case gpu.Resumable:
				if e.rem[b] < 0 {
					e.rem[b] = k.Duration()
				}
				if up {
					it.end, it.outcome = it.start+e.Stop, sched.Preempted
				} else {
					it.end = it.start + e.rem[b]
				}
			}
			break
		}
	}
}
