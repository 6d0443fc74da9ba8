package sim

import (
	"fmt"
	"slices"
	"time"

	"atoll/gpu"
)

// simGraph is a recorded launch sequence: deep copies of the launches, the
// events recorded after them, and the stream that replays it.
type simGraph struct {
	stream gpu.Stream
	steps  []gpu.GraphStep
	live   bool
}

var _ gpu.Grapher = (*Device)(nil)

// NewGraph implements gpu.Grapher. Each launch is checked as Launch checks
// it and copied; only Plain launches are accepted.
func (d *Device) NewGraph(s gpu.Stream, steps []gpu.GraphStep) (gpu.Graph, error) {
	if d.fault != nil {
		return 0, d.fault
	}
	if d.closed {
		return 0, errClosed
	}
	if _, err := d.stream(s); err != nil {
		return 0, err
	}
	if len(steps) == 0 {
		return 0, fmt.Errorf("%w: a graph needs at least one step", gpu.ErrInvalidLaunch)
	}
	g := simGraph{stream: s, live: true, steps: make([]gpu.GraphStep, len(steps))}
	for i, s := range steps {
		if s.Launch == nil {
			return 0, fmt.Errorf("%w: graph step %d: nil *Launch", gpu.ErrInvalidLaunch, i)
		}
		if s.Launch.Form != gpu.Plain {
			return 0, invalid(s.Launch, "graph launch", "form %s: a graph records Plain launches only", s.Launch.Form)
		}
		if _, err := d.checkBody(s.Launch, "graph launch"); err != nil {
			return 0, fmt.Errorf("graph step %d: %w", i, err)
		}
		var err error
		if d.vendorBpsm, err = d.checkVendor(s.Launch, "graph launch", d.vendorBpsm); err != nil {
			return 0, fmt.Errorf("graph step %d: %w", i, err)
		}
		if s.Event != 0 {
			if _, err := d.event(s.Event); err != nil {
				return 0, fmt.Errorf("graph step %d: %w", i, err)
			}
		}
		l := *s.Launch
		l.Args = s.Launch.Args.Clone()
		l.Vendor = slices.Clone(s.Launch.Vendor)
		g.steps[i] = gpu.GraphStep{Launch: &l, Event: s.Event}
	}
	d.graphs = append(d.graphs, g)
	return gpu.Graph(len(d.graphs)), nil
}

func (d *Device) graph(g gpu.Graph) (*simGraph, error) {
	if d.closed {
		return nil, errClosed
	}
	if g <= 0 || int(g) > len(d.graphs) || !d.graphs[g-1].live {
		return nil, fmt.Errorf("%w: graph %d (not made by this device, or destroyed)", gpu.ErrInvalidHandle, g)
	}
	return &d.graphs[g-1], nil
}

// LaunchGraph implements gpu.Grapher: every step's launch and event record
// in turn on s (the stream g was made for), as Launch and Record would enqueue them, with the host cost
// Config.HostGraphLaunchCost for the whole graph plus
// Config.HostGraphEventCost per event it records.
func (d *Device) LaunchGraph(g gpu.Graph, s gpu.Stream) error {
	if d.fault != nil {
		return d.fault
	}
	gr, err := d.graph(g)
	if err != nil {
		return err
	}
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	if s != gr.stream {
		return fmt.Errorf("%w: graph %d was made for stream %d, not %d", gpu.ErrInvalidHandle, g, gr.stream, s)
	}
	for _, step := range gr.steps {
		if step.Event == 0 {
			continue
		}
		if _, err := d.event(step.Event); err != nil {
			return fmt.Errorf("graph %d: %w (destroyed after the graph was made)", g, err)
		}
	}
	// Every launch was checked when the graph was made; a fault kernel
	// among them shows from the next call on, as after Launch.
	events := 0
	for _, step := range gr.steps {
		if err := d.launch(st, step.Launch, false); err != nil {
			return err
		}
		if step.Event != 0 {
			ev, _ := d.event(step.Event)
			d.record(ev, step.Event, st, false)
			events++
		}
	}
	d.hostBusy(float64(d.cfg.HostGraphLaunchCost + time.Duration(events)*d.cfg.HostGraphEventCost))
	return nil
}

// DestroyGraph implements gpu.Grapher.
func (d *Device) DestroyGraph(g gpu.Graph) error {
	gr, err := d.graph(g)
	if err != nil {
		return err
	}
	gr.live, gr.steps = false, slices.Clip(gr.steps[:0])
	return nil
}
