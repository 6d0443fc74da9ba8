// Package kernels is atoll's GPU kernel library: real kernels (tensor-core
// GEMM, implicit-GEMM convolution, depthwise convolution, elementwise with
// bias and activation, layernorm, softmax, pooling, reductions, gathers)
// written once in CUDA C against a logical block index and compiled in four
// forms (gpu.Plain, gpu.Reset, gpu.Resumable, gpu.Padded).
//
// The Go side (ops.go) describes each op at a concrete shape: its launch
// geometry, FLOPs and the DRAM bytes it must move. Models are sequences of
// these ops; profiles record how they ran.
//
// This package must never schedule anything or hold global device state:
// it describes and compiles kernels, and launches them only when a caller
// hands it a gpu.Device.
package kernels
