package sched

import (
	"errors"
	"fmt"

	"atoll/gpu"
	"atoll/profiles"
)

// Control is the preemption state of one launch, owned by the driver: the
// client's flag, the client's progress block and the launch's done word.
// On a real GPU the kernel reads them through its arguments, so the binder
// (which packs the arguments) must receive them; the simulator reads the
// matching gpu.Launch fields.
type Control struct {
	Flag    gpu.HostWord // Reset, Resumable: raised by the host to preempt
	Counter gpu.Ptr      // Resumable: the client's progress block (Binder.ProgressBytes), zeroed per kernel instance; Reset: the client's flag-relay block (same size, zeroed once)
	Done    gpu.HostWord // Resumable: set to 1 when the body's last logical block completes
}

// BindRequest asks for the launch of one kernel of one client in one form.
type BindRequest struct {
	Client ClientID
	Kernel int
	// Variant is the HP pass (Launch.Variant): 0 the client's profile, v
	// its v-th batched profile.
	Variant int
	Form    gpu.Form
	Ctl     Control
	// Pad is the BE body that shares a gpu.Padded launch.
	Pad *PadRequest
}

// PadRequest is the BE side of a padded launch: Blocks worker blocks run
// the BE kernel with Resumable semantics under Ctl.
type PadRequest struct {
	Client ClientID
	Kernel int
	Blocks int
	Ctl    Control
}

// ErrNotReady is what a Binder answers (wrapped) for a padded launch whose
// pair kernel is not ready yet (compiling in the background). The driver
// then launches the HP kernel alone (Plain): the pad's BE kernel makes no
// progress in that launch and resumes from its progress block later. Any
// other form must bind or fail.
var ErrNotReady = errors.New("sched: launch not ready yet")

// Binder turns a launch decision into a complete gpu.Launch: function,
// geometry, arguments (the preemption state included), cost and the form's
// fields. Bind returns a launch the caller owns. The Plain launch of an HP
// kernel must be the same every time it is bound (same buffers): the
// driver records it once into a graph and replays it (Options.NoHPGraphs). For gpu.Resumable, Grid is
// the worker blocks and Logical the body's logical blocks; for gpu.Padded,
// Grid is the HP blocks and Pad the BE part.
type Binder interface {
	Bind(r BindRequest) (*gpu.Launch, error)
	// ProgressBytes is the size of the progress block a BE client's
	// resumable kernels use (a multiple of 4). The driver allocates one per
	// BE client and zeroes it before each fresh kernel instance.
	ProgressBytes() int
}

// ProfileBinder builds launches from profile fields alone: geometry,
// registers, shared memory and Cost from each profile kernel, and Funcs
// resolved by kernel name in one module loaded on the device. It is the
// binder for gpu/sim, which times kernels from their Cost; on a real GPU
// the kernel library's binder supplies real functions and arguments.
type ProfileBinder struct {
	spec gpu.Spec
	hp   [][][]profileLaunch // per client and pass variant
	be   [][]profileLaunch
}

// profileLaunch is one profile kernel's launch. A vendor-library kernel
// (profiles.TagBLAS) is launched in Plain form as a vendor function (named
// gpu.VendorConvPrefix + its name where it is a vendor convolution,
// profiles.TagBLASConv, else gpu.VendorMatmulPrefix + its name, so the
// device charges the host a vendor call's cost), and when measured on SM
// partitions as one wave over the SMs it was measured to need
// (profiles.Kernel.PartitionSMs), not in the geometry of atoll's own
// kernel for the op, which its other forms use; where the profile
// recorded the call's launches (profiles.Kernel.Launches) they ride on
// the Plain launch (gpu.Launch.Vendor), and the simulator runs those.
type profileLaunch struct {
	gpu.Launch
	plain  gpu.Dim3
	vendor gpu.Func
	calls  []gpu.VendorLaunch // its vendor call's launches, where the profile has them
}

