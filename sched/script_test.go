package sched_test

import (
	"testing"

	"atoll/policies"
	"atoll/sched"
	"atoll/sched/schedtest"
)

// Core scripts use the registry's policies with defaults.
func TestScripts(t *testing.T) {
	schedtest.Walk(t, "testdata", func(name string, args map[string]string) (sched.Policy, error) {
		if err := schedtest.NewArgs(args).Unused(); err != nil {
			return nil, err
		}
		return policies.ByName(name)
	})
}
