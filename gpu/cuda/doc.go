// Package cuda is atoll's real-GPU backend: gpu.Device over the CUDA driver
// API, loaded at run time with purego (dlopen of libcuda.so.1), plus NVRTC
// run-time compilation (libnvrtc.so), cuBLASLt products (gpu.BLAS,
// libcublasLt.so, optional: ATOLL_CUBLASLT) and an NVML inventory.
//
// No CUDA header or toolkit is needed to build it, and the driver part builds
// with CGO_ENABLED=0. On a machine without a GPU or driver, Open returns an
// error wrapping gpu.ErrNoDevice; callers fall back to gpu/sim.
//
// Threading: a CUDA context is current per OS thread. Open locks the calling
// goroutine to its thread; use the Device from that goroutine only (Run wraps
// the pattern). Each call checks the thread's current context and switches it
// when needed, so streams of a second context (NewContext, the time-slicing
// baseline) work transparently. HostWord Store/Load are safe from any
// goroutine.
//
// Clock: Now is host monotonic time since Open. Event times are the time of
// a base event, aligned with the host clock at Open, plus
// cuEventElapsedTime (resolution about 0.5 µs).
//
// Errors: every driver failure is an *Error naming the call and the CUresult
// ("cuda: cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (1)") and wraps
// gpu.ErrDriver, plus gpu.ErrOutOfMemory, ErrInvalidLaunch, ErrInvalidHandle,
// ErrNotReady or ErrNoDevice where one fits.
//
// This package must never exit or panic on a missing GPU or driver, never
// make scheduling decisions, and never allocate on the launch hot path. It
// must not change the GPU's clocks, power limits or modes.
package cuda
