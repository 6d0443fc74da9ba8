package main

import (
	"context"
	"errors"
	"fmt"

	"atoll/gpu"
	"atoll/gpu/backend"
	"atoll/gpu/cuda"
	"atoll/kernels"
	"atoll/models/exec"
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
	return bindInstances(lib, w, func(p *profiles.Profile) (*exec.Instance, error) { return buildInstance(dev, lib, p) })
}

// bindInstances binds w's clients to the instances get returns.
func bindInstances(lib *kernels.Library, w sched.Workload, get func(*profiles.Profile) (*exec.Instance, error)) (sched.Binder, error) {
	var hp, be []*exec.Instance
	for _, c := range w.HP {
		in, err := get(c.Profile)
		if err != nil {
			return nil, err
		}
		hp = append(hp, in)
	}
	for _, c := range w.BE {
		in, err := get(c.Profile)
		if err != nil {
			return nil, err
		}
		be = append(be, in)
	}
	b, err := exec.NewInstanceBinder(lib, hp, be)
	if err != nil {
		return nil, err
	}
	for i, c := range w.HP {
		var ins []*exec.Instance
		for _, p := range c.Batched {
			in, err := get(p)
			if err != nil {
				return nil, err
			}
			ins = append(ins, in)
		}
		if err := b.AddBatched(i, ins...); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// buildInstance makes p's zoo model on dev with seeded weights and inputs.
func buildInstance(dev gpu.Device, lib *kernels.Library, p *profiles.Profile) (*exec.Instance, error) {
	in, err := exec.NewForProfile(dev, lib, p, 1)
	if err != nil {
		return nil, fmt.Errorf("on the GPU: %w", err)
	}
	return in, nil
}

// openCUDA opens GPU 0 for one run; the run's goroutine owns it (cuda.Open
// locks it to its OS thread until Close).
var openCUDA = backend.Opener(backend.Config{Backend: "cuda"})

// cudaSession keeps one GPU, one kernel library and one instance per model
// for many runs (the matrix): weights are uploaded once and every kernel,
// padded pairs included, stays compiled from one run to the next. All its
// runs must come from the goroutine that made the first (the device is
// locked to its thread).
type cudaSession struct {
	dev gpu.Device
	lib *kernels.Library
	ins map[string]*exec.Instance
}

// sharedDevice is the session's device handed to one run: closing it
// leaves the device open for the next. It keeps the device's graphs
// (gpu.Grapher) and its BLAS (gpu.BLAS), which embedding alone would hide
// from the run.
type sharedDevice struct{ gpu.Device }

var (
	_ gpu.Grapher = sharedDevice{}
	_ gpu.BLAS    = sharedDevice{}
)

// Matmul forwards the device's BLAS (gpu.BLAS).
func (s sharedDevice) Matmul(m gpu.Matmul) (gpu.Func, error) { return gpu.MatmulOn(s.Device, m) }

// Conv forwards the device's BLAS (gpu.BLAS).
func (s sharedDevice) Conv(c gpu.Conv) (gpu.Func, error) { return gpu.ConvOn(s.Device, c) }

// BLASName forwards the device's BLAS name.
func (s sharedDevice) BLASName() string { return gpu.BLASNameOf(s.Device) }

func (sharedDevice) Close() error { return nil }

func (s sharedDevice) grapher() (gpu.Grapher, error) {
	g, ok := s.Device.(gpu.Grapher)
	if !ok {
		return nil, fmt.Errorf("%w: %s records no graphs", errors.ErrUnsupported, s.Info().Backend)
	}
	return g, nil
}

func (s sharedDevice) NewGraph(st gpu.Stream, steps []gpu.GraphStep) (gpu.Graph, error) {
	g, err := s.grapher()
	if err != nil {
		return 0, err
	}
	return g.NewGraph(st, steps)
}

func (s sharedDevice) LaunchGraph(h gpu.Graph, st gpu.Stream) error {
	g, err := s.grapher()
	if err != nil {
		return err
	}
	return g.LaunchGraph(h, st)
}

// StaleGraphEvents forwards the device's count (0 when it keeps none).
func (s sharedDevice) StaleGraphEvents() int {
	if c, ok := s.Device.(interface{ StaleGraphEvents() int }); ok {
		return c.StaleGraphEvents()
	}
	return 0
}

// TakeHostStalls forwards the device's stalls (none when it keeps none).
func (s sharedDevice) TakeHostStalls() gpu.HostStalls {
	if c, ok := s.Device.(interface{ TakeHostStalls() gpu.HostStalls }); ok {
		return c.TakeHostStalls()
	}
	return gpu.HostStalls{}
}

func (s sharedDevice) DestroyGraph(h gpu.Graph) error {
	g, err := s.grapher()
	if err != nil {
		return err
	}
	return g.DestroyGraph(h)
}

func (s *cudaSession) device() (gpu.Device, error) {
	if s.dev == nil {
		d, err := openCUDA()
		if err != nil {
			return nil, err
		}
		s.dev, s.lib, s.ins = d, kernels.New(d), map[string]*exec.Instance{}
	}
	return sharedDevice{s.dev}, nil
}

func (s *cudaSession) binder(_ gpu.Device, w sched.Workload) (sched.Binder, error) {
	return bindInstances(s.lib, w, func(p *profiles.Profile) (*exec.Instance, error) {
		key := fmt.Sprintf("%s/bs%d", p.Model, p.Batch)
		if in, ok := s.ins[key]; ok {
			return in, nil
		}
		in, err := buildInstance(s.dev, s.lib, p)
		if err != nil {
			return nil, err
		}
		s.ins[key] = in
		return in, nil
	})
}

// pairs implements bench.Config.Pairs over the session's library.
func (s *cudaSession) pairs(ctx context.Context, freeze bool) string {
	if s.lib == nil {
		return ""
	}
	if !freeze {
		s.lib.FreezePairs(false)
		return ""
	}
	done, pending := s.lib.WaitPairs(ctx)
	s.lib.FreezePairs(true)
	note := fmt.Sprintf("%d pair kernels compiled, %d still compiling when the set froze", done, pending)
	if cd, ok := s.dev.(*cuda.Device); ok {
		total, step := cd.ClockSteering()
		note += fmt.Sprintf("; event clock steered toward the host clock by %v so far (largest step %v)", total, step)
	}
	return note
}

func (s *cudaSession) close() {
	if s.dev != nil {
		s.dev.Close()
		s.dev = nil
	}
}
