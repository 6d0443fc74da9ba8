package sched_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/faulty"
	"atoll/gpu/sim"
	"atoll/policies"
	"atoll/sched"
)

// runSim runs w under the named policy on a simulator of cfg (an H100,
// seed 1, where cfg leaves them out) with opt, its Policy set.
func runSim(t *testing.T, name string, w sched.Workload, cfg sim.Config, opt sched.Options) *sched.Trace {
	t.Helper()
	pol, err := policies.ByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Spec.Name == "" {
		cfg.Spec = gpu.H100SXM
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	dev, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	opt.Policy = pol
	tr, err := sched.Run(context.Background(), dev, w, opt)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// periodic is arrivals every period from first, before until.
func periodic(first, period, until time.Duration) []time.Duration {
	var arr []time.Duration
	for a := first; a < until; a += period {
		arr = append(arr, a)
	}
	return arr
}

// runGraphs runs w under the named policy on a simulator with the given
// host cost per launch, with HP graphs on or off.
func runGraphs(t *testing.T, name string, w sched.Workload, dur, hostCost time.Duration, noGraphs bool) *sched.Trace {
	t.Helper()
	return runSim(t, name, w, sim.Config{HostLaunchCost: hostCost}, sched.Options{Duration: dur, Warmup: dur / 8, NoHPGraphs: noGraphs})
}

// With no host cost per launch, a graph is exactly its launches and
// records: every policy's trace is the same with HP graphs on and off —
// the same requests at the same device times, the same BE work — whether a
// request went as a graph (policies that launch HP whole) or kernel by
// kernel (REEF's HP window, padded launches, every instance in flight).
func TestHPGraphsChangeNothingButHostCost(t *testing.T) {
	const dur = 30 * time.Millisecond
	// atoll with padding mixes whole requests with padded kernels, which
	// wait behind held requests of their client.
	for _, name := range append(policies.Names(), "atoll:padding=true") {
		t.Run(name, func(t *testing.T) {
			// A period shorter than the solo latency queues requests, so
			// instances run out and requests wait in the driver.
			for _, period := range []time.Duration{time.Millisecond, 100 * time.Microsecond} {
				w := smallWorkload(t, period, dur)
				on := runGraphs(t, name, w, dur, 0, false)
				off := runGraphs(t, name, w, dur, 0, true)
				if on.HPGraphs != "on" || off.HPGraphs != "off" {
					t.Fatalf("HPGraphs %q with graphs, %q without", on.HPGraphs, off.HPGraphs)
				}
				if off.GraphLaunches != 0 {
					t.Errorf("%d graph launches with graphs off", off.GraphLaunches)
				}
				if name == "dedicated" && period < time.Millisecond && on.GraphWaits == 0 {
					t.Errorf("period %v: no request waited for a graph instance: the queue should have used up every one", period)
				}
				if name == "atoll:padding=true" && period < time.Millisecond && (on.PaddedLaunches == 0 || on.GraphLaunches == 0) {
					t.Errorf("period %v: %d padded launches, %d graphs: want both", period, on.PaddedLaunches, on.GraphLaunches)
				}
				if !reflect.DeepEqual(on.Requests, off.Requests) {
					t.Errorf("period %v: requests differ with graphs on (%d graph launches)", period, on.GraphLaunches)
				}
				if on.BEWork != off.BEWork || on.Launches != off.Launches || !reflect.DeepEqual(on.Stats, off.Stats) {
					t.Errorf("period %v: BE work %v / %v, launches %d / %d, stats differ: %v",
						period, on.BEWork, off.BEWork, on.Launches, off.Launches, !reflect.DeepEqual(on.Stats, off.Stats))
				}
			}
		})
	}
}

// Policies that launch an HP request whole submit it as one graph; REEF's
// window of 4 launches never holds a whole request, so it never does.
func TestHPGraphsUsedWhereRequestsLaunchWhole(t *testing.T) {
	const dur = 30 * time.Millisecond
	w := smallWorkload(t, time.Millisecond, dur)
	for name, want := range map[string]bool{"dedicated": true, "priority": true, "orion": true, "atoll": true, "reef": false} {
		tr := runGraphs(t, name, w, dur, 0, false)
		requests := tr.Stats.Requests
		switch {
		case want && tr.GraphLaunches != requests:
			t.Errorf("%s: %d graph launches for %d requests, want one each", name, tr.GraphLaunches, requests)
		case !want && tr.GraphLaunches != 0:
			t.Errorf("%s: %d graph launches, want none", name, tr.GraphLaunches)
		}
	}
}

// With a host cost per launch, a graph costs one launch for the whole
// request: HP requests finish sooner, and the driver's host time per
// request falls by about the kernels it no longer launches one by one.
func TestHPGraphsCutHostCost(t *testing.T) {
	const dur = 30 * time.Millisecond
	w := smallWorkload(t, time.Millisecond, dur)
	w.BE = nil
	on := runGraphs(t, "dedicated", w, dur, 20*time.Microsecond, false)
	off := runGraphs(t, "dedicated", w, dur, 20*time.Microsecond, true)
	mean := func(tr *sched.Trace) time.Duration {
		var s time.Duration
		for _, r := range tr.Requests {
			s += r.Service()
		}
		return s / time.Duration(len(tr.Requests))
	}
	// 8 kernels of 20 µs of host time each: the first kernel starts after
	// one launch either way, the last waits for the host's 8th launch
	// without graphs; the kernels are longer than 20 µs, so the host stays
	// ahead and the service time moves by about one launch, not seven.
	if on, off := mean(on), mean(off); on > off {
		t.Errorf("mean service %v with graphs, %v without: graphs made HP slower", on, off)
	}
	if on.GraphLaunches != on.Stats.Requests || on.Stats.Requests != off.Stats.Requests {
		t.Errorf("%d graph launches, %d requests (%d without graphs)", on.GraphLaunches, on.Stats.Requests, off.Stats.Requests)
	}
}

// A device without graphs runs as before, and says so.
func TestHPGraphsOffWithoutGrapher(t *testing.T) {
	const dur = 20 * time.Millisecond
	w := smallWorkload(t, time.Millisecond, dur)
	pol, _ := policies.ByName("atoll")
	dev := newSim(t)
	tr, err := sched.Run(context.Background(), plainDevice{dev}, w, sched.Options{Policy: pol, Duration: dur})
	if err != nil {
		t.Fatal(err)
	}
	if tr.GraphLaunches != 0 || tr.HPGraphs != "off: the device records no graphs" {
		t.Errorf("%d graph launches, HPGraphs %q", tr.GraphLaunches, tr.HPGraphs)
	}
	if len(tr.Requests) == 0 {
		t.Error("no request served")
	}
}

// plainDevice hides the simulator's gpu.Grapher.
type plainDevice struct{ gpu.Device }

// A failed NewGraph fails the run before it starts, naming the call; a
// wrapped device that records no graphs (errors.ErrUnsupported) runs
// without them.
func TestHPGraphsSetupFailure(t *testing.T) {
	const dur = 10 * time.Millisecond
	w := smallWorkload(t, time.Millisecond, dur)
	pol, _ := policies.ByName("atoll")
	fd := faulty.New(newSim(t))
	if err := fd.FailMethod("NewGraph", 1); err != nil {
		t.Fatal(err)
	}
	_, err := sched.Run(context.Background(), fd, w, sched.Options{Policy: pol, Duration: dur})
	if !errors.Is(err, sched.ErrDevice) || !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("Run with NewGraph failing: %v, want ErrDevice wrapping the injected failure", err)
	}
	tr, err := sched.Run(context.Background(), faulty.New(plainDevice{newSim(t)}), w, sched.Options{Policy: pol, Duration: dur})
	if err != nil {
		t.Fatal(err)
	}
	if tr.GraphLaunches != 0 || len(tr.Requests) == 0 {
		t.Errorf("through a wrapper of a device without graphs: %d graph launches, %d requests", tr.GraphLaunches, len(tr.Requests))
	}
}

// The decision log sees every launch once with graphs on, the same
// launches as with graphs off — a request held for an instance is logged
// from its compact record when it is submitted, with its launches' IDs,
// kernels and decision time.
func TestHPGraphsDecisionLog(t *testing.T) {
	const dur = 20 * time.Millisecond
	w := smallWorkload(t, 100*time.Microsecond, dur)
	logs := map[bool][]string{}
	for _, noGraphs := range []bool{false, true} {
		pol, _ := policies.ByName("dedicated")
		var log []string
		tr, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: pol, Duration: dur, NoHPGraphs: noGraphs,
			OnDecision: func(d sched.Decision) {
				if d.Kind == sched.DecLaunch {
					log = append(log, fmt.Sprintf("%v %s", d.Time, d))
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		if !noGraphs && tr.GraphWaits == 0 {
			t.Fatal("no request was held: the test does not exercise held requests")
		}
		slices.Sort(log)
		logs[noGraphs] = log
	}
	if !slices.Equal(logs[false], logs[true]) {
		t.Errorf("launch decisions differ with graphs on (%d) and off (%d)", len(logs[false]), len(logs[true]))
	}
}

// staleCounting counts its StaleGraphEvents calls as a device's counter
// that earlier runs advanced to 10 and each call advances by 3.
type staleCounting struct {
	plainDevice
	n int
}

func (s *staleCounting) StaleGraphEvents() int { s.n += 3; return 7 + s.n }

// A run reports the stale graph-event answers of its own time, not the
// device's total over the runs it served before.
func TestStaleGraphEventsPerRun(t *testing.T) {
	const dur = 10 * time.Millisecond
	w := smallWorkload(t, time.Millisecond, dur)
	pol, _ := policies.ByName("atoll")
	tr, err := sched.Run(context.Background(), &staleCounting{plainDevice: plainDevice{newSim(t)}}, w, sched.Options{Policy: pol, Duration: dur})
	if err != nil {
		t.Fatal(err)
	}
	if tr.StaleGraphEvents != 3 {
		t.Errorf("StaleGraphEvents %d, want 3 (13 after the run less 10 before it)", tr.StaleGraphEvents)
	}
}

// stallWatching answers TakeHostStalls as a device that saw one stall of
// 40 ms before the run and, by the run's end, two more.
type stallWatching struct {
	plainDevice
	calls int
}

func (s *stallWatching) TakeHostStalls() gpu.HostStalls {
	s.calls++
	var h gpu.HostStalls
	if s.calls == 1 {
		h.Add(40 * time.Millisecond)
		return h
	}
	h.Add(3 * time.Millisecond)
	h.Add(2 * time.Millisecond)
	return h
}

// A run reports the host stalls of its own time, not those the device saw
// before it.
func TestHostStallsPerRun(t *testing.T) {
	const dur = 10 * time.Millisecond
	w := smallWorkload(t, time.Millisecond, dur)
	pol, _ := policies.ByName("atoll")
	dev := &stallWatching{plainDevice: plainDevice{newSim(t)}}
	tr, err := sched.Run(context.Background(), dev, w, sched.Options{Policy: pol, Duration: dur})
	if err != nil {
		t.Fatal(err)
	}
	want := gpu.HostStalls{Count: 2, Total: 5 * time.Millisecond, Longest: 3 * time.Millisecond}
	if tr.HostStalls != want || dev.calls != 2 {
		t.Errorf("HostStalls %+v after %d calls, want %+v after 2 (one before the run, one after)", tr.HostStalls, dev.calls, want)
	}
}

// An HP graph records one event per chunk of its kernels: the core sees a
// chunk's kernels complete together, and a request ends when its last
// kernel does either way. Events that cost nothing change no request;
// events that cost the GPU time (sim.Config.EventCost) make a request
// with fewer of them shorter by that much per event left out.
func TestHPGraphEventsPerChunk(t *testing.T) {
	hp := mustProfile(t, "tiny", `
a dur=10us grid=132 block=256 class=compute
b dur=10us grid=132 block=256 class=memory
c dur=10us grid=132 block=256 class=compute
d dur=10us grid=132 block=256 class=memory
e dur=10us grid=132 block=256 class=compute
f dur=10us grid=132 block=256 class=memory
g dur=10us grid=132 block=256 class=compute
h dur=10us grid=132 block=256 class=memory
`)
	const dur = 20 * time.Millisecond
	arr := periodic(time.Millisecond, time.Millisecond, dur) // one at a time
	w := sched.Workload{HP: []sched.HPWorkload{{Name: "tiny", Profile: hp, Arrivals: arr}}}
	run := func(eventCost time.Duration, perKernel bool) *sched.Trace {
		t.Helper()
		return runSim(t, "dedicated", w, sim.Config{EventCost: eventCost}, sched.Options{Duration: dur, HPKernelEvents: perKernel})
	}
	chunk, kernel := run(0, false), run(0, true)
	if chunk.HPGraphEvents != 2 || kernel.HPGraphEvents != 8 {
		t.Errorf("events per request: %d per chunk (want 2: 5 + 3 kernels of 10 µs), %d per kernel (want 8)", chunk.HPGraphEvents, kernel.HPGraphEvents)
	}
	if !reflect.DeepEqual(chunk.Requests, kernel.Requests) {
		t.Errorf("with events free, requests differ between an event per chunk and one per kernel")
	}
	const ec = 2 * time.Microsecond
	chunk, kernel = run(ec, false), run(ec, true)
	if len(chunk.Requests) != len(arr) || len(kernel.Requests) != len(arr) {
		t.Fatalf("%d and %d requests, want %d", len(chunk.Requests), len(kernel.Requests), len(arr))
	}
	for i, r := range chunk.Requests {
		// Attribution splits the request by the kernels that completed
		// together: its parts still add up to its latency.
		sum := r.Solo
		for _, d := range r.Causes {
			sum += d
		}
		if sum != r.End-r.Arrival {
			t.Errorf("request %d: solo %v + causes %v = %v, latency %v", i, r.Solo, r.Causes, sum, r.End-r.Arrival)
		}
		c := chunk.Requests[i].End - chunk.Requests[i].Arrival
		k := kernel.Requests[i].End - kernel.Requests[i].Arrival
		if k-c != 6*ec {
			t.Errorf("request %d: %v with an event per chunk, %v per kernel: want %v shorter (6 events left out)", i, c, k, 6*ec)
		}
	}
}

// The driver tells a device that models the host's time of every launch
// decision (gpu.HostModeler): an isolated request of n kernels then
// starts n decisions' host time later, charged as host delay, and the
// decisions told are the launches made.
func TestHostDecisions(t *testing.T) {
	hp := mustProfile(t, "tiny", `
a dur=10us grid=132 block=256 class=compute
b dur=10us grid=132 block=256 class=memory
c dur=10us grid=132 block=256 class=compute
d dur=10us grid=132 block=256 class=memory
`)
	const dur = 10 * time.Millisecond
	arr := periodic(time.Millisecond, time.Millisecond, dur)
	w := sched.Workload{HP: []sched.HPWorkload{{Name: "tiny", Profile: hp, Arrivals: arr}}}
	const cost = 3 * time.Microsecond
	for _, graphs := range []bool{true, false} {
		run := func(cost time.Duration) *sched.Trace {
			t.Helper()
			return runSim(t, "dedicated", w, sim.Config{HostDecideCost: cost}, sched.Options{Duration: dur, NoHPGraphs: !graphs})
		}
		free, charged := run(0), run(cost)
		if len(free.Requests) != len(arr) || len(charged.Requests) != len(arr) {
			t.Fatalf("graphs %v: %d and %d requests, want %d", graphs, len(free.Requests), len(charged.Requests), len(arr))
		}
		for i, r := range charged.Requests {
			f := free.Requests[i]
			if d := (r.End - r.Arrival) - (f.End - f.Arrival); d != 4*cost {
				t.Errorf("graphs %v, request %d: %v later with decisions at %v each, want 4 of them (%v)", graphs, i, d, cost, 4*cost)
			}
			if d := r.Causes[sched.CauseHost] - f.Causes[sched.CauseHost]; d != 4*cost {
				t.Errorf("graphs %v, request %d: host delay %v more, want %v", graphs, i, d, 4*cost)
			}
		}
	}
	dev, err := sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	count := &decisionCounter{Device: dev}
	pol, err := policies.ByName("dedicated")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := sched.Run(context.Background(), count, w, sched.Options{Duration: dur, Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	if count.n != tr.Launches || count.n != 4*len(arr) {
		t.Errorf("told of %d launch decisions; the run made %d launches of %d requests of 4 kernels", count.n, tr.Launches, len(arr))
	}
	// The host time in the core's steps is kept, the arrivals' apart.
	if h := tr.Host; h.Arrives != len(arr) || h.Steps <= h.Arrives || h.Arrive > h.Step {
		t.Errorf("core steps: %d (%v), %d of them arrivals (%v), want %d arrivals among more steps", h.Steps, h.Step, h.Arrives, h.Arrive, len(arr))
	}
}

// decisionCounter counts the launch decisions a driver tells it of.
type decisionCounter struct {
	gpu.Device
	n int
}

func (d *decisionCounter) Decided(n int) { d.n += n }
