package sched

import (
	"fmt"
	"time"

	"atoll/gpu"
	"atoll/profiles"
)

// Config describes one run to the core.
type Config struct {
	Spec gpu.Spec            // the device's description (SMs, occupancy limits)
	HP   []*profiles.Profile // one per HP client: its request's kernel sequence
	// HPBatched, where set, gives HP client i the batched profiles
	// HPBatched[i] (HPWorkload.Batched).
	HPBatched [][]*profiles.Profile
	BE        []*profiles.Profile // one per BE client: its iteration's kernel sequence
	Policy    Policy
	// BEChunks cuts each BE client's iteration into chunks
	// (State.LaunchBEChunk; chunks.go). The driver sets it where BE
	// graphs are on; off, a chunk is one kernel.
	BEChunks bool
}

// Core is the scheduler: a pure state machine. Step feeds it one event; it
// runs the policy and queues decisions, which Decisions hands out. It has
// no goroutines, clocks or I/O; one goroutine owns it (the driver).
type Core struct {
	st     State
	policy Policy
}

// NewCore validates cfg and starts the policy.
func NewCore(cfg Config) (*Core, error) {
	if cfg.Policy == nil {
		return nil, fmt.Errorf("%w: no policy; pick one from policies.Names()", ErrConfig)
	}
	if cfg.Spec.SMs <= 0 {
		return nil, fmt.Errorf("%w: device spec %q has %d SMs", ErrConfig, cfg.Spec.Name, cfg.Spec.SMs)
	}
	if len(cfg.HP)+len(cfg.BE) == 0 {
		return nil, fmt.Errorf("%w: no clients; give at least one HP or BE profile", ErrConfig)
	}
	c := &Core{policy: cfg.Policy}
	s := &c.st
	s.spec = cfg.Spec
	for i, p := range cfg.HP {
		if err := ValidateProfile(p); err != nil {
			return nil, fmt.Errorf("HP client %d: %w", i, err)
		}
		vars, err := variants(p, cfg.hpBatched(i))
		if err != nil {
			return nil, fmt.Errorf("%w: HP client %d: %w", ErrConfig, i, err)
		}
		s.hp = append(s.hp, &HPClient{id: HPClientID(i), vars: vars})
	}
	for i, p := range cfg.BE {
		if err := ValidateProfile(p); err != nil {
			return nil, fmt.Errorf("BE client %d: %w", i, err)
		}
		b := &BEClient{id: BEClientID(i), prof: p}
		if cfg.BEChunks {
			b.chunkEnd = chunkEnds(p)
		}
		s.be = append(s.be, b)
	}
	s.stats.BEWorkByClient = make([]time.Duration, len(cfg.BE))
	if err := cfg.Policy.Start(s); err != nil {
		return nil, fmt.Errorf("%w: policy %s: %w", ErrConfig, cfg.Policy.Name(), err)
	}
	return c, nil
}

func (cfg Config) hpBatched(i int) []*profiles.Profile {
	if i < len(cfg.HPBatched) {
		return cfg.HPBatched[i]
	}
	return nil
}

// MaxBatched is the most batched profiles an HP client may have.
const MaxBatched = 8

// BatchSizes are the pass sizes a client serving up to n requests at once
// has beyond one (the requests of each, HPWorkload.Batched): the powers of
// two below n, and n.
func BatchSizes(n int) []int {
	var out []int
	for b := 2; b < n; b *= 2 {
		out = append(out, b)
	}
	if n > 1 {
		out = append(out, n)
	}
	return out
}

// variants are an HP client's passes: its profile for one request, then
// each batched profile, which must be the same model's inference at
// ascending batch sizes, each a multiple of the profile's.
func variants(p *profiles.Profile, batched []*profiles.Profile) ([]variant, error) {
	if len(batched) > MaxBatched {
		return nil, fmt.Errorf("%d batched profiles (at most %d)", len(batched), MaxBatched)
	}
	vars := []variant{{prof: p, reqs: 1}}
	for j, q := range batched {
		if err := ValidateProfile(q); err != nil {
			return nil, fmt.Errorf("batched profile %d: %w", j, err)
		}
		if q.Model != p.Model || q.GPU != p.GPU || q.Phase != p.Phase {
			return nil, fmt.Errorf("batched profile %d is %s/%s (%s); the client serves %s/%s (%s)", j, q.GPU, q.Model, q.Phase, p.GPU, p.Model, p.Phase)
		}
		last := vars[len(vars)-1]
		if p.Batch < 1 || q.Batch%p.Batch != 0 || q.Batch <= last.prof.Batch {
			return nil, fmt.Errorf("batched profile %d has batch %d; batched profiles need ascending multiples of the request's batch %d, above %d", j, q.Batch, p.Batch, last.prof.Batch)
		}
		vars = append(vars, variant{prof: q, reqs: q.Batch / p.Batch})
	}
	return vars, nil
}

// Policy is the core's policy.
func (c *Core) Policy() Policy { return c.policy }

// State is the core's state, for inspection (drivers, tests). Do not call
// its decision methods from outside a Policy.
func (c *Core) State() *State { return &c.st }

