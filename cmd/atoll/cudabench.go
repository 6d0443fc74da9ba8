package main

import (
	"fmt"

	"atoll/gpu"
	"atoll/gpu/cuda"
	"atoll/kernels"
	"atoll/models"
	modelrun "atoll/models/run"
	"atoll/profiles"
	"atoll/sched"
)

// cudaBinder builds, for one run on the GPU, an instance of each client's
// zoo model (seeded weights and inputs, substitutions allowed and recorded
// in the instance) with the client's measured profile attached — a profile
// that does not match the model is refused — and binds the scheduler's
// launches to them.
func cudaBinder(dev gpu.Device, w sched.Workload) (sched.Binder, error) {
	lib := kernels.New(dev)
	build := func(p *profiles.Profile) (*modelrun.Instance, error) {
		m, err := models.Get(p.Model)
		if err != nil {
			return nil, err
		}
		g, err := m.Graph(p.Batch)
		if err != nil {
			return nil, err
		}
		in, err := modelrun.NewWith(dev, lib, g, models.InitWeights(g, 1), models.InitInputs(g, 1), modelrun.Options{Substitute: true})
		if err != nil {
			return nil, fmt.Errorf("%s bs%d on the GPU: %w", p.Model, p.Batch, err)
		}
		if n := in.Runnable(); n < len(g.Layers) {
			return nil, fmt.Errorf("%s bs%d cannot run on the GPU: %w", p.Model, p.Batch, in.Err(n))
		}
		if err := in.UseProfile(p); err != nil {
			return nil, err
		}
		return in, nil
	}
	var hp, be []*modelrun.Instance
	for _, c := range w.HP {
		in, err := build(c.Profile)
		if err != nil {
			return nil, err
		}
		hp = append(hp, in)
	}
	for _, c := range w.BE {
		in, err := build(c.Profile)
		if err != nil {
			return nil, err
		}
		be = append(be, in)
	}
	return modelrun.NewBinder(lib, hp, be)
}

// openCUDA opens GPU 0 for one run; the run's goroutine owns it (cuda.Open
// locks it to its OS thread until Close).
func openCUDA() (gpu.Device, error) { return cuda.Open(0) }
