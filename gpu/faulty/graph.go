package faulty

import (
	"errors"
	"fmt"

	"atoll/gpu"
)

var _ gpu.Grapher = (*Device)(nil)

// NewGraph forwards to the wrapped device when it is a gpu.Grapher and
// answers errors.ErrUnsupported otherwise. The wrapper keeps the graph's
// launches, so LaunchGraph applies the FailLaunch and Poison rules to each.
func (f *Device) NewGraph(s gpu.Stream, steps []gpu.GraphStep) (gpu.Graph, error) {
	if err := f.enter("NewGraph"); err != nil {
		return 0, err
	}
	g, ok := f.inner.(gpu.Grapher)
	if !ok {
		return 0, fmt.Errorf("%w: faulty: the wrapped device (%s) records no graphs", errors.ErrUnsupported, f.inner.Info().Backend)
	}
	h, err := g.NewGraph(s, steps)
	if err != nil {
		return 0, err
	}
	ls := make([]gpu.Launch, len(steps))
	for i, s := range steps {
		ls[i] = *s.Launch
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.graphs == nil {
		f.mu.graphs = map[gpu.Graph][]gpu.Launch{}
	}
	f.mu.graphs[h] = ls
	return h, nil
}

// LaunchGraph fails when its call is picked by a rule, or when a FailLaunch
// or Poison rule picks one of the graph's launches (in order, each counted
// as that rule's launch); a failed call launches nothing.
func (f *Device) LaunchGraph(g gpu.Graph, s gpu.Stream) error {
	if err := f.enter("LaunchGraph"); err != nil {
		return err
	}
	f.mu.Lock()
	ls := f.mu.graphs[g]
	f.mu.Unlock()
	for i := range ls {
		if err := f.launchFault("LaunchGraph", &ls[i]); err != nil {
			return err
		}
	}
	gr, ok := f.inner.(gpu.Grapher)
	if !ok {
		return fmt.Errorf("%w: faulty: graph %d", gpu.ErrInvalidHandle, g)
	}
	return gr.LaunchGraph(g, s)
}

func (f *Device) DestroyGraph(g gpu.Graph) error {
	if err := f.enter("DestroyGraph"); err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.mu.graphs, g)
	f.mu.Unlock()
	gr, ok := f.inner.(gpu.Grapher)
	if !ok {
		return fmt.Errorf("%w: faulty: graph %d", gpu.ErrInvalidHandle, g)
	}
	return gr.DestroyGraph(g)
}

var _ gpu.BLAS = (*Device)(nil)

// Matmul forwards to the wrapped device (errors.ErrUnsupported when it has
// no BLAS); launches of the Func it returns are Launches like any other.
func (f *Device) Matmul(m gpu.Matmul) (gpu.Func, error) {
	if err := f.enter("Matmul"); err != nil {
		return 0, err
	}
	return gpu.MatmulOn(f.inner, m)
}

// Conv forwards to the wrapped device, as Matmul does.
func (f *Device) Conv(c gpu.Conv) (gpu.Func, error) {
	if err := f.enter("Conv"); err != nil {
		return 0, err
	}
	return gpu.ConvOn(f.inner, c)
}

// BLASName forwards to the wrapped device.
func (f *Device) BLASName() string { return gpu.BLASNameOf(f.inner) }
