package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/policies"
	"atoll/profiles"
)

func demoConfig(t testing.TB, d time.Duration) *Config {
	t.Helper()
	hp, err := profiles.Lookup("H100-SXM", "resnet50", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	be, err := profiles.Lookup("H100-SXM", "resnet50-train", 32, "")
	if err != nil {
		t.Fatal(err)
	}
	return &Config{
		HP: hp, BE: be, Arrival: Poisson, Load: 0.5, Seed: 1,
		Duration: d, Warmup: 50 * time.Millisecond,
		NewDevice: func() (gpu.Device, error) { return sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1}) },
	}
}

func TestSuiteRunsEveryPolicy(t *testing.T) {
	c := demoConfig(t, 200*time.Millisecond)
	c.Parallel = 2
	rs, err := Suite(context.Background(), c, policies.Names())
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Policy != policies.Names()[i] {
			t.Fatalf("row %d is %s", i, r.Policy)
		}
		if r.HP.Count == 0 || r.HPCompleted != r.Dedicated.Count {
			t.Errorf("%s: %d HP requests measured, %d dedicated: every admitted request must complete", r.Policy, r.HPCompleted, r.Dedicated.Count)
		}
		if r.HP.P50 < r.Workload.SoloHPUs*0.99 {
			t.Errorf("%s: HP p50 %.0f µs is faster than the solo latency %.0f µs", r.Policy, r.HP.P50, r.Workload.SoloHPUs)
		}
		if r.Launches == 0 || r.HostUsPerLaunch <= 0 {
			t.Errorf("%s: %d launches, host time per launch %v µs: the driver's launch cost went unmeasured", r.Policy, r.Launches, r.HostUsPerLaunch)
		}
		// The parts of a launch add up to the whole (up to rounding), and
		// events were queried (the kernels of a graph's chunk share one:
		// fewer queries than launches).
		if h := r.HostPerLaunch; h == nil || h.LaunchUs <= 0 || h.PollUs <= 0 || h.Queries <= 0 ||
			math.Abs(h.BindUs+h.LaunchUs+h.RecordUs-r.HostUsPerLaunch) > 0.005 {
			t.Errorf("%s: host time by part %+v, per launch %v µs: want parts that add up and every event queried", r.Policy, h, r.HostUsPerLaunch)
		}
		if r.Policy == "dedicated" {
			if *r.P99Overhead != 0 || r.BEWorkPerSec != 0 {
				t.Errorf("dedicated must match itself and run no BE: %+v", r)
			}
			continue
		}
		if r.BENormalized == nil || *r.BENormalized <= 0 || *r.BENormalized > 1.05 {
			t.Errorf("%s: BE normalized throughput %v outside (0, 1.05]", r.Policy, r.BENormalized)
		}
		// BE's throughput splits into what it did beside busy HP and in
		// HP's idle time, weighted by the time of each.
		// (A policy that lets HP queue up for the whole run has no idle
		// time to split by.)
		val := func(p *float64) float64 {
			if p == nil {
				return 0
			}
			return *p
		}
		if sh := r.HPBusyShare; sh == nil || *sh <= 0 || *sh > 1 || r.BEBesideBusyHP == nil || *sh < 1 && r.BEWhileHPIdle == nil {
			t.Errorf("%s: no split of BE's throughput by HP busy/idle (HP busy %v)", r.Policy, val(sh))
		} else if math.Abs(*sh*val(r.BEBesideBusyHP)+(1-*sh)*val(r.BEWhileHPIdle)-*r.BENormalized) > 1e-9 {
			t.Errorf("%s: HP busy %.3f, BE beside busy HP %.3f, in idle %.3f do not give BE normalized %.3f",
				r.Policy, *sh, val(r.BEBesideBusyHP), val(r.BEWhileHPIdle), *r.BENormalized)
		}
	}
}

