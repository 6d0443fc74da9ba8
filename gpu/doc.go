// Package gpu is the seam between scheduling and hardware.
//
// Device is the one interface the scheduler core's drivers use: streams with
// priorities, contexts, kernel launch in one of four forms (plain, reset,
// resumable, padded), events, device memory, mapped host words for
// preemption flags, and the device clock. gpu/sim implements it as a
// discrete-event simulated GPU (the default and the test bed); gpu/cuda
// implements it over the CUDA driver API loaded at run time.
//
// Spec describes a GPU model (occupancy limits, peaks); Spec.Occupancy is the
// CUDA occupancy calculation that the simulator, Orion's "SMs needed" and
// the profiler share.
//
// This package must never import a backend, the scheduler or anything that
// touches hardware: it is types and pure functions only.
package gpu
