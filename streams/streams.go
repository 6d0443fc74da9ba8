package streams

import (
	"time"

	"atoll/gpu"
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

// Schedule launches every HP kernel of every arrived request at once, and
// (unless dedicated) every remaining kernel of each BE client's current
// iteration in Plain form; the next iteration starts when the last kernel
// of this one completes (a closed loop that synchronises per iteration).
func (p *Policy) Schedule(st *sched.State, _ time.Duration) {
	LaunchAllHP(st)
	if !p.be {
		return
	}
	for _, b := range st.BE() {
		for {
			if _, ok := st.LaunchBE(b, gpu.Plain); !ok {
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
