package sched

import (
	"errors"
	"fmt"
	"time"

	"atoll/gpu"
	"atoll/profiles"
)

// HP graphs. A request of an HP client launched whole in one step — its
// kernels 0..n-1 in Plain form, one decision after another, as policies
// that never hold HP back decide them on arrival — needs no decision
// between its kernels, so the driver submits it as one recorded graph
// (gpu.Grapher, a CUDA graph on the GPU): one host call per request instead
// of a launch and an event record per kernel. The graph records one event
// per chunk of the request's kernels (at most BEChunkWork of profiled work
// together, as BE iterations are cut), after the chunk's last kernel, and
// the chunk's kernels share it: the core sees them complete together, and
// attribution splits a request by chunks (Options.HPKernelEvents: an
// event per kernel). A graph's events can be in flight
// for one replay only, so each client keeps a few instances and takes a
// free one per request; with none free (more requests queued than
// instances) the request waits in the driver until one completes, which
// also keeps the device's queue short: with 17 ResNet-50 requests queued
// on an H100 each cuGraphLaunch blocked for 0.8 ms
// (results/speed-h100-graphs). Binders must return the same Plain launch
// of an HP kernel every time (Binder).

// hpGraphsPerClient is the instances per HP client, and so its requests
// queued on the device: one running and the next ones ready behind it.
// All are recorded before the run (about 1.3 ms of host time each for
// ResNet-50 on an H100), none on the launch path.
const hpGraphsPerClient = 4

// hpGraph is one instance of an HP client's recorded kernel sequence.
type hpGraph struct {
	g      gpu.Graph
	events []gpu.Event // per kernel, the event recorded after its chunk
}

// hpGraphs are one HP client's instances (per pass variant), and its
// launches held until an instance is free.
type hpGraphs struct {
	free [][]*hpGraph // per variant (Launch.Variant)
	held []heldLaunch
}

// heldLaunch is a launch decision held in the driver: a whole request (n
// kernels, launch IDs first.ID to first.ID+n-1) or, with n zero, the single
// launch first. A request under overload is held as one of these, not as
// its n decisions.
type heldLaunch struct {
	first Launch
	n     int
	at    time.Duration // when the core decided it
}

// decision is the i-th launch decision of h.
func (h heldLaunch) decision(i int) Decision {
	l := h.first
	if h.n > 0 {
		l.ID, l.Kernel = h.first.ID+LaunchID(i), i
	}
	return Decision{Kind: DecLaunch, Time: h.at, Launch: l}
}

// initGraphs makes the first instances of every HP client when the device
// records graphs and the options allow them. A device without graphs
// (errors.ErrUnsupported) leaves them off; any other failure is the run's.
func (d *driver) initGraphs() error {
	g, ok := d.dev.(gpu.Grapher)
	if !ok || d.opt.NoHPGraphs {
		d.trace.HPGraphs = "off"
		if !ok {
			d.trace.HPGraphs = "off: the device records no graphs"
		}
		return nil
	}
	d.grapher = g
	d.graphs = make([]hpGraphs, len(d.hpS))
	for c := range d.hpS {
		d.graphs[c].free = make([][]*hpGraph, len(d.core.State().HP()[c].vars))
		for v := range d.graphs[c].free {
			for range hpGraphsPerClient {
				hg, err := d.newHPGraph(c, v)
				if errors.Is(err, errors.ErrUnsupported) {
					d.graphs = nil // d.grapher stays: release destroys what was made
					d.trace.HPGraphs = "off: " + err.Error()
					return nil
				}
				if err != nil {
					return err
				}
				d.graphs[c].free[v] = append(d.graphs[c].free[v], hg)
			}
		}
	}
	d.trace.HPGraphs = "on"
	if hp := d.core.State().HP(); len(hp) > 0 {
		for k, end := range hpEventEnds(hp[0].Variant(0), d.opt.HPKernelEvents) {
			if end == k+1 { // an event after kernel k
				d.trace.HPGraphEvents++
			}
		}
	}
	return nil
}

// newHPGraph records one instance of HP client c's pass variant v.
func (d *driver) newHPGraph(c, v int) (*hpGraph, error) {
	t0 := time.Now()
	defer func() { d.trace.Host.GraphBuild += time.Since(t0) }()
	prof := d.core.State().HP()[c].Variant(v)
	n := len(prof.Kernels)
	steps := make([]gpu.GraphStep, n)
	hg := &hpGraph{events: make([]gpu.Event, n)}
	ends := hpEventEnds(prof, d.opt.HPKernelEvents)
	var ev gpu.Event
	for k := range n {
		l, err := d.binder.Bind(BindRequest{Client: HPClientID(c), Kernel: k, Variant: v, Form: gpu.Plain})
		if err != nil {
			return nil, fmt.Errorf("sched: bind HP client %d kernel %d%s for its graph: %w", c, k, variantTag(v), err)
		}
		gl := *l
		gl.Form = gpu.Plain
		if k == 0 || ends[k-1] == k { // k starts a chunk: its event
			if ev, err = d.dev.NewEvent(); err != nil {
				return nil, devErr("NewEvent (HP graph)", err)
			}
			d.allEv = append(d.allEv, ev)
		}
		steps[k].Launch = &gl
		if ends[k] == k+1 {
			steps[k].Event = ev
		}
		hg.events[k] = ev
	}
	g, err := d.grapher.NewGraph(d.hpS[c], steps)
	if err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			return nil, err
		}
		return nil, devErr(fmt.Sprintf("NewGraph (HP client %d, %d kernels)", c, n), err)
	}
	hg.g = g
	d.allGraphs = append(d.allGraphs, g)
	return hg, nil
}

