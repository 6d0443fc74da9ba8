package policies

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"atoll/orion"
	"atoll/preempt"
	"atoll/sched"
	"atoll/streams"
)

// ErrUnknown is wrapped when a policy name is not registered.
var ErrUnknown = errors.New("policies: unknown policy")

var registry = []struct {
	name, summary string
	make          func() sched.Policy
}{
	{"dedicated", "HP alone on the GPU; BE never runs (the baseline overheads are measured against)",
		func() sched.Policy { return streams.Dedicated() }},
	{"timeslice", "HP and BE in separate GPU contexts; the GPU time-slices between them",
		func() sched.Policy { return streams.Timeslice() }},
	{"streams", "one context, HP and BE on plain streams of equal priority; BE launches freely",
		func() sched.Policy { return streams.Streams() }},
	{"priority", "HP on the most urgent stream priority, BE on the least; no preemption",
		func() sched.Policy { return streams.Priority() }},
	{"orion", "Orion: BE kernels beside HP only if class-compatible and small, under a duration cap",
		func() sched.Policy { return orion.New() }},
	{"reef", "REEF: reset preemption with 2 BE kernels in flight, plus dynamic kernel padding",
		func() sched.Policy { return preempt.New() }},
	{"atoll", "priorities, BE from HP's idle time in chunk graphs, its queued work bounded (Orion's admission beside busy HP: atoll:admission=true; BE in an SM partition leaving HP a reserve: atoll:reserve=auto; preemption, padding: atoll:preempt=true,padding=true; HP partitioned too: atoll:split=true)",
		func() sched.Policy { return New() }},
}

// Summary is a one-line description of a registered policy ("" if unknown).
func Summary(name string) string {
	for _, r := range registry {
		if r.name == name {
			return r.summary
		}
	}
	return ""
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

// ByName returns a fresh policy: a registered name with default
// parameters, or "atoll:key=value,..." with some of atoll's parameters set
// (hp-window, be-window, be-queue, reserve, plain-bound, resume-after,
// padding, preempt, split, admission; see Atoll), for experiments that
// compare parameter settings on the same workload; "orion:chunks=true" is
// Orion launching BE a chunk at a time while HP is idle
// (orion.Policy.Chunks).
func ByName(name string) (sched.Policy, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	base, params, hasParams := strings.Cut(n, ":")
	for _, r := range registry {
		if r.name != base {
			continue
		}
		if !hasParams {
			return r.make(), nil
		}
		if base == "orion" {
			return orionWith(params)
		}
		if base != "atoll" {
			return nil, fmt.Errorf("%w: policy %q takes no parameters (only atoll and orion do)", ErrConfig, base)
		}
		p := New()
		if err := p.set(params); err != nil {
			return nil, err
		}
		return p, nil
	}
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknown, name, strings.Join(Names(), ", "))
}

// orionWith is Orion with "key=value,..." parameters: chunks=true|false
// (orion.Policy.Chunks).
func orionWith(params string) (sched.Policy, error) {
	p := orion.New()
	for _, kv := range strings.Split(params, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k != "chunks" {
			return nil, fmt.Errorf("%w: unknown orion parameter %q (chunks=true|false)", ErrConfig, kv)
		}
		on, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("%w: orion parameter chunks: %v", ErrConfig, err)
		}
		p.Chunks = on
	}
	return p, nil
}

// SplitList splits a comma-separated list of policies, keeping each
// policy's parameters with it: an element that holds '=' but no ':' is a
// further parameter of the policy before it, so
// "orion,atoll:split=true,reserve=100" is orion and
// atoll:split=true,reserve=100.
func SplitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if n := len(out); n > 0 && strings.Contains(e, "=") && !strings.Contains(e, ":") && strings.Contains(out[n-1], ":") {
			out[n-1] += "," + e
			continue
		}
		out = append(out, e)
	}
	return out
}
