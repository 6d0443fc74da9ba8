package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"atoll/gpu"
)

// A graph of fill launches replays them: each replay writes what its
// launches say, its events complete in order with times that advance, and
// the host pays one call for the whole graph. Changing a launch after
// NewGraph changes nothing.
func TestGPUGraph(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{Priority: d.Info().Priorities.Greatest})
	must(t, err)
	const n, words = 4, 1 << 14
	p, err := d.Alloc(4 * n * words)
	must(t, err)
	steps := make([]gpu.GraphStep, 0, 2*n)
	for i := range n {
		l := &gpu.Launch{Name: "fill", Func: k.fill, Grid: gpu.D1(words / 256), Block: gpu.D1(256)}
		l.Args.Ptr(p + gpu.Ptr(4*i*words)).U32(uint32(1000 * (i + 1))).I32(words)
		e, err := d.NewEvent()
		must(t, err)
		steps = append(steps, gpu.GraphStep{Launch: l, Event: e})
		e2, err := d.NewEvent()
		must(t, err)
		steps = append(steps, gpu.GraphStep{Launch: spinLaunch(k, 20_000), Event: e2})
	}
	g, err := d.NewGraph(s, steps)
	must(t, err)
	steps[0].Launch.Args.Reset()
	steps[0].Launch.Args.Ptr(0).U32(0).I32(0) // would fault if the graph used it
	for rep := range 3 {
		must(t, d.Memset32(s, p, 0, n*words))
		must(t, d.LaunchGraph(g, s))
		var last time.Duration
		for i, st := range steps {
			at := waitEvent(t, d, st.Event)
			if at < last {
				t.Errorf("replay %d: event %d at %v, before event %d at %v", rep, i, at, i-1, last)
			}
			if i%2 == 1 && at-last < 15*time.Microsecond {
				t.Errorf("replay %d: the 20 µs spin of step %d took %v", rep, i, at-last)
			}
			last = at
		}
		buf := make([]byte, 4*n*words)
		must(t, d.CopyFromDevice(buf, p))
		for i := range n {
			for _, j := range []int{0, words / 2, words - 1} {
				if got, want := binary.LittleEndian.Uint32(buf[4*(i*words+j):]), uint32(1000*(i+1)+j); got != want {
					t.Fatalf("replay %d: buffer %d word %d = %d, want %d", rep, i, j, got, want)
				}
			}
		}
	}
	reset := *steps[1].Launch
	reset.Form = gpu.Reset
	if _, err := d.NewGraph(s, []gpu.GraphStep{{Launch: &reset, Event: steps[1].Event}}); !errors.Is(err, gpu.ErrInvalidLaunch) {
		t.Errorf("a Reset launch in a graph: %v, want ErrInvalidLaunch", err)
	}
	big := *steps[1].Launch
	big.Block = gpu.D1(4096)
	if _, err := d.NewGraph(s, []gpu.GraphStep{steps[0], {Launch: &big, Event: steps[1].Event}}); !errors.Is(err, gpu.ErrInvalidLaunch) {
		t.Errorf("a launch of 4096 threads per block in a graph: %v, want ErrInvalidLaunch", err)
	}
	// The capture stream is usable again after a refused graph.
	if _, err := d.NewGraph(s, steps[:2]); err != nil {
		t.Errorf("a graph after a refused one: %v", err)
	}
	must(t, d.DestroyGraph(g))
	if err := d.LaunchGraph(g, s); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("LaunchGraph of a destroyed graph: %v, want ErrInvalidHandle", err)
	}
	must(t, d.Synchronize())
}

