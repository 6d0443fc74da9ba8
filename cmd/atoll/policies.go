package main

import (
	"context"
	"fmt"

	"atoll/policies"
)

const policiesHelp = `
Usage: atoll policies

Lists the scheduling policies, baselines first. Any of them can be passed to
'atoll bench --policy NAME'; 'atoll demo' runs them all. The atoll policy
takes parameters by name for experiments: atoll:hp-window=64,
atoll:plain-bound=50us,padding=false (keys hp-window, be-window, be-queue,
reserve, plain-bound, resume-after, padding, preempt, split, admission).
docs/policies.md states each rule and its parameters exactly.
`

func init() {
	register(command{name: "policies", summary: "list the scheduling policies and what each does", run: runPolicies})
}

func runPolicies(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "policies", policiesHelp)
	if err := parse(fs, args); err != nil {
		return err
	}
	for _, n := range policies.Names() {
		fmt.Fprintf(e.stdout, "  %-10s %s\n", n, policies.Summary(n))
	}
	return nil
}
