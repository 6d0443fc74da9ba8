package exec

import (
	"errors"
	"fmt"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/sched"
)

// InstanceBinder implements sched.Binder over model instances: client HP i is
// hp[i] and BE i is be[i], kernel k of a client is layer k of its
// instance. Every launch is the real kernel of kernels.Library over the
// instance's buffers, with the request's preemption state (flag, progress
// block, done word) packed into its arguments; a Padded request pairs the
// HP layer with the BE layer through Library.LaunchPadded, whose launch
// every backend runs as gpu.Launch documents (HP grid plus Pad's workers).
// Launches carry the instances' profile costs where UseProfile gave them.
// An HP client's batched passes (sched.HPWorkload.Batched) are instances of
// the model at those batch sizes (AddBatched): pass v of client i is
// batched[i][v-1]. An InstanceBinder belongs to the goroutine that owns
// the device.
type InstanceBinder struct {
	lib     *kernels.Library
	hp, be  []*Instance
	batched [][]*Instance
}

var _ sched.Binder = (*InstanceBinder)(nil)

// NewInstanceBinder binds the clients of a sched.Workload to instances (in the
// workload's order). All instances must live on lib's device.
func NewInstanceBinder(lib *kernels.Library, hp, be []*Instance) (*InstanceBinder, error) {
	for _, list := range [][]*Instance{hp, be} {
		for i, in := range list {
			if in == nil || in.dev != lib.Device() {
				return nil, fmt.Errorf("%w: client %d: instance missing or on another device", ErrInstance, i)
			}
		}
	}
	// Compile every kernel the scheduler may launch now, before the run:
	// HP layers plain, BE layers in the three forms a policy picks from. A
	// compile on the launch path stalls the HP request waiting on it.
	// Padded pairs are too many to compile ahead (HP layers × BE layers):
	// they compile in the background on first use (Library.AsyncPairs) and
	// Bind answers sched.ErrNotReady until then.
	var ops []kernels.Op
	for _, in := range append(append([]*Instance(nil), hp...), be...) {
		for _, l := range in.layers {
			if l.err == nil {
				ops = append(ops, l.op)
			}
		}
	}
	if err := lib.Precompile(ops); err != nil {
		return nil, err
	}
	for _, list := range []struct {
		ins   []*Instance
		forms []gpu.Form
	}{{hp, []gpu.Form{gpu.Plain}}, {be, []gpu.Form{gpu.Plain, gpu.Reset, gpu.Resumable}}} {
		for _, in := range list.ins {
			if err := in.prepare(lib, list.forms); err != nil {
				return nil, err
			}
		}
	}
	lib.AsyncPairs = true
	return &InstanceBinder{lib: lib, hp: hp, be: be, batched: make([][]*Instance, len(hp))}, nil
}

// AddBatched gives HP client c its batched passes, in the order of its
// sched.HPWorkload.Batched, and compiles their kernels.
func (b *InstanceBinder) AddBatched(c int, ins ...*Instance) error {
	if c < 0 || c >= len(b.hp) {
		return fmt.Errorf("%w: no HP client %d for batched instances", ErrInstance, c)
	}
	var ops []kernels.Op
	for i, in := range ins {
		if in == nil || in.dev != b.lib.Device() {
			return fmt.Errorf("%w: HP client %d: batched instance %d missing or on another device", ErrInstance, c, i)
		}
		for _, l := range in.layers {
			if l.err == nil {
				ops = append(ops, l.op)
			}
		}
	}
	if err := b.lib.Precompile(ops); err != nil {
		return err
	}
	for _, in := range ins {
		if err := in.prepare(b.lib, []gpu.Form{gpu.Plain}); err != nil {
			return err
		}
	}
	b.batched[c] = append(b.batched[c], ins...)
	return nil
}

