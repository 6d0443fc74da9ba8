package profiler_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
	"atoll/profiler"
	"atoll/profiles"
)

func simDev(t *testing.T, cfg sim.Config) gpu.Device {
	t.Helper()
	dev, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

func ops(t testing.TB, model string, batch int) []models.Layer {
	t.Helper()
	m, err := models.Get(model)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := m.Ops(batch)
	if err != nil {
		t.Fatal(err)
	}
	return layers
}

// On the simulator every launch lasts what the estimated profile says, so
// Measure must find each kernel's estimated duration at its own index: a
// profile whose events were attributed to the wrong kernel (off by one,
// blockers counted in) fails here.
func TestMeasureSimReplaysEstimate(t *testing.T) {
	dev := simDev(t, sim.Config{})
	var stages []string
	p, err := profiler.Measure(context.Background(), dev, kernels.New(dev), "resnet50", 1, profiler.MeasureOptions{
		Substitute: true, Runs: 5, Warmup: 1, Command: "atoll profile --model resnet50 --substitute",
		Progress: func(pr profiler.Progress) {
			if len(stages) == 0 || stages[len(stages)-1] != pr.Stage {
				stages = append(stages, pr.Stage)
			}
			if pr.Done > pr.Total || pr.Done < 0 {
				t.Errorf("progress %+v", pr)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	layers := ops(t, "resnet50", 1)
	if err := profiles.Check(p, models.Ops(layers), gpu.H100SXM); err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	if err := profiles.Write(&buf, p); err != nil {
		t.Fatal(err)
	}
	if _, err := profiles.Parse(strings.NewReader(buf.String())); err != nil {
		t.Fatalf("written profile does not parse: %v", err)
	}
	if got := strings.Join(stages, ","); got != "peaks,runs,scaling" {
		t.Errorf("progress stages %s", got)
	}
	if p.Source != profiles.SourceEstimated || p.Notes["simulated"] == "" {
		t.Errorf("a simulated profile is marked source %q, simulated note %q", p.Source, p.Notes["simulated"])
	}
	for _, key := range []string{"command", "date", "peaks", "method", "spreadUs", "scaling", "substitutions"} {
		if p.Notes[key] == "" {
			t.Errorf("notes lack %q", key)
		}
	}
	if !strings.Contains(p.Notes["substitutions"], "avgpool") {
		t.Errorf("substitutions note %q does not name the avgpool", p.Notes["substitutions"])
	}
	est, err := profiler.Estimate(gpu.H100SXM, "resnet50", 1, layers)
	if err != nil {
		t.Fatal(err)
	}
	substituted := 0
	for i, k := range p.Kernels {
		e := est.Kernels[i]
		if len(k.Tags) > 0 {
			substituted++
			if k.Name != "avgpool" {
				t.Errorf("%s tagged %v", k.Name, k.Tags)
			}
		}
		// The simulator adds no cost of its own beyond its block floor.
		if math.Abs(k.DurationUs-e.DurationUs) > 0.02*e.DurationUs+0.5 {
			t.Errorf("kernels[%d] %s: measured %.3f us on the simulator, its estimate is %.3f us", i, k.Name, k.DurationUs, e.DurationUs)
		}
		if k.FLOPs != e.FLOPs || k.Bytes != e.Bytes {
			t.Errorf("%s: flops/bytes %v/%v, op says %v/%v", k.Name, k.FLOPs, k.Bytes, e.FLOPs, e.Bytes)
		}
		if want := profiler.Classify(k.ComputePct, k.MemoryPct); k.Class != want {
			t.Errorf("%s: class %s, rule says %s", k.Name, k.Class, want)
		}
		if len(k.Scaling) != len(profiler.MeasureScalingSMs) || k.Scaling[len(k.Scaling)-1].SMs != gpu.H100SXM.SMs {
			t.Fatalf("%s: scaling %+v", k.Name, k.Scaling)
		}
		// Fewer SMs never make a kernel much faster.
		if first, last := k.Scaling[0].DurationUs, k.Scaling[len(k.Scaling)-1].DurationUs; first < 0.95*last {
			t.Errorf("%s: %.3f us at 8 SMs, %.3f us at all", k.Name, first, last)
		}
	}
	if substituted != 1 {
		t.Errorf("%d substituted kernels, want 1 (avgpool)", substituted)
	}
	// A kernel of many blocks is slower on 8 SMs than on all of them.
	big := p.Kernels[0] // conv1: 196 blocks
	if big.Scaling[0].DurationUs < 2*big.DurationUs {
		t.Errorf("%s: %+v: 8 SMs should take well over twice the full-GPU time %.3f", big.Name, big.Scaling, big.DurationUs)
	}
	// The peaks were measured on the (simulated) device: close to its spec.
	if !strings.Contains(p.Notes["peaks"], "TFLOP/s") {
		t.Errorf("peaks note %q", p.Notes["peaks"])
	}
}

// Jitter in the simulator shows up as spread, and the median stays inside
// the jitter band.
func TestMeasureSpread(t *testing.T) {
	dev := simDev(t, sim.Config{Jitter: 0.2, Seed: 3})
	p, err := profiler.Measure(context.Background(), dev, kernels.New(dev), "mobilenetv2", 1, profiler.MeasureOptions{
		Substitute: true, Runs: 15, NoScaling: true,
		Peaks: &profiler.Peaks{FLOPS: 700e12, FP32: 60e12, Bandwidth: 3e12, Method: "given by the test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	est, err := profiler.Estimate(gpu.H100SXM, "mobilenetv2", 1, ops(t, "mobilenetv2", 1))
	if err != nil {
		t.Fatal(err)
	}
	spread := 0
	for i, k := range p.Kernels {
		if k.SpreadUs > 0 {
			spread++
		}
		if e := est.Kernels[i].DurationUs; k.DurationUs > 1.25*e+0.5 || k.DurationUs < 0.75*e-0.5 {
			t.Errorf("%s: median %.3f us outside the ±20%% jitter of %.3f us", k.Name, k.DurationUs, e)
		}
		if k.Scaling != nil {
			t.Errorf("%s: scaling measured with NoScaling", k.Name)
		}
	}
	if spread < len(p.Kernels)/2 {
		t.Errorf("only %d of %d kernels show a spread under 20%% jitter", spread, len(p.Kernels))
	}
	if p.Notes["peaks"] != "given by the test" {
		t.Errorf("peaks note %q", p.Notes["peaks"])
	}
}

func TestMeasureRefuses(t *testing.T) {
	dev := simDev(t, sim.Config{})
	lib := kernels.New(dev)
	ctx := context.Background()
	// A layer the library lacks: refused, naming it; no partial profile.
	p, err := profiler.Measure(ctx, dev, lib, "resnet50", 1, profiler.MeasureOptions{})
	if !errors.Is(err, exec.ErrNotRunnable) || !errors.Is(err, profiler.ErrMeasure) || !strings.Contains(err.Error(), "avgpool") || p != nil {
		t.Errorf("resnet50 without substitution: %v, %v; want ErrNotRunnable naming avgpool", p, err)
	}
	if !strings.Contains(err.Error(), "--substitute") {
		t.Errorf("no hint: %v", err)
	}
	for name, tc := range map[string]struct {
		model string
		batch int
		opt   profiler.MeasureOptions
		want  string
	}{
		"unknown model": {"resnet5", 1, profiler.MeasureOptions{}, "resnet5"},
		"batch 0":       {"resnet50", 0, profiler.MeasureOptions{}, "batch 0"},
		"no runs":       {"resnet50", 1, profiler.MeasureOptions{Runs: -1}, "runs"},
		"bad peaks":     {"resnet50", 1, profiler.MeasureOptions{Substitute: true, Peaks: &profiler.Peaks{}}, "peaks"},
	} {
		_, err := profiler.Measure(ctx, dev, lib, tc.model, tc.batch, tc.opt)
		if !errors.Is(err, profiler.ErrMeasure) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrMeasure mentioning %q", name, err, tc.want)
		}
	}
	// A GPU with no gpu.Spec cannot be named in a profile.
	odd := gpu.H100SXM
	odd.Name = "Radeon"
	dev2 := simDev(t, sim.Config{Spec: odd})
	if _, err := profiler.Measure(ctx, dev2, kernels.New(dev2), "resnet50", 1, profiler.MeasureOptions{Substitute: true}); !errors.Is(err, profiler.ErrMeasure) || !strings.Contains(err.Error(), "Radeon") {
		t.Errorf("unknown GPU: %v", err)
	}
	// Cancelled: stops with the context's error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := profiler.Measure(cctx, dev, lib, "mobilenetv2", 1, profiler.MeasureOptions{Substitute: true}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// The date and the command end up in the notes as given.
func TestMeasureNotes(t *testing.T) {
	dev := simDev(t, sim.Config{})
	date := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	p, err := profiler.Measure(context.Background(), dev, kernels.New(dev), "mobilenetv2", 1, profiler.MeasureOptions{
		Substitute: true, Runs: 1, NoScaling: true, Date: date, Command: "atoll profile --model mobilenetv2",
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Notes["date"] != "2026-11-21T09:00:00Z" || p.Notes["command"] != "atoll profile --model mobilenetv2" || !strings.Contains(p.Notes["scaling"], "not measured") {
		t.Errorf("notes %v", p.Notes)
	}
	if !strings.HasPrefix(p.Device, "sim:H100-SXM") {
		t.Errorf("device %q", p.Device)
	}
}

// attrDev is the simulator with a driver that reports function
// attributes, as gpu/cuda does.
type attrDev struct {
	gpu.Device
	regs, static int
	calls        int
}

func (d *attrDev) FuncAttributes(gpu.Func) (int, int, int, error) {
	d.calls++
	return d.regs, d.static, 1024, nil
}

// Registers and shared memory come from the driver where it reports them,
// and SMs needed follow the occupancy they allow.
func TestMeasureDriverAttributes(t *testing.T) {
	dev := &attrDev{Device: simDev(t, sim.Config{}), regs: 168, static: 2048}
	p, err := profiler.Measure(context.Background(), dev, kernels.New(dev), "resnet50", 1, profiler.MeasureOptions{
		Substitute: true, Runs: 2, NoScaling: true})
	if err != nil {
		t.Fatal(err)
	}
	if dev.calls == 0 || !strings.Contains(p.Notes["registers"], "from the driver") {
		t.Fatalf("driver not asked (%d calls); notes %q", dev.calls, p.Notes["registers"])
	}
	layers := ops(t, "resnet50", 1)
	for i, k := range p.Kernels {
		g := layers[i].Op.Geometry()
		regs, smem := 168, 2048+g.SharedMem
		if len(k.Tags) > 0 { // substituted: the model op's own figures
			regs, smem = g.Registers, g.SharedMem
		}
		if k.Registers != regs || k.SharedMem != smem {
			t.Errorf("%s: registers %d, shared %d; want %d, %d", k.Name, k.Registers, k.SharedMem, regs, smem)
		}
		per, _, err := gpu.H100SXM.Occupancy(g.Block.Count(), regs, smem)
		if err != nil {
			t.Fatal(err)
		}
		if want := gpu.H100SXM.SMsNeeded(g.Grid.Count(), per); k.SMsNeeded != want {
			t.Errorf("%s: smsNeeded %d, want %d at %d blocks/SM", k.Name, k.SMsNeeded, want, per)
		}
	}
}

// Every kernel is timed on SM partitions: its points run from the
// smallest partition to the whole GPU and fewer SMs are never much
// faster; a vendor-library kernel's SMs needed is the smallest partition
// within the slack of the whole GPU's time. On the simulator a vendor kernel takes the
// geometry of atoll's kernel for its op, so the figure must match what
// that grid needs.
func TestMeasurePartitionsOfVendorKernels(t *testing.T) {
	dev := simDev(t, sim.Config{BLAS: true})
	p, err := profiler.Measure(context.Background(), dev, kernels.New(dev), "resnet50", 1, profiler.MeasureOptions{
		Substitute: true, Runs: 3, Warmup: 1, ScalingRuns: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Notes["partition"] == "" {
		t.Error("notes lack how partitions were measured")
	}
	blas := 0
	for _, k := range p.Kernels {
		pts := k.Partition
		if len(pts) != len(profiler.PartitionSMs)+1 || pts[0].SMs != 8 || pts[len(pts)-1].SMs != gpu.H100SXM.SMs {
			t.Fatalf("%s: partition points %+v", k.Name, pts)
		}
		for i := 1; i < len(pts); i++ {
			if pts[i-1].DurationUs < 0.95*pts[i].DurationUs {
				t.Errorf("%s: %.3f us on %d SMs, %.3f on %d", k.Name, pts[i-1].DurationUs, pts[i-1].SMs, pts[i].DurationUs, pts[i].SMs)
			}
		}
		if !slices.Contains(k.Tags, profiles.TagBLAS) {
			continue // atoll's own kernel: its smsNeeded is its grid's
		}
		blas++
		if k.SMsNeeded != k.PartitionSMs() {
			t.Errorf("%s: smsNeeded %d, its partitions say %d", k.Name, k.SMsNeeded, k.PartitionSMs())
		}
		full := pts[len(pts)-1].DurationUs
		for _, pt := range pts {
			if pt.SMs < k.SMsNeeded && pt.DurationUs <= profiles.PartitionSlack*full {
				t.Errorf("%s: needs %d SMs, but ran on %d within the slack (%+v)", k.Name, k.SMsNeeded, pt.SMs, pts)
			}
		}
	}
	if blas == 0 {
		t.Fatal("no kernel ran on the simulated BLAS")
	}
	// Without partitions every kernel, vendor ones included, takes its
	// smsNeeded from its grid.
	dev = simDev(t, sim.Config{BLAS: true})
	q, err := profiler.Measure(context.Background(), dev, kernels.New(dev), "resnet50", 1, profiler.MeasureOptions{
		Substitute: true, Runs: 3, Warmup: 1, ScalingRuns: 1, NoPartition: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(q.Notes["partition"], "not measured") || q.Notes["scaling"] == "" {
		t.Errorf("notes: partition %q, scaling %q", q.Notes["partition"], q.Notes["scaling"])
	}
	for i, k := range q.Kernels {
		per, _, _ := gpu.H100SXM.Occupancy(k.BlockDim().Count(), k.Registers, k.SharedMem)
		if len(k.Partition) > 0 || len(k.Scaling) == 0 || k.SMsNeeded != min(gpu.H100SXM.SMsNeeded(k.GridDim().Count(), per), gpu.H100SXM.SMs) {
			t.Errorf("%s: %d partition points, %d scaling points, smsNeeded %d (with partitions %d)", k.Name, len(k.Partition), len(k.Scaling), k.SMsNeeded, p.Kernels[i].SMsNeeded)
		}
	}
}

// countDev counts the launches made through it but those of the blocker
// GEMM, whose number follows the host's measured enqueue time: the
// profiler's first launch, timing the blocker, is that launch.
type countDev struct {
	gpu.Device
	blocker  *gpu.Launch
	launches int
}

func (d *countDev) Launch(s gpu.Stream, l *gpu.Launch) error {
	if d.blocker == nil {
		d.blocker = l
	}
	if l != d.blocker {
		d.launches++
	}
	return d.Device.Launch(s, l)
}

// With WarmPass every pass is launched twice, the first run untimed, and
// the notes say L2 is warm; the simulator, which has no L2, times the
// kernels alike either way.
func TestMeasureWarmPass(t *testing.T) {
	measure := func(warm bool) (*profiles.Profile, int) {
		dev := &countDev{Device: simDev(t, sim.Config{})}
		p, err := profiler.Measure(context.Background(), dev, kernels.New(dev), "mobilenetv2", 1, profiler.MeasureOptions{
			Substitute: true, Runs: 2, Warmup: 1, NoScaling: true, WarmPass: warm,
			Peaks: &profiler.Peaks{FLOPS: 700e12, FP32: 60e12, Bandwidth: 3e12, Method: "given by the test"},
		})
		if err != nil {
			t.Fatal(err)
		}
		return p, dev.launches
	}
	cold, nc := measure(false)
	warm, nw := measure(true)
	if n := len(cold.Kernels); nw-nc != 3*n {
		t.Errorf("warm passes launched %d kernels more than cold ones, want %d (3 passes of %d)", nw-nc, 3*n, n)
	}
	if !strings.Contains(warm.Notes["method"], "untimed run of the same pass") || !strings.Contains(cold.Notes["method"], "L2 is cold") {
		t.Errorf("methods: warm %q, cold %q", warm.Notes["method"], cold.Notes["method"])
	}
	for i := range cold.Kernels {
		if a, b := cold.Kernels[i].DurationUs, warm.Kernels[i].DurationUs; a != b {
			t.Errorf("kernel %d: %v µs cold, %v warm on the simulator", i, a, b)
		}
	}
}

// With GraphPasses each kernel also gets a duration inside a graph of the
// whole pass with no events between kernels: on a simulator whose kernels
// in graphs run ProfileGap less than their profiled time and whose events hold EventCost, the graph durations sum to the stream
// durations less that, whatever the events inside the timed run cost. A
// device that does not record graphs is refused.
func TestMeasureGraphPasses(t *testing.T) {
	const ec, gap = 200 * time.Nanosecond, 300 * time.Nanosecond // below half of every kernel
	peaks := &profiler.Peaks{FLOPS: 700e12, FP32: 60e12, Bandwidth: 3e12, Method: "given by the test"}
	measure := func(dev gpu.Device, graph bool) (*profiles.Profile, error) {
		return profiler.Measure(context.Background(), dev, kernels.New(dev), "mobilenetv2", 1, profiler.MeasureOptions{
			Substitute: true, Runs: 2, Warmup: 1, NoScaling: true, GraphPasses: graph, Peaks: peaks,
		})
	}
	cfg := sim.Config{EventCost: ec, ProfileGap: gap}
	stream, err := measure(simDev(t, cfg), false)
	if err != nil {
		t.Fatal(err)
	}
	graph, err := measure(simDev(t, cfg), true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(graph.Notes["graphUs"], "five times") || stream.Notes["graphUs"] != "" {
		t.Errorf("graphUs notes %q with graph passes, %q without", graph.Notes["graphUs"], stream.Notes["graphUs"])
	}
	var want, got float64
	g := float64(gap) / 1e3
	for i, k := range stream.Kernels {
		if stream.Kernels[i].GraphUs != 0 {
			t.Fatalf("kernel %d: graphUs %v without graph passes", i, stream.Kernels[i].GraphUs)
		}
		gk := graph.Kernels[i]
		if gk.DurationUs != k.DurationUs || !(gk.GraphUs > 0 && gk.GraphUs < k.DurationUs) {
			t.Errorf("kernel %d (%s): %.3f µs by stream (%.3f in the other profile), %.3f in a graph", i, k.Name, k.DurationUs, gk.DurationUs, gk.GraphUs)
		}
		want += k.DurationUs - g
		got += gk.GraphUs
	}
	if math.Abs(got-want) > 0.001*float64(len(stream.Kernels)) {
		t.Errorf("graph durations sum to %.3f µs, want %.3f (the stream durations less the profile gap)", got, want)
	}
	if _, err := measure(&countDev{Device: simDev(t, sim.Config{})}, true); err == nil || !strings.Contains(err.Error(), "does not record graphs") {
		t.Errorf("graph passes on a device without graphs: %v", err)
	}
}
