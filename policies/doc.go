// Package policies is the registry of scheduling policies (ByName, Names)
// and home of atoll's combined policy (Atoll).
//
// The registry builds a fresh policy value per call: a policy serves one
// run. This package must never touch a gpu.Device: policies decide through
// sched.State only.
package policies
