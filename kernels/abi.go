package kernels

import (
	"atoll/gpu"
)

// CtlBytes is the size of the C struct Ctl every kernel takes first:
//
//	struct Ctl {
//	  const volatile u32* flag; // preemption flag, a mapped host word (Reset, Resumable)
//	  int*  counter;            // 32-byte control block in device memory (below)
//	  volatile u32* done;       // Resumable: set to 1 by the worker completing the last block
//	  u64*  trace;              // optional: per-block exit %globaltimer (ns); 0 = off
//	  int   logical;            // Resumable: logical blocks; Padded HP Ctl: HP blocks
//	  int   offset;             // Plain/Reset: first logical block (sliced launches)
//	  int   epoch;              // launch serial number (see the flag relay)
//	  int   chunk;              // Resumable: logical blocks per ticket
//	};
//
// The body's parameter struct follows it by value. gpu.Args aligns each field
// naturally, which is the C layout of the structs, so packing field by field
// in declaration order reproduces them.
const CtlBytes = 48

// Control is the preemption state a launch carries in its Ctl.
//
// Each Library.Launch stamps a new epoch into the Ctl, and the flag relay
// trusts only reads made under its own epoch. Re-enqueueing the same
// *gpu.Launch after a preemption is correct, but if it starts within ~4 µs
// of the previous launch's last relay refresh its workers may still see
// "raised" and exit at once (no work lost); call Launch again for a fresh
// epoch.
type Control struct {
	// Flag is the preemption flag (Reset, Resumable; the BE side of Padded).
	// The host raises it with Device.Store(Flag, 1).
	Flag gpu.HostWord
	// Counter points to a 32-byte control block in device memory (CounterBytes),
	// zeroed before the first launch of a kernel instance: int32 [0] logical
	// blocks taken (may exceed Logical, see docs/kernels.md), [1] logical
	// blocks completed, [2..3] the flag relay (a device-memory copy of the
	// flag that spares every block a PCIe read), [4] the relay's lock, [5]
	// a split-K op's run id for this Resumable instance (see Splits).
	// Required by Resumable; optional for Reset (with it, Reset blocks read
	// the relay instead of the host word and [1] counts completed blocks).
	Counter gpu.Ptr
	// Done is set to 1 by the Resumable worker that completes the last
	// logical block (system-scope fence first).
	Done gpu.HostWord
	// Trace, if set, points to one uint64 per launched block (Plain/Reset:
	// grid blocks; Resumable: workers): each block stores %globaltimer (ns)
	// as it exits. Used to measure preemption latency.
	Trace gpu.Ptr
	// Offset is the first logical block of a Plain or Reset launch, and
	// Blocks (0: all the rest) how many it runs: a slice of the grid
	// (Tally's sliced launches), launched as a 1-D grid.
	Offset, Blocks int
	// Workers overrides the Resumable worker count (0: min(logical, SMs x
	// resident blocks per SM)).
	Workers int
	// Chunk is the number of logical blocks a Resumable worker takes per
	// ticket (one atomic and one flag check per ticket); 0 means the op's
	// default (8 for the ~1 µs blocks of elementwise, gather, pooling,
	// depthwise and reductions; 1 otherwise). Preemption latency is bounded
	// by one ticket.
	Chunk int
}

// CounterBytes is the size of the control block Control.Counter points to.
const CounterBytes = 32

func packCtl(a *gpu.Args, c Control, logical int, epoch int32) {
	a.Ptr(c.Flag.Dev).Ptr(c.Counter).Ptr(c.Done.Dev).Ptr(c.Trace)
	a.I32(int32(logical)).I32(int32(c.Offset)).I32(epoch).I32(int32(max(c.Chunk, 1)))
}
