// Package sim is a discrete-event simulated GPU that implements gpu.Device.
//
// It is atoll's default device and its test bed: every scheduling policy can
// be run, tested and compared on any machine, in virtual time, to the
// nanosecond, deterministically for a seed.
//
// # Model
//
// The simulated GPU has Spec.SMs identical SMs with CUDA's per-SM occupancy
// limits (warps, blocks, registers with their allocation unit, shared memory
// with its reservation, exactly as gpu.Spec.Occupancy counts them). A block
// dispatcher places pending blocks of eligible kernels on SMs with free room:
// more urgent streams first (CUDA convention: a lower priority number is more
// urgent); among equal priorities, by default, kernels in the order they
// became eligible, each placing all the blocks it can before the next places
// any (Config.SamePriority: FIFO, or RoundRobin); breadth first (one block
// per SM per round, lowest SM index first). A resident block is never
// interrupted except by a context switch, which suspends and later resumes
// it.
//
// Blocks progress in a calibrated fluid model: a block's solo duration is its
// kernel's profiled duration divided by the kernel's number of waves, and at
// any instant it progresses at min(1, 1/C, 1/M) of its solo rate, where C is
// the compute demand of the blocks on its SM and M the DRAM demand of all
// resident blocks (see docs/simulator.md). A kernel alone therefore takes
// exactly its profiled time.
//
// Reads of a mapped host flag at block start (Reset launches with a Flag and
// no Counter, so no device-memory relay) are served one at a time by a
// GPU-wide server taking Config.HostReadLatency each, as PCIe reads of host
// memory serialise on the real GPU; a block starts, or exits if the flag is
// raised, when its read is served.
//
// To be fast, the simulator never tracks single blocks: blocks of one kernel
// dispatched at the same instant onto identical SMs form a group that
// finishes together, and identical SMs are collapsed into classes. Rates are
// recomputed only when the set of resident groups changes.
//
// # Contract
//
// A Device is owned by one goroutine, like every gpu.Device; only HostWord
// Load and Store may be called from other goroutines. Virtual time moves only
// inside Wait. The same Config (Seed included) and the same sequence of calls
// give the same trace and the same times, bit for bit.
//
// The package must never touch real hardware, read the wall clock, start
// goroutines, or allocate memory proportional to simulated device memory:
// device memory is a sparse map that stores only the bytes written.
package sim
