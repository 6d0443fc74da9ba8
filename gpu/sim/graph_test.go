package sim

import (
	"context"
	"errors"
	"testing"
	"time"

	"atoll/gpu"
)

// graphSteps makes n Plain launches of the rig's kernel, each followed by
// a fresh event.
func graphSteps(t *testing.T, r *rig, n int) []gpu.GraphStep {
	t.Helper()
	steps := make([]gpu.GraphStep, n)
	for i := range steps {
		l := plain("k", 66*(i+1), 256, time.Duration(10*(i+1))*us)
		l.Func = r.f
		l.Args.U32(uint32(i))
		e, err := r.d.NewEvent()
		if err != nil {
			t.Fatal(err)
		}
		steps[i] = gpu.GraphStep{Launch: &l, Event: e}
	}
	return steps
}

// eventTimes waits for steps' events and returns their times.
func eventTimes(t *testing.T, r *rig, steps []gpu.GraphStep) []time.Duration {
	t.Helper()
	r.drain()
	var out []time.Duration
	for _, s := range steps {
		at, err := r.d.Time(s.Event)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, at)
	}
	return out
}

// A graph replays exactly the launches and records it was made from, as if
// each had been launched and recorded, with the host cost of one launch
// for the whole graph and a quarter of one per event by default, the
// graph's own costs where set; changing a launch after NewGraph changes
// nothing.
func TestGraphReplaysLaunches(t *testing.T) {
	const cost = 5 * us
	direct := newRig(t, Config{})
	ds := direct.stream(0)
	dsteps := graphSteps(t, direct, 4)
	for _, s := range dsteps {
		direct.launch(ds, *s.Launch)
		if err := direct.d.Record(s.Event, ds); err != nil {
			t.Fatal(err)
		}
	}
	want := eventTimes(t, direct, dsteps)

	r := newRig(t, Config{HostLaunchCost: cost})
	s := r.stream(0)
	steps := graphSteps(t, r, 4)
	g, err := r.d.NewGraph(s, steps)
	if err != nil {
		t.Fatal(err)
	}
	steps[0].Launch.Cost.Duration = time.Second // the graph keeps its copy
	for rep := range 3 {
		t0 := r.d.Now()
		if err := r.d.LaunchGraph(g, s); err != nil {
			t.Fatal(err)
		}
		if got, want := r.d.Now()-t0, cost+4*cost/4; got != want {
			t.Errorf("replay %d took %v of host time, want %v (one launch, a quarter of one per event)", rep, got, want)
		}
		got := eventTimes(t, r, steps)
		for i := range got {
			if d := got[i] - got[0]; d != want[i]-want[0] {
				t.Errorf("replay %d: event %d at +%v after the first, want +%v", rep, i, d, want[i]-want[0])
			}
		}
	}
	// The call's own cost and each event's, where set, instead.
	rg := newRig(t, Config{HostLaunchCost: cost, HostGraphLaunchCost: 3 * us, HostGraphEventCost: 2 * us})
	sg := rg.stream(0)
	gg, err := rg.d.NewGraph(sg, graphSteps(t, rg, 4))
	if err != nil {
		t.Fatal(err)
	}
	t0 := rg.d.Now()
	if err := rg.d.LaunchGraph(gg, sg); err != nil {
		t.Fatal(err)
	}
	if got, want := rg.d.Now()-t0, 3*us+4*2*us; got != want {
		t.Errorf("a graph of 4 events took %v of host time with its own costs set, want %v", got, want)
	}
	if err := r.d.DestroyGraph(g); err != nil {
		t.Fatal(err)
	}
	if err := r.d.LaunchGraph(g, s); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("LaunchGraph of a destroyed graph: %v, want ErrInvalidHandle", err)
	}
}

