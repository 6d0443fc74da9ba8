package server

import (
	"fmt"
	"sync/atomic"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/sched"
)

// FaultDrill makes one BE kernel of the engine fault on purpose, to measure
// what a faulting BE job costs HP: the BELaunch-th BE kernel launch,
// counted over every job from the engine's start, runs kernels.Fault in
// place of the kernel the scheduler asked for. On a GPU that leaves the
// CUDA context's sticky error, as a faulting kernel of a user's job would;
// the simulator models the same. It fires once per engine, and turns BE
// chunk graphs off (sched.OnlineConfig.NoBEGraphs) so that binds are
// launches. For drills only:
// off unless configured (fault_drill in the daemon's configuration),
// unreachable through the API.
type FaultDrill struct {
	BELaunch int    `yaml:"be_launch"`      // 1-based; 0: off
	Kind     string `yaml:"kind,omitempty"` // trap (default) or address
}

func (d FaultDrill) kind() (kernels.FaultKind, error) {
	if d.Kind == "" {
		return kernels.FaultTrap, nil
	}
	return kernels.ParseFaultKind(d.Kind)
}

// drillBinder is a Binder that replaces one BE launch by a fault kernel.
type drillBinder struct {
	sched.Binder
	lib   *kernels.Library
	op    kernels.Fault
	bufs  kernels.Buffers
	at    int64
	count *atomic.Int64 // BE launches bound so far (the engine's, across device opens)
}

func newDrillBinder(dev gpu.Device, inner sched.Binder, d FaultDrill, count *atomic.Int64) (*drillBinder, error) {
	kind, err := d.kind()
	if err != nil {
		return nil, err
	}
	op := kernels.Fault{Kind: kind}
	lib := kernels.New(dev)
	bufs, err := kernels.Alloc(dev, op, 0)
	if err != nil {
		return nil, fmt.Errorf("fault drill: %w", err)
	}
	return &drillBinder{Binder: inner, lib: lib, op: op, bufs: bufs, at: int64(d.BELaunch), count: count}, nil
}

// Bind implements sched.Binder: the drill's launch, in the form asked for,
// in place of the at-th BE kernel launch (a BE kernel padded into an HP
// launch does not count).
func (b *drillBinder) Bind(r sched.BindRequest) (*gpu.Launch, error) {
	if r.Client.Class == sched.BE && r.Pad == nil && b.count.Add(1) == b.at {
		return b.lib.Launch(b.op, r.Form, b.bufs, kernels.Control{Flag: r.Ctl.Flag, Counter: r.Ctl.Counter, Done: r.Ctl.Done})
	}
	return b.Binder.Bind(r)
}