// Decisions returns the decisions queued since the last call and clears the
// queue. The returned slice is valid until the next Step, which reuses its
// storage (the launch path stays free of allocations).
func (c *Core) Decisions() []Decision {
	d := c.st.out
	c.st.out = d[:0]
	return d
}

// NextWake is the time of the EvTick the policy asked for, if any.
func (c *Core) NextWake() (time.Duration, bool) { return c.st.wake, c.st.wake > 0 }

// InFlight is the number of launches not yet completed.
func (c *Core) InFlight() int { return c.st.flights.n }

// InFlightIDs lists the launches not yet completed, in launch order.
func (c *Core) InFlightIDs() []LaunchID {
	return c.st.flights.ids()
}

// Flight returns the launch decision of an in-flight launch.
func (c *Core) Flight(id LaunchID) (Launch, bool) {
	f := c.st.flights.get(id)
	if f == nil {
		return Launch{}, false
	}
	return f.l, true
}

// Quiescent reports whether nothing is in flight and no HP request waits.
func (c *Core) Quiescent() bool { return c.st.flights.n == 0 && c.st.hpBusy == 0 }

// Describe summarises the state in one line (for errors and scripts).
func (c *Core) Describe() string { return c.st.describe() }

// Step feeds one event and runs the policy. Events should come in time
// order; an event earlier than the core's clock is accepted (drivers poll
// completions late) but does not move the clock back. An invalid event
// returns an error wrapping ErrEvent and changes nothing the policy sees.
func (c *Core) Step(ev Event) error {
	s := &c.st
	if err := c.apply(ev); err != nil {
		return err
	}
	if s.wake != 0 && s.now >= s.wake {
		s.wake = 0
	}
	c.policy.Schedule(s, s.now)
	return nil
}

func (c *Core) apply(ev Event) error {
	s := &c.st
	if ev.Time < 0 {
		return fmt.Errorf("%w: %s at negative time %v", ErrEvent, ev.Kind, ev.Time)
	}
	switch ev.Kind {
	case EvArrive:
		if ev.Client.Class != HP || ev.Client.Index < 0 || ev.Client.Index >= len(s.hp) {
			return fmt.Errorf("%w: arrival for unknown HP client %s", ErrEvent, ev.Client)
		}
		s.advance(ev.Time)
		hc := s.hp[ev.Client.Index]
		if len(hc.reqs) == 0 {
			if s.hpBusy == 0 {
				s.hpBusySince = ev.Time
			}
			s.hpBusy++
		}
		hc.reqs = append(hc.reqs, hpRequest{id: ev.Request, arrival: ev.Time})
	case EvReady:
		if ev.Client.Class != BE || ev.Client.Index < 0 || ev.Client.Index >= len(s.be) {
			return fmt.Errorf("%w: ready for unknown BE client %s", ErrEvent, ev.Client)
		}
		if ev.Iterations < 0 {
			return fmt.Errorf("%w: ready for %s with %d iterations (want >= 0; 0 = unlimited)", ErrEvent, ev.Client, ev.Iterations)
		}
		b := s.be[ev.Client.Index]
		if !b.ready && len(b.inflight) > 0 {
			return fmt.Errorf("%w: restart of BE client %s with %d launches in flight; send ready once they have completed", ErrEvent, ev.Client, len(b.inflight))
		}
		s.advance(ev.Time)
		if !b.ready {
			s.startBE(b, ev.Time, ev.Iterations)
		}
	case EvComplete:
		f := s.flights.get(ev.Launch)
		if f == nil {
			return fmt.Errorf("%w: completion of L%d, which is not in flight", ErrEvent, ev.Launch)
		}
		if err := s.checkOrder(f); err != nil {
			return err
		}
		if err := s.checkOutcome(f, ev.Outcome); err != nil {
			return err
		}
		s.advance(ev.Time)
		s.flights.del(ev.Launch)
		if f.l.Client.Class == HP {
			s.completeHP(f, ev.Time)
		}
		if f.l.Client.Class == BE || f.l.Form == gpu.Padded {
			s.completeBE(f, ev.Time, ev.Outcome)
		}
	case EvFlagObserved:
		if ev.Client.Class != BE || ev.Client.Index < 0 || ev.Client.Index >= len(s.be) {
			return fmt.Errorf("%w: flag observed for unknown BE client %s", ErrEvent, ev.Client)
		}
		s.advance(ev.Time)
		for _, o := range s.be[ev.Client.Index].opens {
			if o.rec.Observed == 0 {
				o.rec.Observed = ev.Time
			}
		}
	case EvPause:
		if ev.Client.Class != BE || ev.Client.Index < 0 || ev.Client.Index >= len(s.be) {
			return fmt.Errorf("%w: pause for unknown BE client %s", ErrEvent, ev.Client)
		}
		s.advance(ev.Time)
		s.be[ev.Client.Index].ready = false
	case EvTick:
		s.advance(ev.Time)
	case EvStop:
		s.advance(ev.Time)
		if !s.stopping {
			s.stopping = true
			for _, b := range s.be {
				if !b.raised && b.PreemptibleInFlight() > 0 {
					s.raise(b)
				}
			}
		}
	default:
		return fmt.Errorf("%w: unknown event kind %d", ErrEvent, ev.Kind)
	}
	return nil
}
