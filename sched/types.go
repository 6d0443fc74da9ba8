package sched

import (
	"errors"
	"fmt"
	"time"

	"atoll/gpu"
)

// Sentinel errors. Everything this package returns wraps one of them, so
// callers can use errors.Is.
var (
	// ErrConfig: a Config, Workload or Options that cannot be run (no
	// clients, an empty profile, a nil policy, ...). The message names the
	// field to fix.
	ErrConfig = errors.New("sched: invalid configuration")
	// ErrEvent: an event the core cannot accept (unknown launch, a
	// completion out of stream order, an unknown client). It means the
	// driver and the core disagree; the driver should stop.
	ErrEvent = errors.New("sched: invalid event")
	// ErrDevice: a gpu.Device call failed during Run. The message names the
	// call and the launch or client it was for.
	ErrDevice = errors.New("sched: device call failed")
	// ErrStuck: Run found no way to make progress (nothing in flight, work
	// pending, nothing to wait for). The message describes the stuck state;
	// it points at a policy bug.
	ErrStuck = errors.New("sched: no progress possible")
)

// Class is a client's service class.
type Class uint8

const (
	// HP is a latency-critical (real-time) client: open-loop requests.
	HP Class = iota
	// BE is a best-effort client: a closed loop of iterations.
	BE
)

func (c Class) String() string {
	if c == HP {
		return "hp"
	}
	return "be"
}

// ClientID names one client: its class and its index among the clients of
// that class in the Workload (or Config).
type ClientID struct {
	Class Class
	Index int
}

func (c ClientID) String() string { return fmt.Sprintf("%s%d", c.Class, c.Index) }

// HPClientID and BEClientID are shorthands.
func HPClientID(i int) ClientID { return ClientID{HP, i} }
func BEClientID(i int) ClientID { return ClientID{BE, i} }

// LaunchID identifies one launch decision; IDs start at 1 and increase.
type LaunchID int64

// EventKind says what happened.
type EventKind uint8

const (
	// EvArrive: an HP request arrived (Client, Request, Time).
	EvArrive EventKind = iota
	// EvReady: a BE client starts its closed loop (Client, Time,
	// Iterations). Iterations is the run's budget: once that many
	// iterations have completed since this EvReady, the core marks the
	// client not ready in the same Step, before the policy runs, so no
	// kernel of the next iteration is launched; 0 means unlimited. On a
	// client that is not ready (never started, paused, or done with its
	// budget) it starts a fresh run at a fresh iteration: the iteration
	// left unfinished is dropped (see State's BE lifecycle notes). The
	// client must have nothing in flight then (drivers wait for
	// BEClient.InFlight to reach 0). On a client that is ready it changes
	// nothing, its budget included.
	EvReady
	// EvComplete: a launch completed on the device (Launch, Time, Outcome).
	EvComplete
	// EvFlagObserved: the device acknowledged a BE client's raised flag
	// (Client, Time): the first block that saw it. Optional; it only adds
	// Observed to the open preemption record.
	EvFlagObserved
	// EvTick: time passed (Time). Drivers send one when NextWake is due.
	EvTick
	// EvStop: the run ends (Time): no more BE launches; BE flags are
	// raised so in-flight BE work drains quickly. HP requests already
	// arrived are still served.
	EvStop
	// EvPause: a BE client stops at once (Client, Time): it is marked not
	// ready, so nothing of it is launched any more (own stream or pad).
	// Its launches in flight complete normally and are accounted (they
	// may even finish the iteration); its flag is left as it is, for the
	// policy to lower as usual. A later EvReady restarts it. Pausing a
	// client that is not ready changes nothing.
	EvPause
)

var eventNames = [...]string{"arrive", "ready", "complete", "flag-observed", "tick", "stop", "pause"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", k)
}

// Outcome is how a completed launch ended, for the body that can be
// preempted (the BE body; for a Padded launch the pad's BE body).
type Outcome uint8

const (
	// Finished: every logical block of the body ran. Plain launches and HP
	// kernels always finish.
	Finished Outcome = iota
	// Preempted: a Resumable body (or a pad's BE body) exited with its
	// progress saved in the client's counter; a later launch continues it.
	Preempted
	// Cut: a Reset launch saw its flag raised and some blocks exited
	// without working: the kernel must be re-run from its start.
	Cut
)