// The same configuration gives the same reports: the simulator and the
// arrivals are seeded.
func TestRunIsDeterministic(t *testing.T) {
	run := func() *Report {
		c := demoConfig(t, 100*time.Millisecond)
		b, err := Measure(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		r, err := RunPolicy(context.Background(), c, b, "atoll")
		if err != nil {
			t.Fatal(err)
		}
		r.WallSec = 0
		return r
	}
	a, b := run(), run()
	if a.HP != b.HP || a.BEWorkPerSec != b.BEWorkPerSec || a.Preemptions != b.Preemptions {
		t.Fatalf("two runs differ:\n%+v\n%+v", a.HP, b.HP)
	}
}

func TestConfigErrors(t *testing.T) {
	base := demoConfig(t, time.Second)
	cases := map[string]func(c *Config){
		"no HP profile":        func(c *Config) { c.HP = nil },
		"no device":            func(c *Config) { c.NewDevice = nil },
		"duration must be":     func(c *Config) { c.Duration = 0 },
		"load must be":         func(c *Config) { c.Load = 0 },
		"no trace given":       func(c *Config) { c.Arrival = Trace },
		"BE profile is for A1": func(c *Config) { be := *c.BE; be.GPU = "A100-SXM"; c.BE = &be },
		"HP streams must be":   func(c *Config) { c.HPStreams = 17 },
		"HP streams must be 1": func(c *Config) { c.HPStreams = -1 },
	}
	for want, mutate := range cases {
		c := *base
		mutate(&c)
		_, err := Measure(context.Background(), &c)
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), strings.TrimSuffix(want, "1")) {
			t.Errorf("%s: err = %v", want, err)
		}
	}
}

// With HPStreams the HP model is served by that many clients of one group
// holding the arrivals on the first (sched routes each to the member with
// the fewest requests unfinished), and every request completes. On the
// simulator, whose batch-1 ResNet-50 leaves most SMs idle, two streams at
// load 0.9 cut the queueing one stream has (M/D/1: p99 about 20 service
// times) to a few service times.
func TestHPStreams(t *testing.T) {
	c := demoConfig(t, 2*time.Second)
	arr, err := Arrivals(Poisson, 1000, 50*time.Millisecond, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	c.HPStreams = 3
	hp := c.hpClients(arr)
	if len(hp) != 3 || len(hp[0].Arrivals) != len(arr) || len(hp[1].Arrivals)+len(hp[2].Arrivals) != 0 {
		t.Fatalf("clients %d, arrivals %d/%d/%d: want 3, every arrival on the first", len(hp), len(hp[0].Arrivals), len(hp[1].Arrivals), len(hp[2].Arrivals))
	}
	for i, w := range hp {
		if w.Group == "" || w.Group != hp[0].Group || w.Profile != c.HP {
			t.Errorf("client %d: group %q profile %p, want one group of the HP profile", i, w.Group, w.Profile)
		}
	}
	c.HPStreams = 1
	if hp := c.hpClients(arr); len(hp) != 1 || hp[0].Group != "" {
		t.Errorf("one stream: %d clients, group %q: want one client, no group", len(hp), hp[0].Group)
	}

	c.BE, c.Load = nil, 0.9
	p99 := map[int]float64{}
	for _, n := range []int{1, 2} {
		c.HPStreams = n
		rs, err := Suite(context.Background(), c, []string{"atoll"})
		if err != nil {
			t.Fatal(err)
		}
		r := rs[0]
		if r.HPCompleted != r.Dedicated.Count || r.HPCompleted == 0 {
			t.Fatalf("%d streams: %d completed, %d dedicated", n, r.HPCompleted, r.Dedicated.Count)
		}
		if want := map[int]int{1: 0, 2: 2}[n]; r.Workload.HPStreams != want {
			t.Errorf("%d streams: report says %d, want %d", n, r.Workload.HPStreams, want)
		}
		p99[n] = r.HP.P99 / r.Workload.SoloHPUs
	}
	if !(p99[1] > 10 && p99[2] < p99[1]/3) {
		t.Errorf("p99 / solo at load 0.9: one stream %.1f, two %.1f: want an M/D/1 queue (> 10) cut by at least 3x", p99[1], p99[2])
	}
}

func TestDeviceErrorIsReported(t *testing.T) {
	c := demoConfig(t, time.Second)
	c.NewDevice = func() (gpu.Device, error) { return nil, gpu.ErrNoDevice }
	if _, err := Measure(context.Background(), c); !errors.Is(err, gpu.ErrNoDevice) {
		t.Fatalf("err = %v, want ErrNoDevice", err)
	}
}

// earlyEvents is a device whose event times run behind its clock by lag:
// a GPU whose timestamps were aligned with the host clock wrongly.
type earlyEvents struct {
	gpu.Device
	lag time.Duration
}

func (d earlyEvents) Time(e gpu.Event) (time.Duration, error) {
	t, err := d.Device.Time(e)
	return t - d.lag, err
}

// TestMisalignedClockIsRefused: when requests complete before they arrive
// (event times behind the device clock by more than a request takes), the
// solo measurement says so instead of offering a negative rate.
func TestMisalignedClockIsRefused(t *testing.T) {
	c := demoConfig(t, time.Second)
	c.NewDevice = func() (gpu.Device, error) {
		d, err := sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1})
		return earlyEvents{d, 2 * time.Millisecond}, err
	}
	_, err := Measure(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "not aligned with its clock") {
		t.Fatalf("err = %v, want the misaligned-clock refusal", err)
	}
}

