// Package kernels is atoll's GPU kernel library: real kernels (tensor-core
// GEMM, implicit-GEMM convolution and its two backward passes, a strided
// batched GEMM for multi-head attention over a fused QKV tensor, depthwise
// convolution, elementwise with bias and activation, SGD, layernorm,
// softmax, pooling, reductions, gathers, and the training kernels of
// train.go: batch norm with batch statistics, cross-entropy, pooling
// backward, split-K wgrad sums; and those of bert_train.go: GELU, tanh,
// softmax and layernorm backward, column and layernorm-gradient partials,
// embedding sums and gradients, a batched transpose, a three-way concat,
// Adam with fp32 master weights) written once in CUDA C
// (cuda/*.cu, embedded) against a logical block index and compiled at run
// time in four forms (gpu.Plain, gpu.Reset, gpu.Resumable, gpu.Padded).
//
// ops.go describes each op at a concrete shape: launch geometry, FLOPs and
// the DRAM bytes it must move. Models are sequences of these ops; profiles
// record how they ran. Library compiles an op's module on a gpu.Device on
// first use and returns fully populated gpu.Launches (Launch, LaunchPadded);
// Alloc makes an op's buffers with seeded data; Reference computes its
// outputs on the CPU; SelfTest checks every kernel and form on a real GPU
// and measures preemption latency, flag-check cost and GEMM throughput.
// docs/kernels.md documents the forms, the kernel ABI (Ctl) and the results.
//
// This package must never schedule anything or hold global device state: it
// describes, compiles and builds launches, and touches a device only through
// the gpu.Device a caller hands it, from the caller's goroutine. Kernels
// must never read the mapped host flag once per logical block (such reads
// serialise GPU-wide); they go through the flag relay in cuda/common.cuh.
// Kernels must never accumulate across logical blocks with atomics: a
// logical block run again after a preemption must store the same bytes
// (reductions write per-block partials that a second kernel finishes).
package kernels
