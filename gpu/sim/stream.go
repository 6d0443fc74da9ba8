package sim

import (
	"math"

	"atoll/gpu"
)

type opKind uint8

const (
	opKernel opKind = iota
	opMemset
	opRecord
)

// op is one piece of stream work, in enqueue order.
type op struct {
	kind opKind
	host float64 // virtual time of the host call
	k    *kernel
	ev   gpu.Event
	gen  uint32
	ptr  gpu.Ptr
	val  uint32
	n    int
}

// stream is an ordered queue of ops; only its head op can be in progress.
type stream struct {
	id       gpu.Stream
	prio     int
	ctx      gpu.Context
	m        int   // index of its context's machine
	lo, hi   int16 // SMs its blocks may use: [lo, hi), hi 0 for all from lo (SM partitions)
	dead     bool
	ops      []op // ops[head:] are not yet complete
	head     int
	lastDone float64 // when the previous op completed
	wake     float64 // when the head op becomes ready; +Inf if none or running
}

func (s *stream) idle() bool { return s.head == len(s.ops) }

func (d *Device) enqueue(s *stream, o op) {
	switch {
	case s.idle():
		s.ops, s.head = s.ops[:0], 0
		s.wake = d.readyAt(s, &o)
	case s.head >= compactAfter && 2*s.head >= len(s.ops):
		// A stream that never drains (HP under overload) would keep the
		// space of every op it ever ran, and each append past its
		// capacity would copy all of it: drop the completed front, so
		// memory and copying follow the ops queued, not the ops run.
		n := copy(s.ops, s.ops[s.head:])
		clear(s.ops[n:])
		s.ops, s.head = s.ops[:n], 0
	}
	s.ops = append(s.ops, o)
}

// compactAfter is how many completed ops a busy stream keeps at its front
// before enqueue drops them.
const compactAfter = 256

// readyAt is when o, at the head of s, may start.
func (d *Device) readyAt(s *stream, o *op) float64 {
	if o.kind == opRecord {
		return max(s.lastDone, o.host)
	}
	return max(s.lastDone, o.host+d.lat)
}

// pump runs the ready head ops of every stream: memsets and event records
// complete, kernels become eligible for dispatch.
func (d *Device) pump() {
	for _, s := range d.streams {
		if s.wake > d.now {
			continue
		}
		s.wake = math.Inf(1)
	ops:
		for !s.idle() {
			o := &s.ops[s.head]
			t := d.readyAt(s, o)
			if t > d.now {
				s.wake = t
				break
			}
			switch o.kind {
			case opMemset:
				d.fill(o.ptr, o.val, o.n)
			case opRecord:
				if ev := &d.events[o.ev-1]; ev.live && ev.gen == o.gen {
					d.completeEvent(ev, t)
				}
				// The record holds the stream (Config.EventCost).
				t += float64(d.cfg.EventCost)
			case opKernel:
				if !o.k.eligible {
					o.k.eligible, o.k.elig = true, t
					d.machines[s.m].addPending(o.k, d.cfg.SamePriority)
				}
				break ops // the kernel stays at the head until it completes
			}
			s.lastDone = t
			*o = op{}
			s.head++
		}
	}
}

// kernelDone pops the finished kernel k off its stream.
func (d *Device) kernelDone(k *kernel) {
	s := k.st
	d.trace(TraceEvent{Kind: TraceKernelEnd, Kernel: k.seq, Name: k.name, Stream: s.id, Context: s.ctx, Priority: s.prio})
	s.ops[s.head] = op{}
	s.head++
	// The stream holds KernelGap before its next op.
	s.lastDone = d.now + float64(d.cfg.KernelGap)
	s.wake = s.lastDone
	d.kpool = append(d.kpool, k)
}
