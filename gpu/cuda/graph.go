package cuda

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"atoll/gpu"
)

// Driver constants of stream capture (cuda.h).
const (
	captureModeRelaxed  = 2   // CU_STREAM_CAPTURE_MODE_RELAXED
	eventRecordExternal = 0x1 // CU_EVENT_RECORD_EXTERNAL: an event-record node in the captured graph
)

// graphDriver holds the CUDA graph entry points (CUDA 11.1+), all optional:
// a driver without them answers NewGraph with errors.ErrUnsupported.
type graphDriver struct {
	cuStreamBeginCapture        uintptr // _v2
	cuStreamEndCapture          uintptr
	cuEventRecordWithFlags      uintptr
	cuGraphInstantiateWithFlags uintptr
	cuGraphLaunch               uintptr
	cuGraphExecDestroy          uintptr
	cuGraphDestroy              uintptr
}

func (g *graphDriver) missing() []string {
	var out []string
	for _, e := range []struct {
		p    uintptr
		name string
	}{
		{g.cuStreamBeginCapture, "cuStreamBeginCapture_v2"}, {g.cuStreamEndCapture, "cuStreamEndCapture"},
		{g.cuEventRecordWithFlags, "cuEventRecordWithFlags"}, {g.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags"},
		{g.cuGraphLaunch, "cuGraphLaunch"}, {g.cuGraphExecDestroy, "cuGraphExecDestroy"}, {g.cuGraphDestroy, "cuGraphDestroy"},
	} {
		if e.p == 0 {
			out = append(out, e.name)
		}
	}
	return out
}

func (g *graphDriver) load(opt func(*uintptr, string)) {
	opt(&g.cuStreamBeginCapture, "cuStreamBeginCapture_v2")
	opt(&g.cuStreamEndCapture, "cuStreamEndCapture")
	opt(&g.cuEventRecordWithFlags, "cuEventRecordWithFlags")
	opt(&g.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags")
	opt(&g.cuGraphLaunch, "cuGraphLaunch")
	opt(&g.cuGraphExecDestroy, "cuGraphExecDestroy")
	opt(&g.cuGraphDestroy, "cuGraphDestroy")
}

type graphRec struct {
	exec   uintptr // CUgraphExec
	ctx    int32
	stream gpu.Stream // the stream it replays on; its products use that stream's workspace
	events []gpu.Event
	live   bool
}

var _ gpu.Grapher = (*Device)(nil)

// NewGraph implements gpu.Grapher with stream capture: on a private stream
// of s's context, each step's launch goes through cuLaunchKernel and its
// event through cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL), which
// capture turns into kernel and event-record nodes; the graph is then
// instantiated once (cuGraphInstantiateWithFlags). Every launch is checked
// as Launch checks it before capture starts. Products and convolutions are
// captured with s's workspace: s runs its graphs and its launches in
// order, so none of them overlaps another's use of it.
func (d *Device) NewGraph(s gpu.Stream, steps []gpu.GraphStep) (gpu.Graph, error) {
	if err := d.live(); err != nil {
		return 0, err
	}
	if m := d.drv.graph.missing(); len(m) > 0 {
		return 0, fmt.Errorf("%w: cuda: the driver lacks %s (CUDA graphs need a CUDA 11.4 or newer driver)", errors.ErrUnsupported, strings.Join(m, ", "))
	}
	st, err := d.stream(s)
	if err != nil {
		return 0, err
	}
	c := st.ctx
	if len(steps) == 0 {
		return 0, fmt.Errorf("%w: cuda: a graph needs at least one step", gpu.ErrInvalidLaunch)
	}
	var evs []gpu.Event
	for i, step := range steps {
		if step.Launch != nil && step.Launch.Form != gpu.Plain {
			return 0, fmt.Errorf("%w: cuda: graph step %d: kernel %q in form %s: a graph records Plain launches only", gpu.ErrInvalidLaunch, i, step.Launch.Name, step.Launch.Form)
		}
		if _, err := d.checkLaunch(step.Launch); err != nil {
			return 0, fmt.Errorf("graph step %d: %w", i, err)
		}
		if step.Event == 0 {
			continue
		}
		ev, err := d.event(step.Event)
		if err != nil {
			return 0, fmt.Errorf("graph step %d: %w", i, err)
		}
		if ev.native[c] == 0 {
			if ev.native[c], err = d.newNative(c); err != nil {
				return 0, err
			}
		}
		evs = append(evs, step.Event)
	}
	cr := &d.ctxs[c]
	if err := d.use(c); err != nil {
		return 0, err
	}
	if cr.capStr == 0 {
		if err := check("cuStreamCreateWithPriority", d.drv.call(d.drv.cuStreamCreateWithPriority,
			uintptr(unsafe.Pointer(&cr.capStr)), cuStreamNonBlocking, uintptr(d.info.Priorities.Least))); err != nil {
			return 0, err
		}
	}
	// The workspaces are made before capture: an allocation is no node.
	ws := &st.ws
	for _, step := range steps {
		f := &d.funcs[step.Launch.Func]
		if f.matmul != nil || f.conv != nil {
			if _, err := d.blasWS(&ws.blas); err != nil {
				return 0, err
			}
		}
		if f.conv != nil {
			if _, err := d.colWS(&ws.col); err != nil {
				return 0, err
			}
		}
	}
	g := d.drv.graph
	if err := check("cuStreamBeginCapture_v2", d.fast(g.cuStreamBeginCapture, cr.capStr, captureModeRelaxed)); err != nil {
		return 0, err
	}
	var capErr error
	for i, step := range steps {
		if capErr = d.launchOn(c, cr.capStr, ws, step.Launch); capErr != nil {
			capErr = fmt.Errorf("graph step %d: %w", i, capErr)
			break
		}
		if step.Event == 0 {
			continue
		}
		if capErr = check("cuEventRecordWithFlags", d.fast(g.cuEventRecordWithFlags, d.events[step.Event].native[c], cr.capStr, eventRecordExternal)); capErr != nil {
			capErr = fmt.Errorf("graph step %d: %w", i, capErr)
			break
		}
	}
	// End the capture whatever happened, so the stream is usable again.
	var graph uintptr
	endErr := check("cuStreamEndCapture", d.drv.call(g.cuStreamEndCapture, cr.capStr, uintptr(unsafe.Pointer(&graph))))
	if capErr == nil {
		capErr = endErr
	}
	if capErr == nil {
		var exec uintptr
		capErr = check("cuGraphInstantiateWithFlags", d.drv.call(g.cuGraphInstantiateWithFlags, uintptr(unsafe.Pointer(&exec)), graph, 0))
		if capErr == nil {
			d.graphs = append(d.graphs, graphRec{exec: exec, ctx: c, stream: s, events: evs, live: true})
		}
	}
	if graph != 0 {
		if err := check("cuGraphDestroy", d.fast(g.cuGraphDestroy, graph)); err != nil && capErr == nil {
			capErr = err
		}
	}
	if capErr != nil {
		return 0, capErr
	}
	return gpu.Graph(len(d.graphs)), nil
}

func (d *Device) graph(g gpu.Graph) (*graphRec, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	if g <= 0 || int(g) > len(d.graphs) || !d.graphs[g-1].live {
		return nil, fmt.Errorf("%w: cuda: graph %d", gpu.ErrInvalidHandle, g)
	}
	return &d.graphs[g-1], nil
}

// LaunchGraph implements gpu.Grapher: one cuGraphLaunch; the graph's events
// are then pending on s as Record leaves them.
func (d *Device) LaunchGraph(g gpu.Graph, s gpu.Stream) error {
	gr, err := d.graph(g)
	if err != nil {
		return err
	}
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	if s != gr.stream {
		return fmt.Errorf("%w: cuda: graph %d was made for stream %d, not %d", gpu.ErrInvalidHandle, g, gr.stream, s)
	}
	for _, e := range gr.events {
		if _, err := d.event(e); err != nil {
			return fmt.Errorf("graph %d: %w (destroyed after the graph was made)", g, err)
		}
	}
	if err := d.use(st.ctx); err != nil {
		return err
	}
	if err := check("cuGraphLaunch", d.fast(d.drv.graph.cuGraphLaunch, gr.exec, st.h)); err != nil {
		return err
	}
	for _, e := range gr.events {
		d.recorded(e, st.ctx, s, true)
	}
	return nil
}

// DestroyGraph implements gpu.Grapher.
func (d *Device) DestroyGraph(g gpu.Graph) error {
	gr, err := d.graph(g)
	if err != nil {
		return err
	}
	gr.live = false
	if err := d.use(gr.ctx); err != nil {
		return err
	}
	return check("cuGraphExecDestroy", d.fast(d.drv.graph.cuGraphExecDestroy, gr.exec))
}