var outcomeNames = [...]string{"finished", "preempted", "cut"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// Event is one input to the core.
type Event struct {
	Kind    EventKind
	Time    time.Duration // device clock
	Client  ClientID      // EvArrive, EvReady, EvFlagObserved, EvPause
	Request int           // EvArrive: the request's id (unique per client)
	// Iterations is EvReady's iteration budget for the run it starts
	// (0 = unlimited; negative is refused).
	Iterations int
	Launch     LaunchID // EvComplete
	Outcome    Outcome  // EvComplete
}

// DecisionKind says what the driver must do.
type DecisionKind uint8

const (
	// DecLaunch: enqueue Launch on the stream of Launch.Stream.
	DecLaunch DecisionKind = iota
	// DecRaise: store 1 into Client's preemption flag.
	DecRaise
	// DecLower: store 0 into Client's preemption flag.
	DecLower
	// DecResetProgress: zero Client's progress counter, enqueued on the
	// stream of Stream, before a fresh instance of a resumable body.
	DecResetProgress
	// DecRequestDone: an HP request finished (Request holds the record).
	DecRequestDone
	// DecIterationDone: a BE iteration finished (Iteration).
	DecIterationDone
	// DecPreemptionDone: every BE launch in flight when a preemption was
	// decided has stopped (Preemption).
	DecPreemptionDone
)

var decisionNames = [...]string{"launch", "raise", "lower", "reset-progress", "request-done", "iteration-done", "preemption-done"}

func (k DecisionKind) String() string {
	if int(k) < len(decisionNames) {
		return decisionNames[k]
	}
	return fmt.Sprintf("decision(%d)", k)
}

// Launch is a launch decision.
type Launch struct {
	ID     LaunchID
	Client ClientID // owner of the body: the HP client for Padded launches
	Kernel int      // index into the kernels of the owner's pass (Variant)
	// Variant is the HP pass the kernel belongs to: 0 is the client's
	// profile, v > 0 its v-th batched profile (HPWorkload.Batched).
	Variant int
	Stream  ClientID // whose stream it goes on
	Form    gpu.Form
	// Pad is set for Form == gpu.Padded: the BE body that fills the
	// remaining block slots, with Resumable semantics.
	Pad Pad
}

// Pad is the BE part of a padded launch.
type Pad struct {
	Client ClientID
	Kernel int
	Blocks int // worker blocks of the BE body
}

// Decision is one output of the core.
type Decision struct {
	Kind       DecisionKind
	Time       time.Duration // core time when decided
	Client     ClientID      // DecRaise, DecLower, DecResetProgress
	Stream     ClientID      // DecResetProgress
	Launch     Launch        // DecLaunch
	Request    RequestRecord
	Iteration  IterationRecord
	Preemption PreemptionRecord
}

func (d Decision) String() string {
	switch d.Kind {
	case DecLaunch:
		l := d.Launch
		s := fmt.Sprintf("launch L%d %s k%d on %s %s", l.ID, l.Client, l.Kernel, l.Stream, l.Form)
		if l.Form == gpu.Padded {
			s += fmt.Sprintf(" pad %s k%d x%d", l.Pad.Client, l.Pad.Kernel, l.Pad.Blocks)
		}
		return s
	case DecRaise:
		return "raise flag " + d.Client.String()
	case DecLower:
		return "lower flag " + d.Client.String()
	case DecResetProgress:
		return fmt.Sprintf("reset progress %s on %s", d.Client, d.Stream)
	case DecRequestDone:
		r := d.Request
		return fmt.Sprintf("request %s#%d done arrival=%s start=%s end=%s latency=%s",
			r.Client, r.ID, us(r.Arrival), us(r.Start), us(r.End), us(r.Latency()))
	case DecIterationDone:
		it := d.Iteration
		return fmt.Sprintf("iteration %s#%d done start=%s end=%s work=%s", it.Client, it.N, us(it.Start), us(it.End), us(it.Work))
	case DecPreemptionDone:
		p := d.Preemption
		s := fmt.Sprintf("preemption %s done decided=%s stopped=%s latency=%s launches=%d",
			p.Client, us(p.Decided), us(p.Stopped), us(p.Latency()), p.Launches)
		if p.Observed > 0 {
			s += " observed=" + us(p.Observed)
		}
		return s
	}
	return d.Kind.String()
}

// us formats a duration in microseconds the way scripts write it.
func us(d time.Duration) string {
	if d%time.Microsecond == 0 {
		return fmt.Sprintf("%dµs", d/time.Microsecond)
	}
	return fmt.Sprintf("%.3fµs", float64(d)/float64(time.Microsecond))
}

// FormatTime formats a device time as the scripts print it ("120µs").
func FormatTime(d time.Duration) string { return us(d) }

// RequestRecord is one finished HP request.
type RequestRecord struct {
	Client  ClientID
	ID      int
	Arrival time.Duration // scheduled arrival
	Start   time.Duration // its first kernel started as the core has it: launch decided with the client idle, else the completion before it (device clock)
	End     time.Duration // its last kernel completed
	// Batch is the number of requests its pass served together (1: it ran
	// alone; HPWorkload.Batched); they share Start and End.
	Batch int
	// Solo is the sum of its kernels' profiled solo durations and Causes
	// splits the rest of its latency (Latency() == Solo + Causes.Sum()).
	// Drivers fill them; the core leaves them zero.
	Solo   time.Duration
	Causes Causes
}

// Latency is End − Arrival (queueing included).
func (r RequestRecord) Latency() time.Duration { return r.End - r.Arrival }

// Service is End − Start.
func (r RequestRecord) Service() time.Duration { return r.End - r.Start }

// IterationRecord is one finished BE iteration.
type IterationRecord struct {
	Client ClientID
	N      int // iteration number, from 0
	Start  time.Duration
	End    time.Duration
	Work   time.Duration // sum of the profiled solo durations of its kernels
}

// PreemptionRecord is one preemption of a BE client.
type PreemptionRecord struct {
	Client   ClientID
	Decided  time.Duration // core time the flag was raised
	Stopped  time.Duration // the last preempted launch completed
	Observed time.Duration // EvFlagObserved time, or 0 if none came
	Launches int           // flag-sensitive launches in flight when decided
}

// Latency is Stopped − Decided, or zero if everything had already stopped.
func (p PreemptionRecord) Latency() time.Duration { return max(p.Stopped-p.Decided, 0) }
