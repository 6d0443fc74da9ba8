package sched

import (
	"errors"
	"fmt"
	"time"

	"atoll/gpu"
)

// BE graphs. Where the device records graphs (gpu.Grapher) and the options
// allow (Options.NoBEGraphs), each chunk of two or more kernels of a BE
// client's iteration (chunks.go) is recorded once, before the run, as a
// graph on the client's stream with one event, after its last kernel. A
// round whose decisions launch a whole chunk (State.LaunchBEChunk from its
// first kernel) submits it with one LaunchGraph; the chunk's kernels share
// that event, so one poll sees them all complete. One instance per chunk
// suffices: a chunk launches again only in the next iteration, which
// starts once this one's last kernel has completed; should a replay still
// be in flight (a cut sent the client back), the chunk's launches go one by
// one instead. Binders must return the same Plain launch of a BE kernel
// every time (Binder), as for HP graphs.

// beChunk is one recorded chunk of a BE client's iteration.
type beChunk struct {
	g    gpu.Graph
	ev   gpu.Event // recorded after its last kernel
	n    int       // kernels
	busy bool      // a replay is in flight
	// flights are the in-flight records of its kernels, made once: a
	// replay's stay queued until its last kernel completes, and the next
	// replay waits for that (busy), so launching one allocates nothing.
	flights []dflight
}

// initBEGraphs records the chunks of every BE client where the core cuts
// chunks (Config.BEChunks). A device without graphs (errors.ErrUnsupported)
// leaves them off; any other failure is the run's.
func (d *driver) initBEGraphs() error {
	d.trace.BEGraphs = "off"
	g, ok := d.dev.(gpu.Grapher)
	switch {
	case !ok:
		d.trace.BEGraphs = "off: the device records no graphs"
		return nil
	case d.opt.NoBEGraphs || len(d.beS) == 0:
		return nil
	}
	t0 := time.Now()
	defer func() { d.trace.Host.GraphBuild += time.Since(t0) }()
	d.grapher = g // release destroys what is made, whatever happens below
	chunks := make([][]*beChunk, len(d.beS))
	for c, b := range d.core.State().BE() {
		n := len(b.Profile().Kernels)
		chunks[c] = make([]*beChunk, n)
		for start := 0; start < n; start = b.ChunkEndOf(start) {
			end := b.ChunkEndOf(start)
			if end-start < 2 {
				continue
			}
			ch, err := d.newBEChunk(g, c, start, end)
			if errors.Is(err, errors.ErrUnsupported) {
				d.trace.BEGraphs, d.trace.BEChunks = "off: "+err.Error(), 0
				return nil
			}
			if err != nil {
				return err
			}
			chunks[c][start] = ch
			d.trace.BEChunks++
		}
	}
	d.beChunks = chunks
	d.trace.BEGraphs = "on"
	return nil
}

// newBEChunk records kernels start..end-1 of BE client c as one graph.
func (d *driver) newBEChunk(g gpu.Grapher, c, start, end int) (*beChunk, error) {
	steps := make([]gpu.GraphStep, end-start)
	for k := start; k < end; k++ {
		l, err := d.binder.Bind(BindRequest{Client: BEClientID(c), Kernel: k, Form: gpu.Plain})
		if err != nil {
			return nil, fmt.Errorf("sched: bind BE client %d kernel %d for its chunk graph: %w", c, k, err)
		}
		gl := *l
		gl.Form = gpu.Plain
		steps[k-start].Launch = &gl
	}
	ev, err := d.dev.NewEvent()
	if err != nil {
		return nil, devErr("NewEvent (BE chunk graph)", err)
	}
	d.allEv = append(d.allEv, ev)
	steps[len(steps)-1].Event = ev
	h, err := g.NewGraph(d.beS[c], steps)
	if err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			return nil, err
		}
		return nil, devErr(fmt.Sprintf("NewGraph (BE client %d, kernels %d..%d)", c, start, end-1), err)
	}
	d.allGraphs = append(d.allGraphs, h)
	return &beChunk{g: h, ev: ev, n: end - start, flights: make([]dflight, end-start)}, nil
}

// wholeChunk returns the recorded chunk that decs launch from their first
// decision on (a BE client's Plain launches on its own stream, from a
// chunk's first kernel to its last, consecutive), with its instance free,
// or nil.
func (d *driver) wholeChunk(decs []Decision) *beChunk {
	if d.beChunks == nil || len(decs) == 0 {
		return nil
	}
	l := decs[0].Launch
	if decs[0].Kind != DecLaunch || l.Client.Class != BE || l.Stream != l.Client || l.Form != gpu.Plain {
		return nil
	}
	ch := d.beChunks[l.Client.Index][l.Kernel]
	if ch == nil || ch.busy || len(decs) < ch.n {
		return nil
	}
	for k, dec := range decs[:ch.n] {
		m := dec.Launch
		if dec.Kind != DecLaunch || m.Client != l.Client || m.Stream != l.Stream || m.Form != gpu.Plain || m.Kernel != l.Kernel+k || m.ID != l.ID+LaunchID(k) {
			return nil
		}
	}
	return ch
}

// launchChunk submits decs, the whole chunk ch (wholeChunk), as one replay
// of its graph.
func (d *driver) launchChunk(ch *beChunk, decs []Decision) error {
	t0 := time.Now()
	if d.opt.OnDecision != nil {
		for _, dec := range decs {
			d.opt.OnDecision(dec)
		}
	}
	l0 := decs[0].Launch
	c := l0.Client.Index
	s := d.beS[c]
	tLaunch := time.Now()
	if err := d.grapher.LaunchGraph(ch.g, s); err != nil {
		return devErr(fmt.Sprintf("LaunchGraph (BE client %d, kernels %d..%d)", c, l0.Kernel, l0.Kernel+ch.n-1), err)
	}
	tRecord := time.Now()
	ch.busy = true
	at := d.dev.Now()
	q, ok := d.queues[s]
	if !ok {
		d.qorder = append(d.qorder, s)
	}
	fs := ch.flights
	for k, dec := range decs {
		f := &fs[k]
		*f = dflight{l: dec.Launch, stream: s, ev: ch.ev, raisedAt: -1, graphEv: true, at: at}
		d.attribute(dec.Launch, f, at)
		q = append(q, f)
	}
	fs[ch.n-1].chunk = ch
	d.queues[s] = q
	d.beEnqueued(c, at)
	d.trace.Launches += ch.n
	d.trace.BEChunkLaunches++
	d.hostSpent(t0, tLaunch, tRecord, time.Now())
	return nil
}
