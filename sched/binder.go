package sched

import (
	"fmt"

	"atoll/gpu"
	"atoll/profiles"
)

// Binder turns a launch decision's body into a gpu.Launch: function,
// geometry, arguments and cost. Bind returns a launch the caller owns; the
// driver then sets the form's fields (Flag, Counter, Done, Pad). For
// gpu.Resumable, Bind sets Grid to the worker blocks and Logical to the
// body's logical blocks.
type Binder interface {
	Bind(client ClientID, kernel int, form gpu.Form) (*gpu.Launch, error)
}

// ProfileBinder builds launches from profile fields alone: geometry,
// registers, shared memory and Cost from each profile kernel, and Funcs
// resolved by kernel name in one module loaded on the device. It is the
// binder for gpu/sim, which times kernels from their Cost; on a real GPU
// the kernel library's binder supplies real functions and arguments.
type ProfileBinder struct {
	spec gpu.Spec
	hp   [][]gpu.Launch
	be   [][]gpu.Launch
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
	build := func(p *profiles.Profile) ([]gpu.Launch, error) {
		if err := ValidateProfile(p); err != nil {
			return nil, err
		}
		out := make([]gpu.Launch, len(p.Kernels))
		for i := range p.Kernels {
			k := &p.Kernels[i]
			f, ok := funcs[k.Name]
			if !ok {
				f, err = mod.Function(k.Name)
				if err != nil {
					return nil, fmt.Errorf("%w: Function(%q) for profile %q kernel %d: %w", ErrDevice, k.Name, p.Model, i, err)
				}
				funcs[k.Name] = f
			}
			out[i] = gpu.Launch{Name: k.Name, Func: f, Grid: k.GridDim(), Block: k.BlockDim(),
				SharedMem: k.SharedMem, Registers: k.Registers, Cost: k.Cost()}
		}
		return out, nil
	}
	for i, c := range w.HP {
		l, err := build(c.Profile)
		if err != nil {
			return nil, fmt.Errorf("HP client %d (%s): %w", i, c.Name, err)
		}
		b.hp = append(b.hp, l)
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

// Bind implements Binder.
func (b *ProfileBinder) Bind(client ClientID, kernel int, form gpu.Form) (*gpu.Launch, error) {
	tab := b.hp
	if client.Class == BE {
		tab = b.be
	}
	if client.Index < 0 || client.Index >= len(tab) || kernel < 0 || kernel >= len(tab[client.Index]) {
		return nil, fmt.Errorf("%w: no kernel %d for client %s", ErrConfig, kernel, client)
	}
	l := tab[client.Index][kernel]
	l.Form = form
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
