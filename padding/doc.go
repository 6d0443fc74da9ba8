// Package padding is REEF's dynamic kernel padding: for an HP kernel about
// to launch, pick a BE kernel whose profiled latency at the SM share it can
// get beside the HP kernel is no longer than the HP kernel's own latency,
// and size the BE part of the padded launch.
//
// Select and LatencyAt are pure functions of profiles and a gpu.Spec; Try
// applies them to a sched.State. This package must never launch anything
// itself, keep state between calls, or touch a gpu.Device.
package padding