// Bad graphs are refused with the reason, before anything is enqueued.
func TestGraphErrors(t *testing.T) {
	r := newRig(t, Config{})
	s := r.stream(0)
	steps := graphSteps(t, r, 2)
	reset := *steps[1].Launch
	reset.Form = gpu.Reset
	noFunc := *steps[1].Launch
	noFunc.Func = 99
	for _, tc := range []struct {
		name   string
		stream gpu.Stream
		steps  []gpu.GraphStep
		want   error
	}{
		{"no steps", s, nil, gpu.ErrInvalidLaunch},
		{"unknown stream", 77, steps, gpu.ErrInvalidHandle},
		{"nil launch", s, []gpu.GraphStep{{Event: steps[0].Event}}, gpu.ErrInvalidLaunch},
		{"reset form", s, []gpu.GraphStep{steps[0], {Launch: &reset, Event: steps[1].Event}}, gpu.ErrInvalidLaunch},
		{"unknown function", s, []gpu.GraphStep{{Launch: &noFunc, Event: steps[1].Event}}, gpu.ErrInvalidHandle},
		{"unknown event", s, []gpu.GraphStep{{Launch: steps[0].Launch, Event: 99}}, gpu.ErrInvalidHandle},
	} {
		if _, err := r.d.NewGraph(tc.stream, tc.steps); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	part, err := r.d.NewPartition(64)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := r.d.NewStream(gpu.StreamOptions{Context: part})
	if err != nil {
		t.Fatal(err)
	}
	g, err := r.d.NewGraph(ps, steps)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.d.LaunchGraph(g, s); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("a graph launched on another stream than its own: %v, want ErrInvalidHandle", err)
	}
	if err := r.d.DestroyEvent(steps[0].Event); err != nil {
		t.Fatal(err)
	}
	if err := r.d.LaunchGraph(g, ps); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("a graph whose event was destroyed: %v, want ErrInvalidHandle", err)
	}
	if r.d.busy() {
		t.Error("a refused graph enqueued work")
	}
}

// A stream that never drains keeps only the ops still queued: completed
// ones are dropped from its front as new ones arrive, and order holds.
func TestBusyStreamStaysSmall(t *testing.T) {
	r := newRig(t, Config{})
	s := r.stream(0)
	st, err := r.d.stream(s)
	if err != nil {
		t.Fatal(err)
	}
	var evs []gpu.Event
	maxLen := 0
	for i := range 5000 {
		r.launch(s, plain("k", 132, 256, 10*us))
		e, err := r.d.NewEvent()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.d.Record(e, s); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
		// Keep about 20 launches queued: run the device half a kernel
		// per launch, so the stream is never idle.
		if i >= 20 {
			if err := r.d.Wait(context.Background(), r.d.Now()+10*us); err != nil {
				t.Fatal(err)
			}
		}
		maxLen = max(maxLen, len(st.ops))
	}
	r.drain()
	if maxLen > 1000 {
		t.Errorf("the stream held up to %d ops with about 40 queued: completed ops are not dropped", maxLen)
	}
	var last time.Duration
	for i, e := range evs {
		at, err := r.d.Time(e)
		if err != nil {
			t.Fatal(err)
		}
		if at <= last {
			t.Fatalf("event %d at %v, not after event %d at %v", i, at, i-1, last)
		}
		last = at
	}
}