// hpEventEnds is, per kernel of an HP pass p, the end (exclusive) of the
// kernels whose completions one event of its graph records: the kernel
// after it with perKernel, else its chunk's (chunkEnds).
func hpEventEnds(p *profiles.Profile, perKernel bool) []int {
	if !perKernel {
		return chunkEnds(p)
	}
	ends := make([]int, len(p.Kernels))
	for k := range ends {
		ends[k] = k + 1
	}
	return ends
}

// wholeRequest reports how many of decs, from the first, launch one whole
// request of an HP client in Plain form (its kernels 0..n-1 in order), or
// 0.
func (d *driver) wholeRequest(decs []Decision) int {
	if d.graphs == nil || len(decs) == 0 {
		return 0
	}
	l := decs[0].Launch
	if decs[0].Kind != DecLaunch || l.Client.Class != HP || l.Form != gpu.Plain || l.Kernel != 0 {
		return 0
	}
	n := len(d.core.State().HP()[l.Client.Index].Variant(l.Variant).Kernels)
	if len(decs) < n {
		return 0
	}
	for k, dec := range decs[:n] {
		m := dec.Launch
		if dec.Kind != DecLaunch || m.Client != l.Client || m.Stream != l.Stream || m.Form != gpu.Plain || m.Kernel != k || m.Variant != l.Variant || m.ID != l.ID+LaunchID(k) || dec.Time != decs[0].Time {
			return 0
		}
	}
	return n
}

// applyAll applies decs in order through apply, submitting each whole HP
// request among them as one graph. A whole request that finds every
// instance of its client in flight is held, with every later HP launch of
// the client (stream order), until an instance completes (submitHeld).
func (d *driver) applyAll(decs []Decision, apply func(Decision) error) error {
	for i := 0; i < len(decs); i++ {
		dec := decs[i]
		if ch := d.wholeChunk(decs[i:]); ch != nil {
			if err := d.launchChunk(ch, decs[i:i+ch.n]); err != nil {
				return err
			}
			i += ch.n - 1
			continue
		}
		if d.graphs != nil && dec.Kind == DecLaunch && dec.Launch.Client.Class == HP {
			gs := &d.graphs[dec.Launch.Client.Index]
			n := d.wholeRequest(decs[i:])
			if len(gs.held) > 0 || (n > 0 && len(gs.free[dec.Launch.Variant]) == 0) {
				if n > 0 {
					d.trace.GraphWaits++
				}
				gs.held = append(gs.held, heldLaunch{first: dec.Launch, n: n, at: dec.Time})
				i += max(n, 1) - 1
				continue
			}
			if n > 0 {
				if err := d.launchGraph(heldLaunch{first: dec.Launch, n: n, at: dec.Time}); err != nil {
					return err
				}
				i += n - 1
				continue
			}
		}
		if err := apply(dec); err != nil {
			return err
		}
	}
	return nil
}

// submitHeld submits, per HP client, the held launches that can go now: a
// whole request when an instance is free, single launches as they are.
func (d *driver) submitHeld() error {
	for c := range d.graphs {
		gs := &d.graphs[c]
		for len(gs.held) > 0 {
			h := gs.held[0]
			if h.n > 0 {
				if len(gs.free[h.first.Variant]) == 0 {
					break
				}
				if err := d.launchGraph(h); err != nil {
					return err
				}
			} else if err := d.apply(h.decision(0)); err != nil {
				return err
			}
			gs.held = gs.held[1:]
		}
		if len(gs.held) == 0 {
			gs.held = nil
		}
	}
	return nil
}

// launchGraph submits the launches of one whole HP request (h) as a free
// graph instance of its client (the caller checked there is one).
func (d *driver) launchGraph(h heldLaunch) error {
	c, v := h.first.Client.Index, h.first.Variant
	gs := &d.graphs[c]
	hg := gs.free[v][len(gs.free[v])-1]
	gs.free[v] = gs.free[v][:len(gs.free[v])-1]
	t0 := time.Now()
	if d.opt.OnDecision != nil {
		for k := range h.n {
			d.opt.OnDecision(h.decision(k))
		}
	}
	s := d.hpS[c]
	submitted := d.dev.Now()
	tLaunch := time.Now()
	if err := d.grapher.LaunchGraph(hg.g, s); err != nil {
		gs.free[v] = append(gs.free[v], hg)
		return devErr(fmt.Sprintf("LaunchGraph (request of HP client %d, %d kernels)", c, h.n), err)
	}
	tRecord := time.Now()
	q, ok := d.queues[s]
	if !ok {
		d.qorder = append(d.qorder, s)
	}
	// The request's kernels were submitted at one instant beside the same
	// BE launches: their neighbours are found once (attributeWhole), and
	// their in-flight records are made in one allocation.
	fs := make([]dflight, h.n)
	d.attributeWhole(h, submitted)
	for k := range h.n {
		f := &fs[k]
		*f = dflight{l: h.decision(k).Launch, stream: s, ev: hg.events[k], raisedAt: -1, graphEv: true}
		if k == h.n-1 {
			f.graph = hg
		}
		q = append(q, f)
	}
	d.queues[s] = q
	d.trace.Launches += h.n
	d.trace.GraphLaunches++
	d.hostSpent(t0, tLaunch, tRecord, time.Now())
	return nil
}

// graphDone returns f's graph instance (on the last kernel of its request)
// to its client's free list once the kernel has completed; the poll then
// submits what was held for it (submitHeld).
func (d *driver) graphDone(f *dflight) {
	if f.chunk != nil {
		f.chunk.busy = false
	}
	if f.graph != nil {
		gs := &d.graphs[f.l.Client.Index]
		gs.free[f.l.Variant] = append(gs.free[f.l.Variant], f.graph)
		d.freed = true
	}
}