// The host cost of submitting n empty kernels, each followed by an event
// record: one by one (Launch and Record) against one LaunchGraph; and of
// graphs of the same kernels with an event after the last one only, and
// with none. Then the cost of the calls a poll makes on a completed event.
func TestGPUGraphHostCost(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	const reps = 50
	for _, n := range []int{16, 57, 160} {
		steps := make([]gpu.GraphStep, n)
		for i := range steps {
			e, err := d.NewEvent()
			must(t, err)
			steps[i] = gpu.GraphStep{Launch: &gpu.Launch{Name: "empty", Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(32)}, Event: e}
		}
		var one time.Duration
		for range reps {
			t0 := time.Now()
			for _, st := range steps {
				must(t, d.Launch(s, st.Launch))
				must(t, d.Record(st.Event, s))
			}
			one += time.Since(t0)
			must(t, d.Synchronize())
		}
		t.Logf("%3d kernels: launch+record each %7.1f µs", n, float64(one.Microseconds())/reps)
		for _, v := range []struct {
			name  string
			every bool
			last  bool
		}{{"an event after each", true, true}, {"one event at the end", false, true}, {"no event", false, false}} {
			vs := slices.Clone(steps)
			for i := range vs {
				if !v.every && !(v.last && i == n-1) {
					vs[i].Event = 0
				}
			}
			g, err := d.NewGraph(s, vs)
			must(t, err)
			var graph time.Duration
			for range reps {
				t0 := time.Now()
				must(t, d.LaunchGraph(g, s))
				graph += time.Since(t0)
				must(t, d.Synchronize())
			}
			t.Logf("%3d kernels, one graph, %-20s %6.1f µs (%.2f µs per kernel)", n, v.name+":",
				float64(graph.Microseconds())/reps, float64(graph.Microseconds())/reps/float64(n))
			if v.every && graph >= one {
				t.Errorf("%d kernels: a graph took %v of host time, one by one %v", n, graph/reps, one/reps)
			}
			must(t, d.DestroyGraph(g))
		}
	}
	e := steps0(t, d, k, s)
	const calls = 2000
	t0 := time.Now()
	for range calls {
		if ok, err := d.Query(e); err != nil || !ok {
			t.Fatalf("Query: %v %v", ok, err)
		}
	}
	q := time.Since(t0) / calls
	t0 = time.Now()
	for range calls {
		if _, err := d.Time(e); err != nil {
			t.Fatal(err)
		}
	}
	tm := time.Since(t0) / calls
	t0 = time.Now()
	for range calls {
		must(t, d.Record(e, s))
	}
	rec := time.Since(t0) / calls
	must(t, d.Synchronize())
	t.Logf("per call on a completed event: Query %v, Time %v; Record %v", q, tm, rec)
}

// steps0 records one event after an empty kernel and waits for it.
func steps0(t *testing.T, d *Device, k kernels, s gpu.Stream) gpu.Event {
	t.Helper()
	e, err := d.NewEvent()
	must(t, err)
	must(t, d.Launch(s, &gpu.Launch{Name: "empty", Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(32)}))
	must(t, d.Record(e, s))
	waitEvent(t, d, e)
	return e
}

// How long a LaunchGraph takes with earlier graphs still queued on its
// stream: 16 instances of 57 spinning kernels (20 µs each, an event after
// each) launched back to back; the driver keeps HP graphs queued per
// client below where this starts to block (sched/graphs.go, hpGraphsMax).
func TestGPUGraphQueueDepth(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{Priority: d.Info().Priorities.Greatest})
	must(t, err)
	const inst, n = 16, 57
	var gs []gpu.Graph
	for range inst {
		steps := make([]gpu.GraphStep, n)
		for i := range steps {
			e, err := d.NewEvent()
			must(t, err)
			steps[i] = gpu.GraphStep{Launch: spinLaunch(k, 20_000), Event: e}
		}
		g, err := d.NewGraph(s, steps)
		must(t, err)
		gs = append(gs, g)
	}
	for rep := range 2 {
		took := make([]time.Duration, inst)
		for i, g := range gs {
			t0 := time.Now()
			must(t, d.LaunchGraph(g, s))
			took[i] = time.Since(t0)
		}
		must(t, d.Synchronize())
		t.Logf("run %d: LaunchGraph with 0..%d graphs queued ahead (µs): %v", rep, inst-1, took)
	}
}

