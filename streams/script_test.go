package streams_test

import (
	"fmt"
	"testing"

	"atoll/sched"
	"atoll/sched/schedtest"
	"atoll/streams"
)

func factory(name string, args map[string]string) (sched.Policy, error) {
	if err := schedtest.NewArgs(args).Unused(); err != nil {
		return nil, err
	}
	switch name {
	case "dedicated":
		return streams.Dedicated(), nil
	case "timeslice":
		return streams.Timeslice(), nil
	case "streams":
		return streams.Streams(), nil
	case "priority":
		return streams.Priority(), nil
	}
	return nil, fmt.Errorf("no policy %q in package streams", name)
}

func TestScripts(t *testing.T) { schedtest.Walk(t, "testdata", factory) }