// A kernel in a graph runs its profiled duration less ProfileGap (what the
// profiler's own launch and record of it cost beyond the kernel; EventCost
// when zero); one launched on its own, less EventCost, which its record
// then holds. An event holds its stream EventCost. A kernel with a
// GraphDuration runs that in a graph and is as profiled on its own.
func TestProfileGap(t *testing.T) {
	const ec, gap = 2 * us, 3 * us
	lat := gpu.H100SXM.LaunchLatency
	span := func(gap time.Duration, graph, perKernel, graphDur bool) time.Duration {
		r := newRig(t, Config{EventCost: ec, ProfileGap: gap})
		s := r.stream(0)
		steps := graphSteps(t, r, 4) // 10, 20, 30, 40 µs profiled
		if graphDur {
			for _, st := range steps {
				st.Launch.Cost.GraphDuration = st.Launch.Cost.Duration - 5*us
			}
		}
		if !perKernel {
			for i := range steps[:3] {
				steps[i].Event = 0
			}
		}
		start, err := r.d.NewEvent()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.d.Record(start, s); err != nil {
			t.Fatal(err)
		}
		if graph {
			g, err := r.d.NewGraph(s, steps)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.d.LaunchGraph(g, s); err != nil {
				t.Fatal(err)
			}
		} else {
			for _, st := range steps {
				if err := r.d.Launch(s, st.Launch); err != nil {
					t.Fatal(err)
				}
				if st.Event != 0 {
					if err := r.d.Record(st.Event, s); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		end := eventTimes(t, r, steps[3:])[0]
		t0, err := r.d.Time(start)
		if err != nil {
			t.Fatal(err)
		}
		return end - t0
	}
	for _, c := range []struct {
		name                       string
		gap                        time.Duration
		graph, perKernel, graphDur bool
		want                       time.Duration
	}{
		{"launched one by one, a record after each (as profiled)", gap, false, true, false, 100*us - ec + lat},
		{"a graph, an event after each kernel", gap, true, true, false, 100*us - 4*gap + 3*ec + lat},
		{"a graph, one event at the end", gap, true, false, false, 100*us - 4*gap + lat},
		// Without a ProfileGap a graph's kernel runs EventCost less: with
		// an event after each the pass takes its profiled sum.
		{"no gap: a graph, an event after each kernel", 0, true, true, false, 100*us - ec + lat},
		{"no gap: a graph, one event at the end", 0, true, false, false, 100*us - 4*ec + lat},
		// With a graph duration (5 µs less each here) a graph's kernels
		// run that; launched on their own, as profiled.
		{"graph duration: a graph, an event after each kernel", gap, true, true, true, 80*us + 3*ec + lat},
		{"graph duration: a graph, one event at the end", gap, true, false, true, 80*us + lat},
		{"graph duration: one by one, a record after each", gap, false, true, true, 100*us - ec + lat},
	} {
		if got := span(c.gap, c.graph, c.perKernel, c.graphDur); got != c.want {
			t.Errorf("%s: the pass took %v, want %v", c.name, got, c.want)
		}
	}
}

// With GraphYield, a graph's kernel runs at its GraphDuration only while no
// more urgent stream's blocks are active; beside them at the rate of its
// time launched on its own. A kernel launched on its own, a graph beside
// less urgent work and the model off keep their times.
func TestGraphYield(t *testing.T) {
	const ec = 2 * us
	// span runs "g", 40 µs profiled (38 µs launched on its own, less its
	// record) and 20 µs in a graph, on a stream of priority gp (in a graph
	// or not), beside "o", a kernel of 8 µs on a stream of priority op
	// started with it (none when op is 1); it returns g's span.
	span := func(yield, graph bool, gp, op int) time.Duration {
		r := newRig(t, Config{EventCost: ec, GraphYield: yield})
		gs := r.stream(gp)
		if op != 1 {
			r.launch(r.stream(op), plain("o", 1, 32, 8*us+ec))
		}
		l := plain("g", 1, 32, 40*us)
		l.Cost.GraphDuration = 20 * us
		l.Func = r.f
		if graph {
			g, err := r.d.NewGraph(gs, []gpu.GraphStep{{Launch: &l}})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.d.LaunchGraph(g, gs); err != nil {
				t.Fatal(err)
			}
		} else {
			r.launch(gs, l)
		}
		r.drain()
		var start, end time.Duration
		for _, e := range r.trace {
			if e.Name == "g" && e.Kind == TraceKernelStart {
				start = e.Time
			}
			if e.Name == "g" && e.Kind == TraceKernelEnd {
				end = e.Time
			}
		}
		return end - start
	}
	// Beside 8 µs of more urgent work the graph's kernel does 8·20/38 µs
	// of its 20 µs, then the rest at its graph speed.
	done := 8.0 * 20 / 38 // µs of its graph time done beside the 8 µs
	beside := 8*us + time.Duration((20-done)*float64(us))
	for _, c := range []struct {
		name         string
		yield, graph bool
		gp, op       int
		want         time.Duration
	}{
		{"a graph alone", true, true, 0, 1, 20 * us},
		{"a graph beside a more urgent stream", true, true, 0, -5, beside},
		{"a graph beside a less urgent stream", true, true, -5, 0, 20 * us},
		{"a graph beside a stream of its own priority", true, true, 0, 0, 20 * us},
		{"the model off", false, true, 0, -5, 20 * us},
		{"launched on its own beside a more urgent stream", true, false, 0, -5, 38 * us},
	} {
		if got := span(c.yield, c.graph, c.gp, c.op); !near(got, c.want, time.Nanosecond) {
			t.Errorf("%s: the kernel took %v, want %v", c.name, got, c.want)
		}
	}
}
