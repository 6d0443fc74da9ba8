package preempt_test

import (
	"fmt"
	"testing"

	"atoll/preempt"
	"atoll/sched"
	"atoll/sched/schedtest"
)

func factory(name string, m map[string]string) (sched.Policy, error) {
	if name != "reef" {
		return nil, fmt.Errorf("no policy %q in package preempt", name)
	}
	a := schedtest.NewArgs(m)
	p := preempt.New()
	var err error
	if p.Window, err = a.Int("window"); err != nil {
		return nil, err
	}
	if p.HPWindow, err = a.Int("hp-window"); err != nil {
		return nil, err
	}
	if p.NoPadding, err = a.Bool("no-padding"); err != nil {
		return nil, err
	}
	return p, a.Unused()
}

func TestScripts(t *testing.T) { schedtest.Walk(t, "testdata", factory) }
