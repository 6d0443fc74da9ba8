package sched

import (
	"fmt"
	"time"
)

// Policy decides launches. The core calls Start once, then Schedule after
// every event it accepts. Schedule inspects the State and acts through its
// methods (LaunchHP, LaunchBE, PadHP, Preempt, Resume, WakeAt); it must not
// block, keep the State after returning, or do I/O. A Policy value serves
// one run: it may keep per-run state (round-robin pointers, running sums).
type Policy interface {
	// Name is the registry name, e.g. "orion".
	Name() string
	// Streams says how the driver makes the streams of each class.
	Streams() StreamPlan
	// Start validates the policy against the run (clients, profiles,
	// device) and fills defaults that depend on it.
	Start(st *State) error
	// Schedule makes the decisions the current state calls for.
	Schedule(st *State, now time.Duration)
}

// Priority is a stream priority relative to the device's range.
type Priority uint8

const (
	// PriorityLeast is the device's least urgent priority (CUDA 0).
	PriorityLeast Priority = iota
	// PriorityGreatest is the device's most urgent priority (e.g. -5).
	PriorityGreatest
)

func (p Priority) String() string {
	if p == PriorityGreatest {
		return "greatest"
	}
	return "least"
}

// StreamClass is how the streams of one client class are made.
type StreamClass struct {
	Priority Priority
	// OwnContext puts the class's streams in a GPU context of their own,
	// so the GPU time-slices between the classes instead of sharing SMs.
	OwnContext bool
	// SMs, when positive, puts the class's streams in an SM partition of
	// that many SMs (gpu.Device.NewPartition): they run concurrently with
	// the other class but never on the SMs outside the partition. It must
	// pass gpu.CheckPartition; OwnContext must then be false.
	SMs int
	// Rest puts the class's streams on the SMs a partition of SMs leaves
	// instead (gpu.Device.NewPartitionRest): with the other class in the
	// partition of SMs, the two classes share no SM.
	Rest bool
}

// StreamPlan holds the stream classes of HP and BE clients. Every client
// gets a stream of its own; padded launches go on the HP client's stream.
type StreamPlan struct {
	HP, BE StreamClass
}

// String says where the class's streams run: "greatest", "least (partition
// of 96 SMs)", "greatest (the SMs a partition of 96 leaves)", "least (own
// context)".
func (c StreamClass) String() string {
	switch {
	case c.OwnContext:
		return c.Priority.String() + " (own context)"
	case c.SMs > 0 && c.Rest:
		return fmt.Sprintf("%s (the SMs a partition of %d leaves)", c.Priority, c.SMs)
	case c.SMs > 0:
		return fmt.Sprintf("%s (partition of %d SMs)", c.Priority, c.SMs)
	}
	return c.Priority.String()
}

// String is "hp streams C, be streams C" with each class's String.
func (p StreamPlan) String() string {
	return "hp streams " + p.HP.String() + ", be streams " + p.BE.String()
}

// PriorityPlan is the common plan: HP at the greatest priority, BE at the
// least, one context.
var PriorityPlan = StreamPlan{HP: StreamClass{Priority: PriorityGreatest}, BE: StreamClass{Priority: PriorityLeast}}
