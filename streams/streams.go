package streams

import (
	"time"

	"atoll/sched"
)

// Policy is one of the stream baselines.
type Policy struct {
	name string
	plan sched.StreamPlan
	be   bool // launch BE work at all
}

// Dedicated runs the HP clients alone: BE clients are never launched. It is
// the reference every overhead is measured against.
func Dedicated() *Policy {
	return &Policy{name: "dedicated", plan: sched.PriorityPlan}
}

// Timeslice puts HP and BE clients in separate GPU contexts at equal
// priority: the GPU time-slices between the contexts.
func Timeslice() *Policy {
	return &Policy{name: "timeslice", be: true, plan: sched.StreamPlan{
		HP: sched.StreamClass{Priority: sched.PriorityLeast},
		BE: sched.StreamClass{Priority: sched.PriorityLeast, OwnContext: true},
	}}
}

// Streams runs every client on its own stream of one context, all at the
// same (least) priority.
func Streams() *Policy {
	return &Policy{name: "streams", be: true, plan: sched.StreamPlan{
		HP: sched.StreamClass{Priority: sched.PriorityLeast},
		BE: sched.StreamClass{Priority: sched.PriorityLeast},
	}}
}

// Priority is Streams with the HP streams at the device's greatest
// priority and the BE streams at its least.
func Priority() *Policy {
	return &Policy{name: "priority", be: true, plan: sched.PriorityPlan}
}

func (p *Policy) Name() string                { return p.name }
func (p *Policy) Streams() sched.StreamPlan   { return p.plan }
func (p *Policy) Start(st *sched.State) error { return nil }

// BEWindow bounds each BE client's launches in flight. A CUDA stream's
// launch queue is finite — on an H200 a launch call blocked once 384–512
// launches, each with its event record, were queued on one stream
// (gpu/cuda TestGPULaunchQueueDepth, results/hostcost-h200) — and a
// framework in a process of its own simply blocks in its next launch.
// Here one host thread launches for every client, so a BE launch that
// blocks would hold back HP's arrivals too (the GPU matrix measured it:
// the host delay cause at 264 µs mean per HP request). The baselines hold
// BE's launch instead, as its own blocked thread would, with the queue
// still far deeper than the GPU drains between two completions.
const BEWindow = 128

// Schedule launches every HP kernel of every arrived request at once, and
// (unless dedicated) every remaining kernel of each BE client's current
// iteration in Plain form, a chunk at a time (State.LaunchBEChunk: a
// framework replaying its step as CUDA graphs), up to BEWindow in flight
// per client; the next iteration starts when the last kernel of this one
// completes (a closed loop that synchronises per iteration).
func (p *Policy) Schedule(st *sched.State, _ time.Duration) {
	LaunchAllHP(st)
	if !p.be {
		return
	}
	for _, b := range st.BE() {
		for {
			_, k := b.Next()
			if k < 0 || b.InFlight()+b.ChunkEnd()-k > BEWindow || st.LaunchBEChunk(b) == 0 {
				break
			}
		}
	}
}

// LaunchAllHP launches every HP kernel waiting, in Plain form.
func LaunchAllHP(st *sched.State) {
	for _, c := range st.HP() {
		for {
			if _, ok := st.LaunchHP(c); !ok {
				break
			}
		}
	}
}
