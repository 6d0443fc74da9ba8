package sim

import (
	"fmt"
	"time"

	"atoll/gpu"
)

// TraceKind says what a TraceEvent reports.
type TraceKind uint8

const (
	// TraceKernelStart: the first block of a kernel was dispatched.
	TraceKernelStart TraceKind = iota + 1
	// TraceKernelEnd: the last block of a kernel retired; the kernel is
	// complete and its stream moves on.
	TraceKernelEnd
	// TraceDispatch: Blocks blocks were placed on each SM in SMs.
	TraceDispatch
	// TraceRetire: Blocks blocks left each SM in SMs.
	TraceRetire
	// TraceTake: resumable workers took logical blocks [First, First+Blocks).
	TraceTake
	// TraceDone: a resumable body finished its last logical block and its
	// Done word was stored.
	TraceDone
	// TraceSwitch: a context switch to Context began; the outgoing
	// context's resident blocks are suspended.
	TraceSwitch
)

var traceKindNames = [...]string{"?", "kernel-start", "kernel-end", "dispatch", "retire", "take", "done", "switch"}

func (k TraceKind) String() string {
	if int(k) < len(traceKindNames) {
		return traceKindNames[k]
	}
	return fmt.Sprintf("trace(%d)", k)
}

// TraceEvent is one step of the simulation, for tests and visualisation.
type TraceEvent struct {
	Time     time.Duration
	Kind     TraceKind
	Kernel   uint64 // launch sequence number: the n-th successful Launch is n
	Name     string // Launch.Name (Pad's name for Part 1)
	Stream   gpu.Stream
	Context  gpu.Context
	Priority int
	Part     int // 0: the launch's own body; 1: a padded launch's Pad body
	// SMs are the SMs a Dispatch or Retire touched, ascending. The slice
	// aliases the simulator's memory: it is valid only during the call.
	SMs    []int16
	Blocks int // Dispatch, Retire: blocks per SM; Take: logical blocks taken
	First  int // Take: first logical block index
	// Exit: Dispatch, Retire: blocks that exit without doing work. Blocks
	// that read the host flag directly (see Config.HostReadLatency) learn
	// it only when their read is served: they are dispatched with Exit
	// false and their Retire says whether they exited.
	Exit bool
}

func (e TraceEvent) String() string {
	s := fmt.Sprintf("t=%v %s k%d %s", e.Time, e.Kind, e.Kernel, e.Name)
	switch e.Kind {
	case TraceDispatch, TraceRetire:
		s += fmt.Sprintf(" part=%d %dx%d SMs exit=%v", e.Part, e.Blocks, len(e.SMs), e.Exit)
	case TraceTake:
		s += fmt.Sprintf(" [%d,%d)", e.First, e.First+e.Blocks)
	case TraceSwitch:
		s = fmt.Sprintf("t=%v switch to context %d", e.Time, e.Context)
	}
	return s
}
