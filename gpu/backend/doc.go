// Package backend opens a gpu.Device by name: the one place atoll chooses
// between the simulated GPU (gpu/sim) and the real one (gpu/cuda). The
// daemon's engine, the bench and matrix runs, the profiler and the probe
// open their devices through it; commands that need the CUDA backend's own
// methods (selftest, devices, the probe's GPU timer) use gpu/cuda directly.
package backend
