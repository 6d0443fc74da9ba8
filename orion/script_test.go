package orion_test

import (
	"fmt"
	"testing"

	"atoll/orion"
	"atoll/sched"
	"atoll/sched/schedtest"
)

func factory(name string, m map[string]string) (sched.Policy, error) {
	if name != "orion" {
		return nil, fmt.Errorf("no policy %q in package orion", name)
	}
	a := schedtest.NewArgs(m)
	p := orion.New()
	var err error
	if p.SMThreshold, err = a.Int("sm-threshold"); err != nil {
		return nil, err
	}
	if p.DurThreshold, err = a.Duration("dur-threshold"); err != nil {
		return nil, err
	}
	if p.DurFraction, err = a.Float("dur-fraction"); err != nil {
		return nil, err
	}
	if p.Chunks, err = a.Bool("orion-chunks"); err != nil { // chunks= is the core's (schedtest)
		return nil, err
	}
	return p, a.Unused()
}

func TestScripts(t *testing.T) { schedtest.Walk(t, "testdata", factory) }
