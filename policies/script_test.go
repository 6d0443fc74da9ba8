package policies_test

import (
	"testing"

	"atoll/policies"
	"atoll/sched"
	"atoll/sched/schedtest"
)

// factory builds atoll with the script's parameters; other names come from
// the registry with defaults.
func factory(name string, m map[string]string) (sched.Policy, error) {
	if name != "atoll" {
		if err := schedtest.NewArgs(m).Unused(); err != nil {
			return nil, err
		}
		return policies.ByName(name)
	}
	a := schedtest.NewArgs(m)
	p := policies.New()
	var err error
	set := func(e error) {
		if err == nil {
			err = e
		}
	}
	var e error
	p.ResumeAfter, e = a.Duration("resume-after")
	set(e)
	p.PlainBound, e = a.Duration("plain-bound")
	set(e)
	p.BEWindow, e = a.Int("be-window")
	set(e)
	p.BEQueue, e = a.Duration("be-queue")
	set(e)
	p.HPWindow, e = a.Int("hp-window")
	set(e)
	// Scripts exercise the mechanisms: padding and preemption are on
	// unless a script turns them off.
	noPad, e := a.Bool("no-padding")
	set(e)
	noPreempt, e := a.Bool("no-preempt")
	set(e)
	p.Padding, p.Preempt = !noPad, !noPreempt
	// Admission beside HP is on unless a script turns it off.
	noAdmission, e := a.Bool("no-admission")
	set(e)
	p.Admission = !noAdmission
	p.Confined, e = a.Bool("confined")
	set(e)
	p.PadAnyClass, e = a.Bool("pad-any-class")
	set(e)
	p.Split, e = a.Bool("split")
	set(e)
	p.Reserve, e = a.Int("reserve")
	set(e)
	p.AutoReserve, e = a.Bool("auto-reserve")
	set(e)
	p.SMThreshold, e = a.Int("sm-threshold")
	set(e)
	p.DurThreshold, e = a.Duration("dur-threshold")
	set(e)
	if err != nil {
		return nil, err
	}
	return p, a.Unused()
}

func TestScripts(t *testing.T) { schedtest.Walk(t, "testdata", factory) }
