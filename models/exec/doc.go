// Package exec executes models of the zoo on a gpu.Device: an Instance
// holds one model at one batch size on the device (every weight, input and
// activation in its own buffer, each layer's kernel operands bound to
// them), runs forward passes and reads results back; an InstanceBinder serves a
// scheduler's launch requests (sched.Binder) from instances, in every form
// the kernel library compiles (plain, reset, resumable, padded).
//
// Numbers come from the kernel library's CUDA kernels; on gpu/sim the same
// launches are timed but compute nothing, so tests there check launch
// shapes and buffer wiring, and the GPU tests compare outputs with the CPU
// reference (models.Reference) and with PyTorch (tools/torchref).
//
// Glue layers whose layout the library's strided GEMM expresses (BERT's
// attention scores and context over the fused QKV tensor, the pooler over
// the [CLS] rows) are bound to it. Layers the kernel library cannot launch
// as the model describes them are refused by default; Options.Substitute binds the ones that have an
// equivalent library kernel to it (Instance.Substitutions lists them), and
// RunHybrid computes the rest on the host between GPU segments for
// end-to-end checks.
//
// This package must never decide what runs when (that is the scheduler's)
// and must never hide a layer it cannot run: layers whose kernels the
// library lacks or whose operands need a layout change no kernel makes are
// refused with ErrNotRunnable naming the layer and the missing piece.
package exec
