package policies

import (
	"errors"
	"fmt"
	"strings"

	"atoll/orion"
	"atoll/preempt"
	"atoll/sched"
	"atoll/streams"
)

// ErrUnknown is wrapped when a policy name is not registered.
var ErrUnknown = errors.New("policies: unknown policy")

var registry = []struct {
	name string
	make func() sched.Policy
}{
	{"dedicated", func() sched.Policy { return streams.Dedicated() }},
	{"timeslice", func() sched.Policy { return streams.Timeslice() }},
	{"streams", func() sched.Policy { return streams.Streams() }},
	{"priority", func() sched.Policy { return streams.Priority() }},
	{"orion", func() sched.Policy { return orion.New() }},
	{"reef", func() sched.Policy { return preempt.New() }},
	{"atoll", func() sched.Policy { return New() }},
}

// Names lists the policies in the order reports show them: baselines
// first, atoll last.
func Names() []string {
	out := make([]string, len(registry))
	for i, r := range registry {
		out[i] = r.name
	}
	return out
}

// ByName returns a fresh policy with default parameters.
func ByName(name string) (sched.Policy, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, r := range registry {
		if r.name == n {
			return r.make(), nil
		}
	}
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknown, name, strings.Join(Names(), ", "))
}