// What an event-record node's event says between a graph's launch and the
// node's execution (the raw cuEventQuery, logged: the driver's answer is
// not documented), and that Query and Time answer for this replay only:
// not complete until the node runs, then its time, after the launch.
func TestGPUGraphEventSemantics(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	e1, err := d.NewEvent()
	must(t, err)
	e2, err := d.NewEvent()
	must(t, err)
	g, err := d.NewGraph(s, []gpu.GraphStep{{Launch: spinLaunch(k, 2_000_000), Event: e1}, {Launch: spinLaunch(k, 2_000_000), Event: e2}})
	must(t, err)
	var prev time.Duration
	for rep := range 3 {
		at := d.Now()
		must(t, d.LaunchGraph(g, s))
		raw := d.fast(d.drv.cuEventQuery, d.events[e1].native[0])
		ok, err := d.Query(e1)
		must(t, err)
		t.Logf("replay %d: right after LaunchGraph the raw cuEventQuery of the first node's event says %s; Query says %v", rep, raw.String(), ok)
		if ok {
			t.Errorf("replay %d: Query of the first event right after the launch says complete (the spin takes 2 ms)", rep)
		}
		t1 := waitEvent(t, d, e1)
		t2 := waitEvent(t, d, e2)
		if t1-at < 1900*time.Microsecond || t2-t1 < 1900*time.Microsecond || t1 <= prev {
			t.Errorf("replay %d: launched at %v, events at %v and %v (previous replay's last at %v): want each 2 ms spin after the launch", rep, at, t1, t2, prev)
		}
		prev = t2
	}
	t.Logf("stale answers turned away: %d", d.StaleGraphEvents())
}

// TestGPUGraphQueuedEvents: a graph launched behind another on the same
// stream, whose events completed in earlier replays: until the GPU reaches
// it, Query must not answer complete (whatever the raw query says, logged),
// and its times must follow the graph ahead of it. Then the host clock is
// moved 5 ms ahead of the event clock (as drift between rebases does):
// completions must still be seen — a stale check against the host's launch
// time would refuse them for good.
func TestGPUGraphQueuedEvents(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	mk := func() (gpu.Graph, [2]gpu.Event) {
		var evs [2]gpu.Event
		for i := range evs {
			evs[i], err = d.NewEvent()
			must(t, err)
		}
		g, err := d.NewGraph(s, []gpu.GraphStep{{Launch: spinLaunch(k, 1_000_000), Event: evs[0]}, {Launch: spinLaunch(k, 1_000_000), Event: evs[1]}})
		must(t, err)
		return g, evs
	}
	ga, ea := mk()
	gb, eb := mk()
	for rep := range 3 {
		must(t, d.LaunchGraph(gb, s)) // gb's events complete: the state a queued replay may show
		waitEvent(t, d, eb[1])
		must(t, d.LaunchGraph(ga, s))
		must(t, d.LaunchGraph(gb, s))
		raw := d.fast(d.drv.cuEventQuery, d.events[eb[0]].native[0])
		ok, err := d.Query(eb[0])
		must(t, err)
		t.Logf("replay %d: a graph queued behind another: raw cuEventQuery of its first event right after the launch says %s; Query says %v", rep, raw.String(), ok)
		if ok {
			t.Errorf("replay %d: Query of a queued graph's first event says complete while the graph ahead spins", rep)
		}
		a1 := waitEvent(t, d, ea[1])
		b0 := waitEvent(t, d, eb[0])
		b1 := waitEvent(t, d, eb[1])
		if b0-a1 < 900*time.Microsecond || b1-b0 < 900*time.Microsecond {
			t.Errorf("replay %d: the graph ahead ended at %v, the queued one's events at %v and %v: want each 1 ms spin after the one before", rep, a1, b0, b1)
		}
	}
	d.t0 = d.t0.Add(-5 * time.Millisecond) // the host clock now reads 5 ms ahead of the event clock
	for rep := range 3 {
		at := d.Now()
		must(t, d.LaunchGraph(ga, s))
		a1 := waitEvent(t, d, ea[1])
		t.Logf("host clock 5 ms ahead, replay %d: launched at %v (host), last event at %v (event clock)", rep, at, a1)
	}
	t.Logf("stale answers turned away: %d", d.StaleGraphEvents())
}

