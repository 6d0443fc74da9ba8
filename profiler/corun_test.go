package profiler_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/kernels"
	"atoll/profiler"
	"atoll/profiles"
)

func coRunProfiles(t *testing.T, spec gpu.Spec) (hp, be *profiles.Profile) {
	t.Helper()
	hp, err := profiles.Lookup(spec.Name, "mobilenetv2", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	be, err = profiles.Lookup(spec.Name, "vgg19", 4, "")
	if err != nil {
		t.Fatal(err)
	}
	return hp, be
}

// byName is the index of the BE kernel called name.
func byName(t *testing.T, p *profiles.Profile, name string) int {
	t.Helper()
	for i := range p.Kernels {
		if p.Kernels[i].Name == name {
			return i
		}
	}
	t.Fatalf("%s has no kernel %s", p.Model, name)
	return -1
}

// On the simulator the co-run replays the profiles: HP alone takes its
// profiled time, a kernel measured once per launch shape is shared by its
// twins, and a BE kernel on every SM of the partition slows HP more than
// one on 13 of them.
func TestCoRunSim(t *testing.T) {
	spec := gpu.H100SXM
	dev := simDev(t, sim.Config{Spec: spec, BLAS: true})
	hp, be := coRunProfiles(t, spec)
	small := byName(t, be, "features.36")  // 98 blocks on 13 SMs, 8 % of DRAM
	stream := byName(t, be, "features.14") // every SM
	twinA := byName(t, be, "features.12")  // the same shape as stream
	var stages []profiler.Progress
	rep, err := profiler.CoRun(context.Background(), dev, kernels.New(dev),
		profiler.CoRunOptions{PartitionSMs: 96, Passes: 3, Kernels: []int{small, twinA, stream}, HP: hp, BE: be,
			Progress: func(p profiler.Progress) { stages = append(stages, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 3 || stages[2].Done != 3 || stages[2].Stage != "co-run" {
		t.Errorf("progress %v, want three co-run steps", stages)
	}
	if rep.APIVersion != profiler.CoRunAPIVersion || rep.Backend != "sim" || rep.GPU != spec.Name || rep.PartitionSMs != 96 {
		t.Errorf("header %+v", rep)
	}
	if len(rep.HPKernels) != len(hp.Kernels) || len(rep.HPAloneUs) != len(hp.Kernels) {
		t.Fatalf("%d HP kernels, %d alone times; profile has %d", len(rep.HPKernels), len(rep.HPAloneUs), len(hp.Kernels))
	}
	total := 0.0
	for i, k := range hp.Kernels {
		total += k.DurationUs
		// Each kernel's event-to-event time is at least its profiled time
		// (the simulator times it so) and at most that plus a launch gap.
		if got := rep.HPAloneUs[i]; got < k.DurationUs-0.01 || got > k.DurationUs+10 {
			t.Errorf("HP %s alone %.2f µs, profile %.2f", k.Name, got, k.DurationUs)
		}
	}
	for _, r := range rep.HPRequestUs {
		if r < total*0.999 || r > total*1.15 {
			t.Errorf("HP pass alone %.1f µs, profile total %.1f", r, total)
		}
	}
	if len(rep.Kernels) != 3 {
		t.Fatalf("%d BE kernels reported, want 3", len(rep.Kernels))
	}
	got := map[int]profiler.CoRunBE{}
	for _, k := range rep.Kernels {
		got[k.Index] = k
		if k.Passes != 3 {
			t.Errorf("%s: %d covered passes, want 3", k.Name, k.Passes)
		}
		if len(k.HPKernelSlowdown) != len(hp.Kernels) {
			t.Errorf("%s: %d per-kernel slowdowns", k.Name, len(k.HPKernelSlowdown))
		}
		if k.HPSlowdown < 0.999 || k.HPSlowdown > 3 {
			t.Errorf("%s: HP slowdown %.3f", k.Name, k.HPSlowdown)
		}
		if k.BESlowdown != 0 {
			t.Errorf("%s: BE slowdown %.4f with the whole run queued at once: want 0 (not measured)", k.Name, k.BESlowdown)
		}
	}
	if got[twinA].SameAs != -1 || got[stream].SameAs != twinA {
		t.Errorf("sameAs: %d for the first of the shape, %d for its twin (want -1 and %d)", got[twinA].SameAs, got[stream].SameAs, twinA)
	}
	if got[stream].HPSlowdown != got[twinA].HPSlowdown {
		t.Errorf("twins differ: %.4f and %.4f", got[stream].HPSlowdown, got[twinA].HPSlowdown)
	}
	if !(got[stream].HPSlowdown > got[small].HPSlowdown) {
		t.Errorf("the partition-wide kernel slows HP %.4f, the 13-SM one %.4f: want the first larger", got[stream].HPSlowdown, got[small].HPSlowdown)
	}
	// Shares grow with the bound and stay in [0, 1].
	prev := -1.0
	for _, b := range profiler.CoRunBounds {
		s := rep.Summary.ShareWithin[fmt.Sprintf("%.2f", b)]
		if s < prev || s > 1.0000001 {
			t.Errorf("share within %.2f = %.4f after %.4f", b, s, prev)
		}
		prev = s
	}

	// The report reads back, plain and gzipped.
	var buf bytes.Buffer
	if err := profiler.WriteCoRun(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if _, err := profiler.ReadCoRun(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(buf.Bytes())
	zw.Close()
	if _, err := profiler.ReadCoRun(&z); err != nil {
		t.Fatalf("gzipped: %v", err)
	}
}

// With one HP event a pass the pass alone is shorter by the other
// events' GPU time, there is one HP figure per BE kernel (the pass's), and
// HP's slowdown is no longer diluted by event time that BE does not slow:
// it is larger than with an event after every kernel. Both as launches
// and as graphs.
func TestCoRunPassEvents(t *testing.T) {
	spec := gpu.H100SXM
	hp, be := coRunProfiles(t, spec)
	wide := byName(t, be, "features.14")
	const event = 3 * time.Microsecond
	for _, graph := range []bool{false, true} {
		run := func(pass bool) *profiler.CoRunReport {
			dev := simDev(t, sim.Config{Spec: spec, BLAS: true, EventCost: event, CoRunDevice: 0.3})
			rep, err := profiler.CoRun(context.Background(), dev, kernels.New(dev),
				profiler.CoRunOptions{PartitionSMs: 96, Passes: 3, Kernels: []int{wide}, HP: hp, BE: be, HPGraph: graph, HPPassEvents: pass})
			if err != nil {
				t.Fatal(err)
			}
			return rep
		}
		each, pass := run(false), run(true)
		if !pass.HPPassEvents || each.HPPassEvents {
			t.Errorf("graph %v: hpPassEvents recorded %v / %v", graph, each.HPPassEvents, pass.HPPassEvents)
		}
		if len(pass.HPAloneUs) != 1 || len(pass.Kernels[0].HPKernelSlowdown) != 1 || len(pass.HPKernels) != len(hp.Kernels) {
			t.Fatalf("graph %v: %d alone figures, %d slowdowns, %d kernels named: want 1, 1, %d", graph, len(pass.HPAloneUs), len(pass.Kernels[0].HPKernelSlowdown), len(pass.HPKernels), len(hp.Kernels))
		}
		saved := float64(len(hp.Kernels)-1) * event.Seconds() * 1e6
		if d := each.HPRequestUs[0] - pass.HPRequestUs[0]; math.Abs(d-saved) > 0.05*saved {
			t.Errorf("graph %v: one event a pass saves %.1f µs alone, want the other events' %.1f", graph, d, saved)
		}
		if !(pass.Kernels[0].HPSlowdown > each.Kernels[0].HPSlowdown) {
			t.Errorf("graph %v: slowdown %.4f with one event a pass, %.4f with one after each kernel: want the first larger", graph, pass.Kernels[0].HPSlowdown, each.Kernels[0].HPSlowdown)
		}
		var buf bytes.Buffer
		if err := profiler.WriteCoRun(&buf, pass); err != nil {
			t.Fatal(err)
		}
		if _, err := profiler.ReadCoRun(&buf); err != nil {
			t.Errorf("graph %v: the report does not read back: %v", graph, err)
		}
	}
}

// With HPGap each pass is sent alone, HPGap after the one before
// completed: doubling the gap adds it to the device's clock once for every
// pass (three per baseline, of which there are two, and three beside the
// one BE kernel); the report records the gap and one event a pass; and BE, on every
// SM with the interference off, still slows HP: its first kernels wait
// for BE's resident blocks.
func TestCoRunGap(t *testing.T) {
	spec := gpu.H100SXM
	hp, be := coRunProfiles(t, spec)
	wide := byName(t, be, "features.14")
	const gap = 300 * time.Microsecond
	run := func(gap time.Duration) (*profiler.CoRunReport, time.Duration) {
		dev := simDev(t, sim.Config{Spec: spec, BLAS: true})
		rep, err := profiler.CoRun(context.Background(), dev, kernels.New(dev),
			profiler.CoRunOptions{PartitionSMs: spec.SMs, Passes: 3, BEDepth: 8, HPGraph: true, HPGap: gap, Kernels: []int{wide}, HP: hp, BE: be})
		if err != nil {
			t.Fatal(err)
		}
		return rep, dev.Now()
	}
	queued, _ := run(0)
	alone, ta := run(gap)
	_, t2 := run(2 * gap)
	if alone.HPGapUs != 300 || !alone.HPPassEvents || queued.HPGapUs != 0 {
		t.Errorf("recorded gap %.1f µs (pass events %v), and %.1f without: want 300 (true) and 0", alone.HPGapUs, alone.HPPassEvents, queued.HPGapUs)
	}
	// Within 10 %: where BE's last launch ends after the last pass moves.
	if sends := 3 * (len(alone.HPRequestUs) + 1); t2-ta < time.Duration(sends)*gap*9/10 || t2-ta > time.Duration(sends)*gap*11/10 {
		t.Errorf("doubling the gap added %v of device time: want %d gaps of %v (within 10 %%)", t2-ta, sends, gap)
	}
	k := alone.Kernels[0]
	if k.Passes != 3 || !(k.HPSlowdown > 1.02) {
		t.Errorf("sent alone beside BE on every SM: %d passes, slowdown %.4f: want 3 and above 1 (HP waits for BE's blocks)", k.Passes, k.HPSlowdown)
	}
}

// With HP on the SMs the partition leaves, the two share no SM: HP alone
// runs on fewer SMs and is slower than on the whole device.
func TestCoRunHPRest(t *testing.T) {
	spec := gpu.H100SXM
	hp, be := coRunProfiles(t, spec)
	run := func(rest bool) *profiler.CoRunReport {
		dev := simDev(t, sim.Config{Spec: spec, BLAS: true})
		rep, err := profiler.CoRun(context.Background(), dev, kernels.New(dev),
			profiler.CoRunOptions{PartitionSMs: 96, Passes: 2, Kernels: []int{0}, HP: hp, BE: be, HPRest: rest})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	all, rest := run(false), run(true)
	if !rest.HPRest || all.HPRest {
		t.Errorf("hpRest recorded %v / %v", all.HPRest, rest.HPRest)
	}
	if !(rest.HPRequestUs[0] > all.HPRequestUs[0]*1.05) {
		t.Errorf("HP alone on the rest %.1f µs, on every SM %.1f: want the rest slower", rest.HPRequestUs[0], all.HPRequestUs[0])
	}
}

// With BE on every SM at the least priority (no partition) HP's blocks
// wait for BE's resident ones on every SM: the simulator slows HP more
// than with BE confined to 96 SMs.
func TestCoRunNoPartition(t *testing.T) {
	spec := gpu.H100SXM
	hp, be := coRunProfiles(t, spec)
	wide := byName(t, be, "features.14")
	slowdown := func(sms int) float64 {
		dev := simDev(t, sim.Config{Spec: spec, BLAS: true})
		rep, err := profiler.CoRun(context.Background(), dev, kernels.New(dev),
			profiler.CoRunOptions{PartitionSMs: sms, Passes: 2, Kernels: []int{wide}, HP: hp, BE: be})
		if err != nil {
			t.Fatal(err)
		}
		if rep.PartitionSMs != sms || rep.Kernels[0].Passes == 0 {
			t.Fatalf("partition %d recorded as %d, %d passes", sms, rep.PartitionSMs, rep.Kernels[0].Passes)
		}
		return rep.Kernels[0].HPSlowdown
	}
	if all, part := slowdown(132), slowdown(96); !(all > part) {
		t.Errorf("HP slowdown with BE on every SM %.4f, in 96 SMs %.4f: want the first larger", all, part)
	}
}

func TestCoRunRefuses(t *testing.T) {
	spec := gpu.H100SXM
	hp, be := coRunProfiles(t, spec)
	short := *be
	short.Kernels = be.Kernels[:10]
	unknown := *hp
	unknown.Model = "nope"
	h200, err := profiles.Lookup(gpu.H200.Name, "vgg19", 4, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opt  profiler.CoRunOptions
		want string
	}{
		{"no profiles", profiler.CoRunOptions{PartitionSMs: 96}, "needs the HP and BE profiles"},
		{"partition size", profiler.CoRunOptions{PartitionSMs: 95, HP: hp, BE: be}, "BE partition"},
		{"no rest", profiler.CoRunOptions{PartitionSMs: 132, HPRest: true, HP: hp, BE: be}, "no rest"},
		{"passes", profiler.CoRunOptions{PartitionSMs: 96, Passes: -1, HP: hp, BE: be}, "passes -1"},
		{"kernel index", profiler.CoRunOptions{PartitionSMs: 96, Kernels: []int{5000}, HP: hp, BE: be}, "BE kernel 5000"},
		{"stale profile", profiler.CoRunOptions{PartitionSMs: 96, HP: hp, BE: &short}, "BE: profiles: profile vgg19 bs4 on H100-SXM does not match: kernels"},
		{"another GPU's profile", profiler.CoRunOptions{PartitionSMs: 96, HP: hp, BE: h200}, "does not match: gpu"},
		{"unknown model", profiler.CoRunOptions{PartitionSMs: 96, HP: &unknown, BE: be}, "nope"},
		{"gap without a bounded queue", profiler.CoRunOptions{PartitionSMs: 96, HPGap: time.Millisecond, HP: hp, BE: be}, "bounded BE queue"},
		{"negative gap", profiler.CoRunOptions{PartitionSMs: 96, HPGap: -time.Microsecond, BEDepth: 4, HP: hp, BE: be}, "HP gap"},
	} {
		dev := simDev(t, sim.Config{Spec: spec, BLAS: true})
		_, err := profiler.CoRun(context.Background(), dev, kernels.New(dev), tc.opt)
		if err == nil || !errors.Is(err, profiler.ErrMeasure) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrMeasure naming %q", tc.name, err, tc.want)
		}
	}
}

func TestReadCoRunRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"apiVersion":"atoll/corun/v0"}`, "apiVersion"},
		{`{"apiVersion":"atoll/corun/v1","extra":1}`, "unknown field"},
		{`not json`, "not a co-run report"},
		{`{"apiVersion":"atoll/corun/v1","hpKernels":["a","b"],"beKernels":[{"index":0,"name":"k","passes":2,"hpKernelSlowdown":[1.1]}]}`, "1 HP kernel slowdowns, want 2"},
		{`{"apiVersion":"atoll/corun/v1","hpKernels":["a","b"],"hpPassEvents":true,"beKernels":[{"index":0,"name":"k","passes":2,"hpKernelSlowdown":[1.1,1.2]}]}`, "2 HP kernel slowdowns, want 1"},
	} {
		if _, err := profiler.ReadCoRun(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.40s: %v, want %q", tc.in, err, tc.want)
		}
	}
}

func FuzzReadCoRun(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"atoll/corun/v1","hpKernels":["a"],"beKernels":[{"index":0,"passes":1,"hpKernelSlowdown":[1.2]}]}`))
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := profiler.ReadCoRun(bytes.NewReader(data))
		if err != nil {
			return
		}
		want := len(r.HPKernels)
		if r.HPPassEvents {
			want = 1
		}
		for _, k := range r.Kernels {
			if k.Passes > 0 && len(k.HPKernelSlowdown) != want {
				t.Fatalf("accepted a kernel with %d slowdowns for %d HP kernels (pass events %v)", len(k.HPKernelSlowdown), len(r.HPKernels), r.HPPassEvents)
			}
		}
	})
}

// With a bounded BE queue the host refills BE between its HP launches. A
// BE kernel shorter than the host's launch completes before the host can
// look at the next, so a refill that replaced every completed launch
// would never return; and the refills slow the host's enqueueing of HP
// (here 20 µs a launch, 16 BE launches queued) past the blockers sized
// for HP alone, so the run must size them from what its enqueueing took
// and run again rather than drop every pass.
func TestCoRunBoundedDepthShortKernels(t *testing.T) {
	spec := gpu.H100SXM
	hp, be := coRunProfiles(t, spec)
	short := byName(t, be, "features.36") // 5.9 µs
	type result struct {
		rep *profiler.CoRunReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		dev, err := sim.New(sim.Config{Spec: spec, BLAS: true, HostLaunchCost: 20 * time.Microsecond, NoticeLatency: 2 * time.Microsecond})
		if err != nil {
			done <- result{err: err}
			return
		}
		defer dev.Close()
		rep, err := profiler.CoRun(context.Background(), dev, kernels.New(dev),
			profiler.CoRunOptions{PartitionSMs: 96, Passes: 3, BEDepth: 16, Kernels: []int{short}, HP: hp, BE: be})
		done <- result{rep, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		// Every pass: a run whose host was still enqueueing them sizes the
		// blockers and runs again.
		if k := r.rep.Kernels[0]; k.Passes != 3 || r.rep.BEDepth != 16 {
			t.Errorf("%s: %d of 3 passes covered, depth %d recorded", k.Name, k.Passes, r.rep.BEDepth)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the co-run with a bounded BE queue of 5.9 µs kernels did not end in 30 s")
	}
}

// With a bounded BE queue the BE kernel's own time beside HP is measured
// (each launch is followed by an event): at least its time alone, and the
// summary's mean is that kernel's when it is the only one.
func TestCoRunBESlowdown(t *testing.T) {
	spec := gpu.H100SXM
	hp, be := coRunProfiles(t, spec)
	long := byName(t, be, "features.14")
	dev := simDev(t, sim.Config{Spec: spec, BLAS: true, NoticeLatency: 5 * time.Microsecond, CoRunDevice: 0.4})
	rep, err := profiler.CoRun(context.Background(), dev, kernels.New(dev),
		profiler.CoRunOptions{PartitionSMs: 96, Passes: 3, BEDepth: 16, Kernels: []int{long}, HP: hp, BE: be})
	if err != nil {
		t.Fatal(err)
	}
	k := rep.Kernels[0]
	if k.Passes == 0 || !(k.BESlowdown >= 1 && k.BESlowdown < 3) {
		t.Fatalf("%s: %d passes, BE slowdown %.4f: want passes and a slowdown in [1, 3)", k.Name, k.Passes, k.BESlowdown)
	}
	if !(k.BESlowdown > 1.01) {
		t.Errorf("%s: BE slowdown %.4f beside HP with the simulator's interference on: want above 1", k.Name, k.BESlowdown)
	}
	if s := rep.Summary; s.BEWeighed != 1 || s.MeanBESlowdown != k.BESlowdown {
		t.Errorf("summary: weighed %.4f, mean %.4f; want 1 and the kernel's %.4f", s.BEWeighed, s.MeanBESlowdown, k.BESlowdown)
	}
}

// A BE kernel too short for its bounded queue to hold 200 µs is queued in
// graphs of launches, so that the host's refill — one launch per kernel,
// 8 µs each here — does not set its pace: its slowdown beside HP is then
// measured and weighed like a long kernel's.
func TestCoRunBEChunksShortKernels(t *testing.T) {
	spec := gpu.H100SXM
	hp, be := coRunProfiles(t, spec)
	short := -1
	for i, k := range be.Kernels {
		if k.DurationUs < 8 && (short < 0 || k.DurationUs < be.Kernels[short].DurationUs) {
			short = i
		}
	}
	if short < 0 {
		t.Fatal("no BE kernel under 8 µs in the profile")
	}
	dev := simDev(t, sim.Config{Spec: spec, BLAS: true, NoticeLatency: 27 * time.Microsecond, HostLaunchCost: 8 * time.Microsecond})
	rep, err := profiler.CoRun(context.Background(), dev, kernels.New(dev),
		profiler.CoRunOptions{PartitionSMs: 96, Passes: 3, BEDepth: 16, Kernels: []int{short}, HP: hp, BE: be})
	if err != nil {
		t.Fatal(err)
	}
	k := rep.Kernels[0]
	if k.BEChunk < 2 || float64(16*k.BEChunk)*k.AloneUs < 200 {
		t.Errorf("%s (%.1f µs alone): %d launches a queued item, want enough for 16 items to hold 200 µs", k.Name, k.AloneUs, k.BEChunk)
	}
	// Launched one by one at 8 µs of host time each, a kernel this short
	// would run at most once per 8 µs; chunked, it keeps near its own pace.
	if k.BESlowdown <= 0 || k.BESlowdown*k.AloneUs >= 8 {
		t.Errorf("%s: BE slowdown %.3f (%.1f µs a launch beside HP): want the host's 8 µs per launch not to bound it", k.Name, k.BESlowdown, k.BESlowdown*k.AloneUs)
	}
	if s := rep.Summary; s.BEWeighed != 1 || s.MeanBESlowdown != k.BESlowdown {
		t.Errorf("summary: weighed %.4f, mean %.4f; want the chunked kernel weighed in", s.BEWeighed, s.MeanBESlowdown)
	}
}

// refusesGraphs is a simulated GPU whose graphs cannot be recorded.
type refusesGraphs struct{ *sim.Device }

func (refusesGraphs) NewGraph(gpu.Context, []gpu.GraphStep) (gpu.Graph, error) {
	return 0, errors.New("graphs refused")
}

// Where the BE partition cannot record graphs, a short kernel is queued
// one launch at a time, as before, and the run goes on.
func TestCoRunBEChunksFallBack(t *testing.T) {
	spec := gpu.H100SXM
	hp, be := coRunProfiles(t, spec)
	short := -1
	for i, k := range be.Kernels {
		if k.DurationUs < 8 {
			short = i
			break
		}
	}
	d, err := sim.New(sim.Config{Spec: spec, BLAS: true, NoticeLatency: 27 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	dev := refusesGraphs{d}
	rep, err := profiler.CoRun(context.Background(), dev, kernels.New(dev),
		profiler.CoRunOptions{PartitionSMs: 96, Passes: 3, BEDepth: 16, Kernels: []int{short}, HP: hp, BE: be})
	if err != nil {
		t.Fatal(err)
	}
	if k := rep.Kernels[0]; k.BEChunk != 0 || k.BESlowdown <= 0 {
		t.Errorf("%s: chunk %d, BE slowdown %.3f: want one launch an item, measured", k.Name, k.BEChunk, k.BESlowdown)
	}
}
