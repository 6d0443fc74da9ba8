// Package profiler makes kernel profiles (package profiles) of the zoo's
// models.
//
// Two ways:
//
//   - Estimate: a roofline estimate from each op's FLOPs, bytes and launch
//     geometry against a gpu.Spec, marked Source = "estimated". The
//     committed estimated profiles under profiles/ are regenerated, and
//     checked for drift, by `go test ./profiler -run TestGolden [-update]`.
//   - Measure: runs a model alone on a gpu.Device through the kernel
//     library (models/exec) and times every kernel with CUDA events, measures
//     the GPU's peaks first, reads registers and shared memory from the
//     driver and times each kernel confined to SM shares; Source =
//     "measured" (`atoll profile`). On gpu/sim the same code replays the
//     estimate and says so in the notes. ParseNCU and ApplyNCU import
//     Nsight Compute's CSV over the measured durations and percentages,
//     matching launches by order and name; NCUCommand prints how to collect
//     it. Bar draws Measure's progress.
//
// docs/profiles.md ("Estimated profiles", "Measuring") says what each
// records and ignores.
//
// This package must never be imported by the scheduler's hot path or the
// simulator: it produces profiles offline, it does not consume them. It
// must never write a profile for a model it could not run whole: a layer
// the kernel library cannot launch is an error naming the layer, not a
// gap, and an Nsight Compute row that is not the model's next launch is an
// error naming the row, never a positional guess.
package profiler