// TestGPUGraphEventGPUCost measures the GPU time an event recorded between
// two kernels of a graph costs (the simulator's sim.Config.EventCost): a
// graph of n kernels with an event after each against the same graph with
// one event at the end, each replay timed on the GPU from an event
// recorded before it to its last event, the median of reps replays; for an
// empty one-block kernel and for a 5 µs kernel with a block on every SM.
func TestGPUGraphEventGPUCost(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	start := newEvents(t, d, 1)[0]
	const n, reps = 64, 31
	for _, kind := range gapKernels(d, k) {
		last := graphSpan(t, d, s, eventSteps(t, d, n, kind.l, false), reps, nil, start)
		every := graphSpan(t, d, s, eventSteps(t, d, n, kind.l, true), reps, nil, start)
		per := (every - last) / (n - 1)
		t.Logf("%s: %d kernels, one event at the end %v, an event after each %v: %.2f µs of GPU time per event",
			kind.name, n, last, every, float64(per.Nanoseconds())/1e3)
		if per < 0 || per > 20*time.Microsecond {
			t.Errorf("%s: %v per event: outside [0, 20 µs]", kind.name, per)
		}
	}
}

// TestGPUGraphStartLatency measures when a graph's first kernel ends,
// counted from the start of the cuGraphLaunch call (the device clock is the
// host's), as the graph records more events: n empty kernels with an event
// after the first and the last, and with one after every kernel; a single
// launch and record for reference. The median of reps replays, the stream
// idle before each.
func TestGPUGraphStartLatency(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	const reps = 41
	first, err := d.NewEvent()
	must(t, err)
	var one []time.Duration
	for range reps {
		t0 := d.Now()
		must(t, d.Launch(s, &gpu.Launch{Name: "empty", Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(32)}))
		must(t, d.Record(first, s))
		must(t, d.Synchronize())
		one = append(one, waitEvent(t, d, first)-t0)
	}
	t.Logf("one launch and record: its kernel ends %v after the call starts", median(one))
	if m := median(one); m <= 0 {
		t.Errorf("a kernel ended %v after its launch call started: event times are not on the host's clock", m)
	}
	for _, n := range []int{13, 26, 57} {
		for _, every := range []bool{false, true} {
			steps := make([]gpu.GraphStep, n)
			for i := range steps {
				steps[i].Launch = &gpu.Launch{Name: "empty", Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(32)}
				if every || i == 0 || i == n-1 {
					e, err := d.NewEvent()
					must(t, err)
					steps[i].Event = e
				}
			}
			g, err := d.NewGraph(s, steps)
			must(t, err)
			var starts, calls []time.Duration
			for range reps {
				t0, h0 := d.Now(), time.Now()
				must(t, d.LaunchGraph(g, s))
				calls = append(calls, time.Since(h0))
				must(t, d.Synchronize())
				starts = append(starts, waitEvent(t, d, steps[0].Event)-t0)
			}
			events := 2
			if every {
				events = n
			}
			t.Logf("%2d kernels, %2d events: the first kernel ends %v after the call starts; the call takes %v",
				n, events, median(starts), median(calls))
			if m := median(starts); m <= 0 {
				t.Errorf("%d kernels, %d events: the first kernel ended %v after the call started: event times are not on the host's clock", n, events, m)
			}
			must(t, d.DestroyGraph(g))
		}
	}
}

