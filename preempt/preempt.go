package preempt

import (
	"errors"
	"fmt"
	"time"

	"atoll/gpu"
	"atoll/padding"
	"atoll/profiles"
	"atoll/sched"
)

// ErrConfig is wrapped by errors about the policy's parameters.
var ErrConfig = errors.New("preempt: invalid parameter")

// Defaults.
const (
	// DefaultWindow is REEF's BE in-flight window.
	DefaultWindow = 2
	// DefaultHPWindow is how many HP launches a padding policy keeps in
	// flight per HP client: enough that the stream never waits for a
	// launch (with 2, runs of kernels shorter than the launch latency left
	// the HP stream idle: +5% p50 on ResNet-50 in the simulator), few
	// enough that padding is still chosen shortly before the kernel runs.
	DefaultHPWindow = 4
	// DefaultResumeAfter is how long HP must be idle before BE resumes
	// (Tally: 0.1 ms).
	DefaultResumeAfter = 100 * time.Microsecond
)

// PreemptAll raises the flag of every BE client with a flag-sensitive
// launch (Reset or Resumable) in flight, or of every client when all is set.
func PreemptAll(st *sched.State, all bool) {
	for _, b := range st.BE() {
		if all || b.PreemptibleInFlight() > 0 {
			st.Preempt(b)
		}
	}
}

// IdleFor reports whether no HP request has been in flight for at least d
// (or ever). When HP is idle but not yet for d, it asks for a wake at the
// moment it will be.
func IdleFor(st *sched.State, now, d time.Duration, seenHP bool) bool {
	if st.HPBusy() {
		return false
	}
	if !seenHP || d <= 0 {
		return true
	}
	at := st.HPIdleSince() + d
	if now >= at {
		return true
	}
	st.WakeAt(at)
	return false
}

// LaunchHP launches c's waiting kernels while fewer than window are in
// flight (window <= 0: all), padding each with BE work when pad is set and
// the padding selector finds a fit among the BE head kernels keep passes
// (nil: all). A request that fits in the window whole starts only once it
// fits: its kernels then launch in one step, which the driver submits as
// one graph (sched/graphs.go), instead of one kernel per completion of
// the requests ahead of it.
func LaunchHP(st *sched.State, c *sched.HPClient, window int, pad bool, keep func(hp, be *profiles.Kernel) bool) {
	for window <= 0 || c.InFlight() < window {
		k, ki := c.Next()
		if k == nil {
			return
		}
		if n := len(c.Pass().Kernels); ki == 0 && window > 0 && n <= window && c.InFlight()+n > window {
			return
		}
		if pad && padding.Try(st, c, keep) {
			continue
		}
		if _, ok := st.LaunchHP(c); !ok {
			return
		}
	}
}

// REEF is REEF's policy: reset preemption with an in-flight window, plus
// dynamic kernel padding.
type REEF struct {
	// Window is the BE in-flight window per client (default 2).
	Window int
	// HPWindow is the HP launches in flight per client (default 4).
	HPWindow int
	// NoPadding turns padding off (reset preemption alone).
	NoPadding bool
}

// New returns REEF's policy with defaults.
func New() *REEF { return &REEF{} }

func (p *REEF) Name() string              { return "reef" }
func (p *REEF) Streams() sched.StreamPlan { return sched.PriorityPlan }

func (p *REEF) Start(st *sched.State) error {
	if p.Window < 0 || p.HPWindow < 0 {
		return fmt.Errorf("%w: window %d, hp-window %d (want >= 0; 0 = default)", ErrConfig, p.Window, p.HPWindow)
	}
	if p.Window == 0 {
		p.Window = DefaultWindow
	}
	if p.HPWindow == 0 {
		p.HPWindow = DefaultHPWindow
	}
	return nil
}

// Schedule: while an HP request is in flight, every BE flag is up and BE
// runs only as padding of HP kernels. When HP is idle, a client whose
// launches have all drained gets its flag lowered and runs again in Reset
// form through the window, starting with the kernel that was cut.
func (p *REEF) Schedule(st *sched.State, _ time.Duration) {
	if st.HPBusy() {
		PreemptAll(st, true)
		for _, c := range st.HP() {
			LaunchHP(st, c, p.HPWindow, !p.NoPadding, nil)
		}
		return
	}
	for _, b := range st.BE() {
		if b.Raised() {
			if b.InFlight() > 0 || st.Stopping() {
				continue
			}
			st.Resume(b)
		}
		for b.InFlight() < p.Window {
			if _, ok := st.LaunchBE(b, gpu.Reset); !ok {
				break
			}
		}
	}
}
