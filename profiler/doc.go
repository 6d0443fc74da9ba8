// Package profiler makes kernel profiles (package profiles) of the zoo's
// models.
//
// This issue provides Estimate: a roofline estimate from each op's FLOPs,
// bytes and launch geometry against a gpu.Spec, marked
// Source = "estimated". It stands in until measured profiles (CUDA events on
// a real GPU, issue 4) replace it; docs/profiles.md says what it ignores.
// The committed estimated profiles under profiles/ are regenerated, and
// checked for drift, by `go test ./profiler -run TestGolden [-update]`.
//
// This package must never be imported by the scheduler's hot path or the
// simulator: it produces profiles offline, it does not consume them.
package profiler