// prepare compiles the kernels of in's runnable layers in forms.
func (in *Instance) prepare(lib *kernels.Library, forms []gpu.Form) error {
	for i, l := range in.layers {
		if l.err != nil {
			continue
		}
		for _, f := range forms {
			if _, err := lib.Func(l.op, f); err != nil {
				return fmt.Errorf("exec: compiling %s layer %d (%s) %s: %w", in.g.Model, i, in.g.Layers[i].Name, f, err)
			}
		}
	}
	return nil
}

// ProgressBytes implements sched.Binder: the kernel library's control
// block.
func (b *InstanceBinder) ProgressBytes() int { return kernels.CounterBytes }

func (b *InstanceBinder) instance(c sched.ClientID, kernel, v int) (*Instance, error) {
	list := b.hp
	if c.Class == sched.BE {
		list = b.be
	}
	if c.Index < 0 || c.Index >= len(list) {
		return nil, fmt.Errorf("%w: no instance for client %s", ErrInstance, c)
	}
	in := list[c.Index]
	if v != 0 {
		if c.Class != sched.HP || v < 0 || v > len(b.batched[c.Index]) {
			return nil, fmt.Errorf("%w: client %s has no batched pass %d", ErrInstance, c, v)
		}
		in = b.batched[c.Index][v-1]
	}
	if kernel < 0 || kernel >= len(in.layers) {
		return nil, fmt.Errorf("%w: client %s (%s) has no kernel %d (it has %d)", ErrInstance, c, in.g.Model, kernel, len(in.layers))
	}
	return in, nil
}

// Bind implements sched.Binder.
func (b *InstanceBinder) Bind(r sched.BindRequest) (*gpu.Launch, error) {
	in, err := b.instance(r.Client, r.Kernel, r.Variant)
	if err != nil {
		return nil, err
	}
	ctl := kernels.Control{Flag: r.Ctl.Flag, Counter: r.Ctl.Counter, Done: r.Ctl.Done}
	switch r.Form {
	case gpu.Plain:
		return in.Launch(r.Kernel, r.Form, kernels.Control{})
	case gpu.Reset, gpu.Resumable:
		return in.Launch(r.Kernel, r.Form, ctl)
	case gpu.Padded:
		if r.Pad == nil {
			return nil, fmt.Errorf("%w: padded launch of %s kernel %d without a pad", ErrInstance, r.Client, r.Kernel)
		}
		be, err := b.instance(r.Pad.Client, r.Pad.Kernel, 0)
		if err != nil {
			return nil, err
		}
		for _, e := range []error{in.Err(r.Kernel), be.Err(r.Pad.Kernel)} {
			if e != nil {
				return nil, e
			}
		}
		pc := kernels.Control{Flag: r.Pad.Ctl.Flag, Counter: r.Pad.Ctl.Counter, Done: r.Pad.Ctl.Done, Workers: r.Pad.Blocks}
		l, err := b.lib.LaunchPadded(in.layers[r.Kernel].op, in.layers[r.Kernel].bufs, kernels.Control{}, 0,
			be.layers[r.Pad.Kernel].op, be.layers[r.Pad.Kernel].bufs, pc)
		if err != nil {
			if errors.Is(err, kernels.ErrCompiling) {
				err = fmt.Errorf("%w: %w", sched.ErrNotReady, err)
			}
			return nil, fmt.Errorf("exec: %s layer %d (%s) padded with %s layer %d (%s): %w", in.g.Model, r.Kernel, in.g.Layers[r.Kernel].Name,
				be.g.Model, r.Pad.Kernel, be.g.Layers[r.Pad.Kernel].Name, err)
		}
		if c, ok := in.cost(r.Kernel); ok {
			l.Cost = c
		}
		if c, ok := be.cost(r.Pad.Kernel); ok && l.Pad != nil {
			l.Pad.Cost = c
		}
		return l, nil
	}
	return nil, fmt.Errorf("%w: %s kernel %d: unknown form %s", ErrInstance, r.Client, r.Kernel, r.Form)
}