// BenchmarkDemoWorkload10s simulates 10 s of GPU time of the demo workload
// (ResNet-50 bs1 HP beside ResNet-50 bs32 training) under each policy
// through the whole stack: arrivals, the scheduler core, the driver loop and
// the simulated GPU with the demo's host figures, at loads 0.3, 0.5, 0.9
// and 2 (at 2 HP alone cannot keep up:
// the queue grows for the whole run). The load's unit is the HP profile's
// solo time. Run it with -cpu 1 for the acceptance figures (under 5 s of
// wall time per 10 s simulated at load 0.5, under 20 s at load 2, one core).
func BenchmarkDemoWorkload10s(b *testing.B) {
	for _, load := range []float64{0.3, 0.5, 0.9, 2} {
		for _, policy := range []string{"priority", "orion", "reef", "atoll"} {
			b.Run(fmt.Sprintf("load%g/%s", load, policy), func(b *testing.B) {
				c := demoConfig(b, 10*time.Second)
				c.Warmup = 0
				// The demo's simulator.
				c.NewDevice = func() (gpu.Device, error) { return sim.New(sim.Defaults(gpu.H100SXM, 1)) }
				base := &Baseline{Rate: load / c.HP.Total().Seconds()}
				var err error
				base.Arrivals, err = Arrivals(Poisson, base.Rate, c.Duration, 1, 0)
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for range b.N {
					if _, err := c.run(context.Background(), policy, base.Arrivals, true); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(base.Arrivals)), "requests/op")
			})
		}
	}
}

func TestProfilesLabel(t *testing.T) {
	m := &profiles.Profile{GPU: "H100-SXM", Source: profiles.SourceMeasured}
	e := &profiles.Profile{GPU: "H100-SXM", Source: profiles.SourceEstimated}
	h := &profiles.Profile{GPU: "H200", Source: profiles.SourceMeasured}
	for _, c := range []struct {
		hp, be *profiles.Profile
		want   string
	}{
		{m, nil, "H100-SXM, measured"},
		{m, m, "H100-SXM, measured"},
		{m, e, "H100-SXM, HP measured, BE estimated"},
		{m, h, "HP H100-SXM measured, BE H200 measured"},
	} {
		if got := profilesLabel(c.hp, c.be); got != c.want {
			t.Errorf("profilesLabel = %q, want %q", got, c.want)
		}
	}
}