// gapKernel is a kind of kernel the graph-gap tests time.
type gapKernel struct {
	name string
	l    func() *gpu.Launch
}

// gapKernels are empty one-block kernels and 5 µs kernels with a block on
// every SM.
func gapKernels(d *Device, k kernels) []gapKernel {
	sms := d.Info().Spec.SMs
	return []gapKernel{
		{"empty, 1 block", func() *gpu.Launch {
			return &gpu.Launch{Name: "empty", Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(32)}
		}},
		{"5 µs, a block per SM", func() *gpu.Launch {
			l := &gpu.Launch{Name: "spin", Func: k.spin, Grid: gpu.D1(sms), Block: gpu.D1(32)}
			l.Args.U64(5000)
			return l
		}},
	}
}

// newEvents makes n events.
func newEvents(t *testing.T, d *Device, n int) []gpu.Event {
	t.Helper()
	evs := make([]gpu.Event, n)
	for i := range evs {
		e, err := d.NewEvent()
		must(t, err)
		evs[i] = e
	}
	return evs
}

// graphSpan is the median over reps replays of the graph of steps on s of
// the time from start, recorded right before the launch (behind blocker,
// when not nil), to the last step's event.
func graphSpan(t *testing.T, d *Device, s gpu.Stream, steps []gpu.GraphStep, reps int, blocker *gpu.Launch, start gpu.Event) time.Duration {
	t.Helper()
	g, err := d.NewGraph(s, steps)
	must(t, err)
	defer func() { must(t, d.DestroyGraph(g)) }()
	var spans []time.Duration
	for range reps {
		if blocker != nil {
			must(t, d.Launch(s, blocker))
		}
		must(t, d.Record(start, s))
		must(t, d.LaunchGraph(g, s))
		must(t, d.Synchronize())
		spans = append(spans, waitEvent(t, d, steps[len(steps)-1].Event)-waitEvent(t, d, start))
	}
	return median(spans)
}

// eventSteps is n graph steps of mk's launches with an event after the
// last, or after every one.
func eventSteps(t *testing.T, d *Device, n int, mk func() *gpu.Launch, every bool) []gpu.GraphStep {
	t.Helper()
	steps := make([]gpu.GraphStep, n)
	for i := range steps {
		steps[i].Launch = mk()
		if every || i == n-1 {
			steps[i].Event = newEvents(t, d, 1)[0]
		}
	}
	return steps
}

