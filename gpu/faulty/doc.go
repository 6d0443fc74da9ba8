// Package faulty wraps a gpu.Device and makes chosen calls fail, the way
// pebble's vfs/errorfs fails chosen file operations: the i-th call, every call
// of a named method, or calls a predicate picks. Injected errors wrap
// gpu.ErrDriver (and ErrInjected), so code under test sees what a failing
// driver would give it. It counts calls so a test can first run a scenario
// cleanly, then sweep the failure point over every call.
//
// It must never be used outside tests and fault drills, and never changes
// what the wrapped device does for calls it lets through.
package faulty
