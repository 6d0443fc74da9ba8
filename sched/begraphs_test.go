package sched_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/faulty"
	"atoll/gpu/sim"
	"atoll/policies"
	"atoll/profiles"
	"atoll/sched"
)

// shortBE is a BE iteration of n kernels of 3 µs: a host that launches
// them one by one at 10 µs each cannot keep the GPU busy.
func shortBE(t *testing.T, n int) sched.BEWorkload {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "k%d dur=3us grid=132 block=256 class=memory\n", i)
	}
	return sched.BEWorkload{Name: "short", Profile: mustProfile(t, "short", b.String())}
}

func runBE(t *testing.T, dev gpu.Device, policy string, w sched.Workload, dur time.Duration, noBEGraphs bool) *sched.Trace {
	t.Helper()
	pol, err := policies.ByName(policy)
	if err != nil {
		t.Fatal(err)
	}
	var log []sched.Decision
	tr, err := sched.Run(context.Background(), dev, w, sched.Options{Policy: pol, Duration: dur, Warmup: dur / 8, NoBEGraphs: noBEGraphs,
		OnDecision: func(d sched.Decision) {
			if d.Kind == sched.DecLaunch && d.Launch.Client.Class == sched.BE {
				log = append(log, d)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	// Every BE kernel is launched once per iteration, in order, whether a
	// chunk went as a graph or kernel by kernel.
	n := len(w.BE[0].Profile.Kernels)
	for i, d := range log {
		if d.Launch.Kernel != i%n {
			t.Fatalf("%s: BE launch %d is kernel %d, want %d", policy, i, d.Launch.Kernel, i%n)
		}
	}
	return tr
}

// BE alone with 10 µs of host time per launch: kernel by kernel the host
// bounds BE's rate (a 3 µs kernel per launch); with chunk graphs the same
// kernels, in the same order, run several times as fast, with one graph
// submission per chunk. Under atoll the same holds while HP is idle.
func TestBEChunkGraphs(t *testing.T) {
	const dur = 20 * time.Millisecond
	for _, policy := range []string{"streams", "atoll"} {
		t.Run(policy, func(t *testing.T) {
			w := sched.Workload{BE: []sched.BEWorkload{shortBE(t, 200)}}
			cfg := sim.Config{Spec: gpu.H100SXM, Seed: 1, HostLaunchCost: 10 * time.Microsecond}
			dev := func() gpu.Device {
				d, err := sim.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { d.Close() })
				return d
			}
			on := runBE(t, dev(), policy, w, dur, false)
			off := runBE(t, dev(), policy, w, dur, true)
			if on.BEGraphs != "on" || off.BEGraphs != "off" {
				t.Fatalf("BEGraphs %q with graphs, %q without", on.BEGraphs, off.BEGraphs)
			}
			// 200 kernels of 3 µs: 12 chunks of 16 and one of 8.
			if on.BEChunks != 13 || on.BEChunkLaunches == 0 || off.BEChunkLaunches != 0 {
				t.Errorf("%d chunks recorded, %d chunk launches with graphs, %d without", on.BEChunks, on.BEChunkLaunches, off.BEChunkLaunches)
			}
			t.Logf("BE work %v with chunk graphs, %v kernel by kernel; %d chunk launches", on.BEWork, off.BEWork, on.BEChunkLaunches)
			if on.BEWork < 2*off.BEWork {
				t.Errorf("BE work %v with chunk graphs, %v kernel by kernel: want at least twice", on.BEWork, off.BEWork)
			}
			// Per unit of BE work, the polls: a chunk's kernels share one event.
			qOn, qOff := float64(on.Host.Queries)/float64(on.BEWork), float64(off.Host.Queries)/float64(off.BEWork)
			if qOn > qOff/4 {
				t.Errorf("%d event queries for %v of BE work with chunk graphs, %d for %v without: want a quarter per unit of work or less",
					on.Host.Queries, on.BEWork, off.Host.Queries, off.BEWork)
			}
		})
	}
}

// A device without graphs runs BE kernel by kernel and says so.
func TestBEGraphsOffWithoutGrapher(t *testing.T) {
	const dur = 5 * time.Millisecond
	w := sched.Workload{BE: []sched.BEWorkload{shortBE(t, 40)}}
	tr := runBE(t, plainDevice{newSim(t)}, "streams", w, dur, false)
	if tr.BEGraphs != "off: the device records no graphs" || tr.BEChunkLaunches != 0 || tr.BEWork == 0 {
		t.Errorf("BEGraphs %q, %d chunk launches, BE work %v", tr.BEGraphs, tr.BEChunkLaunches, tr.BEWork)
	}
}

// The core cuts chunks greedily: each is the longest run of kernels from
// its first whose profiled work stays within sched.BEChunkWork (a longer
// kernel alone), at most sched.BEChunkKernels, checked against a naive cut
// over random profiles.
func TestBEChunkCuts(t *testing.T) {
	for seed := range 200 {
		var b strings.Builder
		n := 1 + seed%150
		durs := make([]time.Duration, n)
		for i := range n {
			durs[i] = time.Duration(1+(seed*7919+i*104729)%80) * time.Microsecond
			if (seed+i)%5 == 0 {
				durs[i] = time.Duration(1+(i*31)%3) * time.Microsecond / 2 // sub-µs kernels
			}
			fmt.Fprintf(&b, "k%d dur=%dns grid=1 block=32 class=memory\n", i, durs[i].Nanoseconds())
		}
		p := mustProfile(t, "p", b.String())
		core, err := sched.NewCore(sched.Config{Spec: gpu.H100SXM, BE: []*profiles.Profile{p}, Policy: idlePolicy{}, BEChunks: true})
		if err != nil {
			t.Fatal(err)
		}
		bc := core.State().BE()[0]
		for start := 0; start < n; {
			end := start + 1
			work := durs[start]
			for end < n && end-start < sched.BEChunkKernels && work+durs[end] <= sched.BEChunkWork {
				work += durs[end]
				end++
			}
			if got := bc.ChunkEndOf(start); got != end {
				t.Fatalf("seed %d: the chunk from kernel %d ends at %d, want %d", seed, start, got, end)
			}
			start = end
		}
	}
}

// idlePolicy decides nothing.
type idlePolicy struct{}

func (idlePolicy) Name() string                         { return "idle" }
func (idlePolicy) Streams() sched.StreamPlan            { return sched.PriorityPlan }
func (idlePolicy) Start(*sched.State) error             { return nil }
func (idlePolicy) Schedule(*sched.State, time.Duration) {}

// A chunk graph the device fails to record or to launch fails the run with
// the driver's error, naming the call and the chunk.
func TestBEChunkGraphFailures(t *testing.T) {
	const dur = 5 * time.Millisecond
	w := sched.Workload{BE: []sched.BEWorkload{shortBE(t, 40)}}
	pol, err := policies.ByName("streams")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, want string }{
		{"NewGraph", "NewGraph (BE client 0, kernels 0..15)"},
		{"LaunchGraph", "LaunchGraph (BE client 0, kernels 0..15)"},
	} {
		fd := faulty.New(newSim(t))
		if err := fd.FailMethod(tc.method, 1); err != nil {
			t.Fatal(err)
		}
		_, err := sched.Run(context.Background(), fd, w, sched.Options{Policy: pol, Duration: dur})
		if !errors.Is(err, sched.ErrDevice) || !errors.Is(err, faulty.ErrInjected) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s failing: %v, want ErrDevice wrapping the injected failure, naming %q", tc.method, err, tc.want)
		}
	}
}

// slowDevice makes its every tenth Launch call take 200 µs of wall time, as
// a call blocked by a full launch queue does.
type slowDevice struct {
	gpu.Device
	calls int
}

func (s *slowDevice) Launch(st gpu.Stream, l *gpu.Launch) error {
	if s.calls++; s.calls%10 == 0 {
		time.Sleep(200 * time.Microsecond)
	}
	return s.Device.Launch(st, l)
}

// The driver counts the launch calls that held its thread SlowLaunch or
// more (every slowed one; an unslowed one only if the machine stalled it).
func TestSlowLaunchesCounted(t *testing.T) {
	const dur = 2 * time.Millisecond
	w := sched.Workload{BE: []sched.BEWorkload{shortBE(t, 40)}}
	dev := &slowDevice{Device: plainDevice{newSim(t)}}
	tr := runBE(t, dev, "streams", w, dur, true)
	h := tr.Host
	// A loaded machine may stall an unslowed call too: a little slack above.
	if want := dev.calls / 10; want == 0 || h.SlowLaunches < want || h.SlowLaunches > want+want/4+2 {
		t.Errorf("%d slow launches counted of %d calls, %d of them slowed", h.SlowLaunches, dev.calls, want)
	}
	if h.SlowLaunchTime < time.Duration(h.SlowLaunches)*200*time.Microsecond {
		t.Errorf("slow launches took %v in all, less than their %d × 200 µs", h.SlowLaunchTime, h.SlowLaunches)
	}
}

// graphsRunOut records graphs until its n-th NewGraph, then answers
// errors.ErrUnsupported, as a device that cannot record more would.
type graphsRunOut struct {
	*sim.Device
	n, calls int
}

func (g *graphsRunOut) NewGraph(s gpu.Stream, steps []gpu.GraphStep) (gpu.Graph, error) {
	if g.calls++; g.calls > g.n {
		return 0, fmt.Errorf("%w: no more graphs", errors.ErrUnsupported)
	}
	return g.Device.NewGraph(s, steps)
}

// Graphs that run out part way (HP's or BE's) leave that kind off and the
// run whole; the graphs already made are released with the run.
func TestGraphsRunningOutPartWay(t *testing.T) {
	const dur = 5 * time.Millisecond
	w := smallWorkload(t, time.Millisecond, dur)
	w.BE = []sched.BEWorkload{shortBE(t, 40)}
	pol, err := policies.ByName("atoll")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n              int
		noHP, noBE     bool
		hpWant, beWant string
	}{
		{n: 1, noBE: true, hpWant: "no more graphs", beWant: "off"}, // HP's second instance, BE kernel by kernel
		{n: 1, hpWant: "no more graphs", beWant: "no more graphs"},  // HP's second instance
		{n: 2, noHP: true, hpWant: "off", beWant: "no more graphs"}, // BE's third chunk
	} {
		d, err := sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := sched.Run(context.Background(), &graphsRunOut{Device: d, n: tc.n}, w, sched.Options{Policy: pol, Duration: dur, NoHPGraphs: tc.noHP, NoBEGraphs: tc.noBE})
		d.Close()
		if err != nil {
			t.Fatalf("graphs running out after %d: %v", tc.n, err)
		}
		if !strings.HasPrefix(tr.HPGraphs, "off") || !strings.Contains(tr.HPGraphs, tc.hpWant) || !strings.Contains(tr.BEGraphs, tc.beWant) || tr.BEChunks != 0 || tr.BEChunkLaunches != 0 || len(tr.Requests) == 0 || tr.BEWork == 0 {
			t.Errorf("after %d graphs: HP graphs %q, BE graphs %q (%d chunks), %d requests, BE work %v", tc.n, tr.HPGraphs, tr.BEGraphs, tr.BEChunks, len(tr.Requests), tr.BEWork)
		}
	}
}