// median is the middle of xs (sorted in place).
func median(xs []time.Duration) time.Duration {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// TestGPUProfileGap measures what a profiled kernel duration holds beyond
// the kernel: the profiler launches a pass kernel by kernel, each followed
// by an event record, queued behind a blocker, and times kernel i from
// event i to event i+1 (profiler.meter.passes). The same n kernels as one
// graph with a single event at the end, and with an event after each,
// queued behind the same blocker, give the gap a graph leaves between
// kernels; the difference per kernel is what a simulator must take off a
// profiled duration to run the kernel inside a graph.
func TestGPUProfileGap(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	const n, reps = 64, 31
	events := newEvents(t, d, n+1)
	for _, kind := range gapKernels(d, k) {
		// The blocker holds the stream while the host enqueues the pass.
		blocker := spinLaunch(k, 3_000_000)
		stream := func() time.Duration {
			var spans []time.Duration
			ls := make([]*gpu.Launch, n)
			for i := range ls {
				ls[i] = kind.l()
			}
			for range reps {
				must(t, d.Launch(s, blocker))
				must(t, d.Record(events[0], s))
				for i, l := range ls {
					must(t, d.Launch(s, l))
					must(t, d.Record(events[i+1], s))
				}
				must(t, d.Synchronize())
				spans = append(spans, waitEvent(t, d, events[n])-waitEvent(t, d, events[0]))
			}
			return median(spans)
		}
		graph := func(every bool) time.Duration {
			return graphSpan(t, d, s, eventSteps(t, d, n, kind.l, every), reps, blocker, events[0])
		}
		st, g1, ge := stream(), graph(false), graph(true)
		perKernel := func(a, b time.Duration) float64 { return float64((a - b).Nanoseconds()) / 1e3 / n }
		t.Logf("%s: %d kernels queued behind a blocker: launched one by one with a record after each %v, "+
			"as a graph with one event %v, with an event after each %v: a profiled duration holds %.2f µs "+
			"more than the kernel in a graph without events, %.2f µs more than in one with an event after each",
			kind.name, n, st, g1, ge, perKernel(st, g1), perKernel(st, ge))
		if st < g1 {
			t.Errorf("%s: kernels launched one by one (%v) ran faster than as a graph (%v)", kind.name, st, g1)
		}
	}
}

// TestGPUWaitLateness measures how late Wait returns after its deadline
// with 0 to 26 events recorded and pending (behind a long kernel, so none
// completes): the host's reaction to an arrival it waits for, while its
// loop polls the events in flight. It also times one Query of a pending
// event.
func TestGPUWaitLateness(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	const reps = 41
	evs := newEvents(t, d, 26)
	for _, pending := range []int{0, 1, 13, 26} {
		var late []time.Duration
		for range reps {
			if pending > 0 {
				must(t, d.Launch(s, spinLaunch(k, 2_000_000)))
				for _, e := range evs[:pending] {
					must(t, d.Record(e, s))
				}
			}
			until := d.Now() + 300*time.Microsecond
			must(t, d.Wait(context.Background(), until))
			late = append(late, d.Now()-until)
			must(t, d.Synchronize())
			if pending > 0 {
				waitEvent(t, d, evs[pending-1]) // drained from the pending set
			}
		}
		slices.Sort(late)
		t.Logf("%2d events pending: Wait returned %v after its deadline (median; p10 %v, p90 %v, max %v)",
			pending, late[len(late)/2], late[len(late)/10], late[len(late)*9/10], late[len(late)-1])
		if late[0] < 0 {
			t.Errorf("%d pending: Wait returned %v before its deadline", pending, -late[0])
		}
	}
	must(t, d.Launch(s, spinLaunch(k, 50_000_000)))
	must(t, d.Record(evs[0], s))
	const q = 2000
	t0 := time.Now()
	for range q {
		if ok, err := d.Query(evs[0]); err != nil || ok {
			t.Fatalf("Query of an event behind a 50 ms kernel: %v, %v", ok, err)
		}
	}
	t.Logf("one Query of a pending event: %.2f µs", float64(time.Since(t0).Nanoseconds())/1e3/q)
	must(t, d.Synchronize())
	waitEvent(t, d, evs[0])
}

// TestGPUIdleGap measures whether a graph of fixed work runs slower the
// longer the GPU and the host idled before it: a graph of 64 kernels each
// writing 8 MiB, launched after the host's own Wait for gaps of 0 to 10 ms
// (the driver's idle wait: it sleeps through long gaps), timed from an
// event recorded right before it to its last event, and its first kernel's
// end from the call's start (the device clock is the host's). On an H200 a
// request served alone ran 6–12 % slower at load 0.1 than at 0.8
// (results/alone-load-h200); this says whether the GPU or the host is
// slower after an idle gap.
func TestGPUIdleGap(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	const n, reps, words = 64, 21, 2 << 20
	buf, err := d.Alloc(4 * words)
	must(t, err)
	defer func() { must(t, d.Free(buf)) }()
	steps := make([]gpu.GraphStep, n)
	evs := newEvents(t, d, 2)
	for i := range steps {
		l := &gpu.Launch{Name: "fill", Func: k.fill, Grid: gpu.D1(words / 256), Block: gpu.D1(256)}
		l.Args.Ptr(buf).U32(uint32(i)).I32(words)
		steps[i].Launch = l
	}
	steps[0].Event, steps[n-1].Event = evs[0], evs[1]
	g, err := d.NewGraph(s, steps)
	must(t, err)
	defer func() { must(t, d.DestroyGraph(g)) }()
	start := newEvents(t, d, 1)[0]
	var base time.Duration
	for _, gap := range []time.Duration{0, 50 * time.Microsecond, 200 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond} {
		var spans, firsts []time.Duration
		for range reps {
			if gap > 0 {
				must(t, d.Wait(context.Background(), d.Now()+gap))
			}
			t0 := d.Now()
			must(t, d.Record(start, s))
			must(t, d.LaunchGraph(g, s))
			if gap > 0 {
				must(t, d.Synchronize())
			}
			spans = append(spans, waitEvent(t, d, evs[1])-waitEvent(t, d, start))
			firsts = append(firsts, waitEvent(t, d, evs[0])-t0)
		}
		must(t, d.Synchronize())
		span := median(spans)
		if gap == 0 {
			base = span
		}
		t.Logf("after %8v idle: %d kernels of %d MiB writes took %v (%+.1f %% against one launched as the last ended), the first ended %v after the call started",
			gap, n, 4*words>>20, span, 100*(float64(span)/float64(base)-1), median(firsts))
		if span <= 0 {
			t.Errorf("after %v idle: the graph took %v", gap, span)
		}
	}
}

// TestGPUCompletionCost measures the host's cost of noticing a completion,
// and how a host that launches kernel by kernel keeps up. First, the
// single calls: a 20 µs kernel with an event after it, polled until done:
// the time of a Query that finds the event pending, of the Query that
// finds it complete, and of the Time that follows (the completion's first
// reading). Then the scheduler's kernel-by-kernel path in miniature (as
// REEF launches an HP request): n short kernels, each launched and
// followed by an event record while fewer than window are in flight, the
// oldest polled and timed, the next launched on its completion; per kernel
// it gives the wall time, the host's time in each call and the time the
// same kernels take as one graph (the GPU's own pace).
func TestGPUCompletionCost(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	const events = 400
	evs := newEvents(t, d, 64)
	var pending, completing, timing, again []time.Duration
	for i := range events {
		e := evs[i%len(evs)]
		must(t, d.Launch(s, spinLaunch(k, 20_000)))
		must(t, d.Record(e, s))
		for {
			t0 := time.Now()
			ok, err := d.Query(e)
			dt := time.Since(t0)
			must(t, err)
			if !ok {
				pending = append(pending, dt)
				continue
			}
			completing = append(completing, dt)
			break
		}
		t0 := time.Now()
		_, err := d.Time(e)
		must(t, err)
		timing = append(timing, time.Since(t0))
		t0 = time.Now()
		_, err = d.Time(e)
		must(t, err)
		again = append(again, time.Since(t0))
	}
	t.Logf("per call, median over %d events: Query pending %v (%d calls), Query finding it complete %v, its first Time %v, a second Time %v",
		events, median(pending), len(pending), median(completing), median(timing), median(again))

	const n, reps = 56, 21
	for _, kernelNs := range []int64{2_000, 6_000, 12_000} {
		steps := make([]gpu.GraphStep, n)
		for i := range steps {
			steps[i].Launch = spinLaunch(k, kernelNs)
		}
		steps[n-1].Event = evs[0]
		g, err := d.NewGraph(s, steps)
		must(t, err)
		var graphs []time.Duration
		for range reps {
			t0 := time.Now()
			must(t, d.LaunchGraph(g, s))
			waitEvent(t, d, evs[0])
			graphs = append(graphs, time.Since(t0))
		}
		must(t, d.DestroyGraph(g))
		for _, window := range []int{1, 4} {
			var walls []time.Duration
			var launch, record, query, tm time.Duration
			queries := 0
			for range reps {
				t0 := time.Now()
				next, head := 0, 0
				for head < n {
					for next < n && next-head < window {
						a := time.Now()
						must(t, d.Launch(s, steps[next].Launch))
						b := time.Now()
						must(t, d.Record(evs[next%len(evs)], s))
						launch, record = launch+b.Sub(a), record+time.Since(b)
						next++
					}
					a := time.Now()
					ok, err := d.Query(evs[head%len(evs)])
					query += time.Since(a)
					queries++
					must(t, err)
					if !ok {
						continue
					}
					a = time.Now()
					_, err = d.Time(evs[head%len(evs)])
					tm += time.Since(a)
					must(t, err)
					head++
				}
				walls = append(walls, time.Since(t0))
			}
			per := func(x time.Duration) float64 { return float64(x.Nanoseconds()) / 1e3 / float64(reps*n) }
			t.Logf("%d kernels of %v, window %d: %.2f µs a kernel (one graph: %.2f); host per kernel: Launch %.2f, Record %.2f, Query %.2f (%.1f calls), Time %.2f µs",
				n, time.Duration(kernelNs), window, float64(median(walls).Nanoseconds())/1e3/n, float64(median(graphs).Nanoseconds())/1e3/n,
				per(launch), per(record), per(query), float64(queries)/float64(reps*n), per(tm))
		}
	}
}

// TestGPUGraphAfterGraph measures what a graph queued behind another on
// its stream costs beyond its own work: two instances of one graph of 64
// kernels (each writing 8 MiB; with one event at the end, or one after
// every fourth kernel as an HP request's chunks) launched back to back,
// the second's span from the first's last event to its own, against one
// instance timed from an event recorded right before it. On the GPU an HP
// request queued behind another is served in about its isolated time
// (results/context-h200: service mean ≈ p50), where the simulator runs it
// straight after the other's last kernel.
func TestGPUGraphAfterGraph(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{Priority: d.Info().Priorities.Greatest})
	must(t, err)
	const n, reps, words = 64, 21, 2 << 20
	buf, err := d.Alloc(4 * words)
	must(t, err)
	defer func() { must(t, d.Free(buf)) }()
	for _, every := range []int{n, 4} {
		var gs [2]gpu.Graph
		var ends [2]gpu.Event
		for j := range gs {
			steps := make([]gpu.GraphStep, n)
			evs := newEvents(t, d, n/every)
			for i := range steps {
				l := &gpu.Launch{Name: "fill", Func: k.fill, Grid: gpu.D1(words / 256), Block: gpu.D1(256)}
				l.Args.Ptr(buf).U32(uint32(i)).I32(words)
				steps[i].Launch = l
				if (i+1)%every == 0 {
					steps[i].Event = evs[i/every]
				}
			}
			ends[j] = steps[n-1].Event
			gs[j], err = d.NewGraph(s, steps)
			must(t, err)
		}
		start := newEvents(t, d, 1)[0]
		var alone, queued []time.Duration
		for range reps {
			must(t, d.Record(start, s))
			must(t, d.LaunchGraph(gs[0], s))
			must(t, d.Synchronize())
			alone = append(alone, waitEvent(t, d, ends[0])-waitEvent(t, d, start))
			must(t, d.LaunchGraph(gs[0], s))
			must(t, d.LaunchGraph(gs[1], s))
			must(t, d.Synchronize())
			queued = append(queued, waitEvent(t, d, ends[1])-waitEvent(t, d, ends[0]))
		}
		a, q := median(alone), median(queued)
		t.Logf("%d kernels, an event after every %d: alone from an event before it %v, queued behind another from its end %v (%+.2f µs)",
			n, every, a, q, float64((q-a).Nanoseconds())/1e3)
		for _, g := range gs {
			must(t, d.DestroyGraph(g))
		}
		if q <= 0 || a <= 0 {
			t.Errorf("spans %v and %v", a, q)
		}
	}
}