// A report's header says which library ran the products and whether HP
// requests went as graphs, and names no library when none ran.
func TestDescribeSaysWhatRan(t *testing.T) {
	r := &Report{Policy: "atoll", Backend: "cuda", Device: "NVIDIA H200", BLAS: "cuBLASLt 13.1.0", HPGraphs: "on", GraphLaunches: 7}
	got := Describe(r)
	for _, want := range []string{"GEMMs and convolutions (but depthwise): cuBLASLt 13.1.0", "one graph each", "7 in the atoll run"} {
		if !strings.Contains(got, want) {
			t.Errorf("header %q lacks %q", got, want)
		}
	}
	r.BLAS = ""
	if got := Describe(r); strings.Contains(got, "1x1 convolutions") || strings.Contains(got, "streams") {
		t.Errorf("header %q names a library that did not run, or streams", got)
	}
	r.Workload.HPStreams = 2
	if got := Describe(r); !strings.Contains(got, "served by 2 streams") {
		t.Errorf("header %q does not say HP had two streams", got)
	}
}

// With KernelSpans the reports list every HP kernel's span: with an event
// after each kernel every one is measured, beside BE under priority the
// pass takes longer than alone, the spans add up to about a request's
// service, and KernelTable sets the runs side by side; with one event per
// chunk a chunk's span sits at its first kernel.
func TestKernelSpans(t *testing.T) {
	c := demoConfig(t, 150*time.Millisecond)
	c.KernelSpans, c.HPKernelEvents = true, true
	b, err := Measure(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	sum := func(r *Report) (span, solo float64) {
		for _, k := range r.HPKernels {
			span += k.MeanUs
			solo += k.SoloUs
		}
		return span, solo
	}
	var rs []*Report
	for _, p := range []string{"dedicated", "priority"} {
		r, err := RunPolicy(context.Background(), c, b, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.HPKernels) != len(c.HP.Kernels) {
			t.Fatalf("%s: %d kernels listed, the model has %d", p, len(r.HPKernels), len(c.HP.Kernels))
		}
		for i, k := range r.HPKernels {
			if k.Kernel != c.HP.Kernels[i].Name || k.MeanUs <= 0 || k.MedianUs <= 0 || k.SoloUs <= 0 {
				t.Fatalf("%s: kernel %d: %+v", p, i, k)
			}
		}
		span, _ := sum(r)
		if d := math.Abs(span-r.HPService.Mean) / r.HPService.Mean; d > 0.1 {
			t.Errorf("%s: the kernels' mean spans add up to %.0f µs, the mean service is %.0f µs", p, span, r.HPService.Mean)
		}
		rs = append(rs, r)
	}
	alone, _ := sum(rs[0])
	beside, _ := sum(rs[1])
	if beside <= alone*1.05 {
		t.Errorf("beside BE under priority the pass's spans add up to %.0f µs, alone %.0f", beside, alone)
	}
	var out strings.Builder
	if err := KernelTable(&out, rs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), c.HP.Kernels[0].Name) || !strings.Contains(out.String(), "pass") {
		t.Errorf("KernelTable:\n%s", out.String())
	}

	c.HPKernelEvents = false
	r, err := RunPolicy(context.Background(), c, b, "priority")
	if err != nil {
		t.Fatal(err)
	}
	zeros := 0
	for _, k := range r.HPKernels {
		if k.MeanUs == 0 {
			zeros++
		}
	}
	if r.HPKernels[0].MeanUs <= 0 || zeros == 0 {
		t.Errorf("one event per chunk: %d of %d kernels without a span of their own, the first %v", zeros, len(r.HPKernels), r.HPKernels[0].MeanUs)
	}
	out.Reset()
	if err := KernelTable(&out, append(rs, r)); err != nil || !strings.Contains(out.String(), "–") {
		t.Errorf("KernelTable with a chunked run: %v\n%s", err, out.String())
	}
	other := *r
	other.HPKernels = other.HPKernels[1:]
	if err := KernelTable(io.Discard, []*Report{r, &other}); err == nil || !strings.Contains(err.Error(), "different models") {
		t.Errorf("KernelTable of two models' kernels: %v, want the refusal", err)
	}
}