// NewProfileBinder loads the module "atoll-profiles" on dev and resolves a
// function for every kernel name in w's profiles.
func NewProfileBinder(dev gpu.Device, w Workload) (*ProfileBinder, error) {
	mod, err := dev.LoadModule(gpu.ModuleSource{Name: "atoll-profiles"})
	if err != nil {
		return nil, fmt.Errorf("%w: LoadModule(atoll-profiles): %w", ErrDevice, err)
	}
	b := &ProfileBinder{spec: dev.Info().Spec}
	funcs := map[string]gpu.Func{}
	resolve := func(name, model string, i int) (gpu.Func, error) {
		f, ok := funcs[name]
		if !ok {
			var err error
			if f, err = mod.Function(name); err != nil {
				return 0, fmt.Errorf("%w: Function(%q) for profile %q kernel %d: %w", ErrDevice, name, model, i, err)
			}
			funcs[name] = f
		}
		return f, nil
	}
	build := func(p *profiles.Profile) ([]profileLaunch, error) {
		if err := ValidateProfile(p); err != nil {
			return nil, err
		}
		out := make([]profileLaunch, len(p.Kernels))
		for i := range p.Kernels {
			k := &p.Kernels[i]
			f, err := resolve(k.Name, p.Model, i)
			if err != nil {
				return nil, err
			}
			if k.HasTag(profiles.TagBLAS) {
				prefix := gpu.VendorMatmulPrefix
				if k.HasTag(profiles.TagBLASConv) {
					prefix = gpu.VendorConvPrefix
				}
				if out[i].vendor, err = resolve(prefix+k.Name, p.Model, i); err != nil {
					return nil, err
				}
				out[i].calls = k.VendorLaunches()
			}
			out[i].Launch = gpu.Launch{Name: k.Name, Func: f, Grid: k.GridDim(), Block: k.BlockDim(),
				SharedMem: k.SharedMem, Registers: k.Registers, Cost: k.Cost()}
			if n := k.PartitionSMs(); n > 0 && k.HasTag(profiles.TagBLAS) {
				out[i].plain = gpu.D1(min(n, b.spec.SMs) * BlocksPerSM(b.spec, k))
			}
		}
		return out, nil
	}
	for i, c := range w.HP {
		var vars [][]profileLaunch
		for _, p := range append([]*profiles.Profile{c.Profile}, c.Batched...) {
			l, err := build(p)
			if err != nil {
				return nil, fmt.Errorf("HP client %d (%s): %w", i, c.Name, err)
			}
			vars = append(vars, l)
		}
		b.hp = append(b.hp, vars)
	}
	for i, c := range w.BE {
		l, err := build(c.Profile)
		if err != nil {
			return nil, fmt.Errorf("BE client %d (%s): %w", i, c.Name, err)
		}
		b.be = append(b.be, l)
	}
	return b, nil
}

// ProgressBytes implements Binder: the simulator's progress counter is one
// int32.
func (b *ProfileBinder) ProgressBytes() int { return 4 }

// Bind implements Binder.
func (b *ProfileBinder) Bind(r BindRequest) (*gpu.Launch, error) {
	l, err := b.bind(r.Client, r.Kernel, r.Variant, r.Form)
	if err != nil {
		return nil, err
	}
	switch r.Form {
	case gpu.Reset:
		l.Flag, l.Counter = r.Ctl.Flag, r.Ctl.Counter
	case gpu.Resumable:
		l.Flag, l.Counter, l.Done = r.Ctl.Flag, r.Ctl.Counter, r.Ctl.Done
	case gpu.Padded:
		if r.Pad == nil {
			return nil, fmt.Errorf("%w: padded launch of %s kernel %d without a pad", ErrConfig, r.Client, r.Kernel)
		}
		pad, err := b.bind(r.Pad.Client, r.Pad.Kernel, 0, gpu.Resumable)
		if err != nil {
			return nil, err
		}
		pad.Grid = gpu.D1(r.Pad.Blocks)
		pad.Flag, pad.Counter, pad.Done = r.Pad.Ctl.Flag, r.Pad.Ctl.Counter, r.Pad.Ctl.Done
		l.Pad = pad
	}
	return l, nil
}

func (b *ProfileBinder) bind(client ClientID, kernel, v int, form gpu.Form) (*gpu.Launch, error) {
	var tab []profileLaunch
	switch {
	case client.Class == BE && client.Index >= 0 && client.Index < len(b.be) && v == 0:
		tab = b.be[client.Index]
	case client.Class == HP && client.Index >= 0 && client.Index < len(b.hp) && v >= 0 && v < len(b.hp[client.Index]):
		tab = b.hp[client.Index][v]
	}
	if kernel < 0 || kernel >= len(tab) {
		return nil, fmt.Errorf("%w: no kernel %d%s for client %s", ErrConfig, kernel, variantTag(v), client)
	}
	pl := tab[kernel]
	l := pl.Launch
	l.Form = form
	if form == gpu.Plain && pl.plain.X > 0 {
		l.Grid = pl.plain
	}
	if form == gpu.Plain && pl.vendor != 0 {
		l.Func, l.Vendor = pl.vendor, pl.calls
	}
	if form == gpu.Resumable {
		l.Logical = l.Grid.Count()
		blocks, _, err := b.spec.Occupancy(l.Block.Count(), l.Registers, l.SharedMem)
		if err != nil {
			return nil, fmt.Errorf("%w: kernel %s of %s: %w", ErrConfig, l.Name, client, err)
		}
		l.Grid = gpu.D1(max(1, min(l.Logical, b.spec.SMs*blocks)))
	}
	return &l, nil
}
