package orion

import (
	"errors"
	"fmt"
	"time"

	"atoll/gpu"
	"atoll/profiles"
	"atoll/sched"
	"atoll/streams"
)

// ErrConfig is wrapped by errors about Orion's parameters.
var ErrConfig = errors.New("orion: invalid parameter")

// DefaultDurFraction is DUR_THRESHOLD as a fraction of the HP client's solo
// request latency (Orion's artifact: about 2.5%).
const DefaultDurFraction = 0.025

// Policy is Orion's rule.
type Policy struct {
	// SMThreshold is SM_THRESHOLD: the largest SM need of a BE kernel
	// admitted beside a running HP kernel. Zero: the device's SM count.
	SMThreshold int
	// DurThreshold is DUR_THRESHOLD. Zero: DurFraction of the solo latency
	// of the longest HP client's request (sum of its profiled kernels).
	DurThreshold time.Duration
	// DurFraction is used when DurThreshold is zero; zero means
	// DefaultDurFraction.
	DurFraction float64
	// Chunks launches BE a whole chunk at a time while no HP request is in
	// flight (sched.State.LaunchBEChunk: one graph per chunk where the
	// driver records them), under the duration cap like single kernels.
	// Beside busy HP, admission stays per kernel. Not Orion as published
	// (it intercepts a framework's launches one by one): a variant that
	// gives Orion atoll's launch path, so that the two compare on
	// scheduling alone (orion:chunks=true).
	Chunks bool

	Cap Cap
	rr  int
}

// New returns Orion's policy with default thresholds.
func New() *Policy { return &Policy{} }

func (p *Policy) Name() string              { return "orion" }
func (p *Policy) Streams() sched.StreamPlan { return sched.PriorityPlan }

// Start fills the thresholds' defaults from the device and the HP profiles.
func (p *Policy) Start(st *sched.State) error {
	th, err := Resolve(st, p.SMThreshold, p.DurThreshold, p.DurFraction)
	if err != nil {
		return err
	}
	p.SMThreshold, p.DurThreshold = th.SMs, th.Dur
	p.Cap = Cap{Limit: th.Dur}
	return nil
}

// Thresholds are Orion's two parameters, resolved.
type Thresholds struct {
	SMs int
	Dur time.Duration
}

// Resolve resolves SM_THRESHOLD and DUR_THRESHOLD defaults for st.
func Resolve(st *sched.State, sms int, dur time.Duration, frac float64) (Thresholds, error) {
	if sms < 0 || dur < 0 || frac < 0 || frac > 1 {
		return Thresholds{}, fmt.Errorf("%w: sm-threshold %d, dur-threshold %v, dur-fraction %v (want sm >= 0, dur >= 0, 0 <= fraction <= 1)", ErrConfig, sms, dur, frac)
	}
	if sms == 0 {
		sms = st.Spec().SMs
	}
	if dur == 0 {
		if frac == 0 {
			frac = DefaultDurFraction
		}
		var solo time.Duration
		for _, c := range st.HP() {
			solo = max(solo, c.Profile().Total())
		}
		dur = time.Duration(float64(solo) * frac)
		if dur <= 0 {
			// No HP client: the cap never matters for latency; keep
			// it from draining after every kernel.
			dur = time.Duration(1<<62 - 1)
		}
	}
	return Thresholds{SMs: sms, Dur: dur}, nil
}

// Compatible is Orion's class test: different classes, or either unknown.
func Compatible(be, hp string) bool {
	if be == "" || hp == "" || be == profiles.ClassUnknown || hp == profiles.ClassUnknown {
		return true
	}
	return be != hp
}

// Admit is Orion's admission rule for BE kernel k while hpRunning is the HP
// kernel on the device (nil: none) and hpBusy says whether an HP request is
// in flight.
func Admit(spec gpu.Spec, k *profiles.Kernel, hpBusy bool, hpRunning *profiles.Kernel, smThreshold int) bool {
	if !hpBusy {
		return true
	}
	if sched.SMsNeeded(spec, k) > smThreshold {
		return false
	}
	return hpRunning == nil || Compatible(k.Class, hpRunning.Class)
}

// Cap is the DUR_THRESHOLD bookkeeping: Sum is the duration of BE kernels
// launched since the last full drain; once it reaches Limit, Draining holds
// until no BE launch is in flight.
type Cap struct {
	Limit    time.Duration
	Sum      time.Duration
	Draining bool
}

// Open reports whether a BE kernel may launch. When no BE work is in
// flight a full drain has happened: the sum restarts and a drain ends.
func (c *Cap) Open(beInFlight int) bool {
	if beInFlight == 0 {
		c.Draining, c.Sum = false, 0
	}
	return !c.Draining
}

// Fits reports whether a BE kernel of duration d may launch now. While an
// HP request is in flight it must fit under the cap (Sum + d <= Limit), so
// a kernel longer than the cap never runs beside HP; with HP idle any
// kernel fits (the cap then only bounds how much BE work is queued before
// the next drain).
func (c *Cap) Fits(d time.Duration, hpBusy bool) bool {
	return !hpBusy || c.Sum+d <= c.Limit
}

// Add counts a launched BE kernel of duration d.
func (c *Cap) Add(d time.Duration) {
	c.Sum += d
	if c.Sum >= c.Limit {
		c.Draining = true
	}
}

// BEInFlight is the number of BE launches in flight over all clients.
func BEInFlight(st *sched.State) int {
	n := 0
	for _, b := range st.BE() {
		n += b.InFlight()
	}
	return n
}

// Schedule launches all waiting HP kernels, then serves BE clients
// round-robin, one kernel per client per round, in Plain form, while Admit
// and the cap allow.
func (p *Policy) Schedule(st *sched.State, _ time.Duration) {
	streams.LaunchAllHP(st)
	be := st.BE()
	if len(be) == 0 {
		return
	}
	for progress := true; progress; {
		progress = false
		for i := range be {
			if !p.Cap.Open(BEInFlight(st)) {
				return
			}
			b := be[(p.rr+i)%len(be)]
			k, ki := b.Next()
			if k == nil || !st.CanLaunchBE(b, gpu.Plain) || st.LaunchForm(b, gpu.Plain) != gpu.Plain {
				continue
			}
			if !Admit(st.Spec(), k, st.HPBusy(), st.RunningHP(), p.SMThreshold) || !p.Cap.Fits(k.Duration(), st.HPBusy()) {
				continue
			}
			if p.Chunks && !st.HPBusy() {
				n := st.LaunchBEChunk(b)
				for _, lk := range b.Profile().Kernels[ki : ki+n] {
					p.Cap.Add(lk.Duration())
				}
				progress = progress || n > 0
				continue
			}
			st.LaunchBE(b, gpu.Plain)
			p.Cap.Add(k.Duration())
			progress = true
		}
		p.rr = (p.rr + 1) % len(be)
	}
}
