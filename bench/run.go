package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"atoll/gpu"
	"atoll/policies"
	"atoll/profiles"
	"atoll/sched"
)

// ErrConfig reports an unusable benchmark configuration.
var ErrConfig = errors.New("bench: invalid configuration")

// Config is one co-location workload and how to run it.
type Config struct {
	HP       *profiles.Profile // the HP client's kernels (one request)
	BE       *profiles.Profile // the BE client's kernels (one iteration); nil = none
	Arrival  string            // Poisson, Uniform, Bursty or Trace
	Sigma    float64           // log-normal shape (Bursty)
	Trace    []time.Duration   // arrival times when Arrival == Trace
	Load     float64           // offered HP load (ignored for Trace)
	Seed     uint64
	Duration time.Duration // measured span, after Warmup
	Warmup   time.Duration

	// NewDevice opens a fresh device for each run (a run owns its device).
	NewDevice func() (gpu.Device, error)
	// Binder makes launches for a device; nil means the profile binder
	// (the simulator).
	Binder func(dev gpu.Device, w sched.Workload) (sched.Binder, error)
	// Command is recorded in reports (the exact command line).
	Command string
	// Progress, when set, is told when each run starts; Suite never calls
	// it from two goroutines at once, though its runs go in parallel.
	Progress func(msg string)
	// KernelSolo is HP's per-kernel solo duration measured warm (the
	// matrix sets it from its solo runs): attribution measures delay
	// against it instead of the profile's durations.
	KernelSolo []time.Duration
	// Pairs, when set, manages the backend's padded pair kernels around a
	// warm-up: freeze=false lets compiles start; freeze=true waits for the
	// compiles started (until ctx ends) and then starts no more, so every
	// measured run uses one set of pairs. It returns a note for the record.
	Pairs func(ctx context.Context, freeze bool) string
	// Samples keeps every request's latency in the reports and adds
	// bootstrap CIs (the matrix sets it).
	Samples bool
	// NoHPGraphs launches HP requests kernel by kernel instead of one graph
	// per request (sched.Options.NoHPGraphs).
	NoHPGraphs bool
	// NoBEGraphs launches BE kernels one by one instead of a chunk per
	// graph (sched.Options.NoBEGraphs).
	NoBEGraphs bool
	// HPKernelEvents records an event after every kernel of an HP graph,
	// not one per chunk (sched.Options.HPKernelEvents).
	HPKernelEvents bool
	// DecisionOrder sends each round's launches in decision order, not HP
	// first (sched.Options.DecisionOrder).
	DecisionOrder bool
	// KernelSpans lists each HP kernel's device span in the policy runs'
	// reports (Report.HPKernels): per kernel with HPKernelEvents, per chunk
	// of the request's graph without.
	KernelSpans bool
	// HPStreams serves the HP model with this many clients (0: one), each
	// with its own stream and buffers (on a GPU, its own instance of the
	// model), an arrival going to the client with the fewest requests
	// unfinished: up to HPStreams requests run at once, where one client
	// serves them one after another.
	HPStreams int
	// HPBatched are the HP model's profiles at larger batch sizes
	// (ascending multiples of HP.Batch; sched.HPWorkload.Batched): each HP
	// client then serves the requests waiting when its stream empties in
	// one pass of the largest batch that does not exceed them.
	HPBatched []*profiles.Profile
	// Parallel is how many policy runs Suite makes at once (0:
	// GOMAXPROCS). Each run owns its device, so more than one is only
	// sound for the simulator: set 1 for a real GPU.
	Parallel int

	lastInfo    gpu.Info // the device of the latest run (each goroutine has its own Config copy)
	lastSpans   []time.Duration
	recordSpans bool
}

func (c *Config) validate() error {
	switch {
	case c.HP == nil:
		return fmt.Errorf("%w: no HP profile", ErrConfig)
	case c.NewDevice == nil:
		return fmt.Errorf("%w: no device", ErrConfig)
	case c.Duration <= 0:
		return fmt.Errorf("%w: duration must be positive, got %v", ErrConfig, c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("%w: warm-up must not be negative, got %v", ErrConfig, c.Warmup)
	case c.Arrival != Trace && !(c.Load > 0 && c.Load <= 4):
		return fmt.Errorf("%w: load must be in (0, 4], got %v", ErrConfig, c.Load)
	case c.Arrival == Trace && len(c.Trace) == 0:
		return fmt.Errorf("%w: trace arrivals requested but no trace given", ErrConfig)
	case c.HPStreams < 0 || c.HPStreams > sched.MaxGroup:
		return fmt.Errorf("%w: HP streams must be in [1, %d], got %d", ErrConfig, sched.MaxGroup, c.HPStreams)
	case len(c.HPBatched) > sched.MaxBatched:
		return fmt.Errorf("%w: %d batched HP profiles (at most %d)", ErrConfig, len(c.HPBatched), sched.MaxBatched)
	}
	if c.BE != nil && c.HP.GPU != c.BE.GPU {
		return fmt.Errorf("%w: HP profile is for %s but BE profile is for %s", ErrConfig, c.HP.GPU, c.BE.GPU)
	}
	return nil
}

// Baseline is what every policy's run is measured against: HP alone on the
// arrival sequence and BE alone, on the same device kind.
type Baseline struct {
	Info      gpu.Info
	Solo      time.Duration // HP service time alone (median of isolated requests)
	Rate      float64       // offered HP requests per second
	Arrivals  []time.Duration
	Dedicated *sched.Trace
	BEAlone   *sched.Trace // nil without BE
}

// Measure makes the baseline runs: solo calibration, HP alone on the
// arrivals, and BE alone.
func Measure(ctx context.Context, c *Config) (*Baseline, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	b := &Baseline{}
	// A first solo pass warms HP's kernels (their modules load on first
	// launch) and the clocks; it is not kept. Without it, the first
	// request of a run launched kernel by kernel took tens of
	// milliseconds and the isolated requests behind it queued.
	if _, _, err := soloLatency(ctx, c); err != nil {
		return nil, fmt.Errorf("measuring HP solo latency: %w", err)
	}
	solo, info, err := soloLatency(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("measuring HP solo latency: %w", err)
	}
	b.Solo, b.Info = solo, info
	span := c.Warmup + c.Duration
	if c.Arrival == Trace {
		b.Arrivals = c.Trace
		b.Rate = Rate(c.Trace, span)
	} else {
		b.Rate = c.Load / solo.Seconds()
		if b.Arrivals, err = Arrivals(c.Arrival, b.Rate, span, c.Seed, c.Sigma); err != nil {
			return nil, err
		}
	}
	c.progress("dedicated (HP alone)")
	if b.Dedicated, err = c.run(ctx, "dedicated", b.Arrivals, false); err != nil {
		return nil, fmt.Errorf("dedicated run: %w", err)
	}
	if c.BE != nil {
		c.progress("BE alone")
		if b.BEAlone, err = c.run(ctx, "streams", nil, true); err != nil {
			return nil, fmt.Errorf("BE-alone run: %w", err)
		}
	}
	return b, nil
}

func (c *Config) progress(msg string) {
	if c.Progress != nil {
		c.Progress(msg)
	}
}

// soloLatency runs isolated HP requests (each far from the last) and takes
// the median service time: the unit of load.
func soloLatency(ctx context.Context, c *Config) (time.Duration, gpu.Info, error) {
	const n = 21
	gap := max(4*c.HP.Total(), time.Millisecond)
	arr := make([]time.Duration, n)
	for i := range arr {
		arr[i] = time.Duration(i+1) * gap
	}
	cc := *c
	cc.Duration, cc.Warmup = time.Duration(n+2)*gap, 0
	cc.recordSpans = true
	tr, err := cc.run(ctx, "dedicated", arr, false)
	if err != nil {
		return 0, gpu.Info{}, err
	}
	c.lastSpans = cc.lastSpans
	if len(tr.Requests) == 0 {
		return 0, gpu.Info{}, fmt.Errorf("no request completed")
	}
	svc := make([]time.Duration, 0, len(tr.Requests))
	for _, r := range tr.Requests {
		svc = append(svc, r.End-r.Arrival)
	}
	sort.Slice(svc, func(i, j int) bool { return svc[i] < svc[j] })
	if svc[0] <= 0 {
		return 0, gpu.Info{}, fmt.Errorf("a request completed %v after it arrived: the device's event times are not aligned with its clock; run again", svc[0])
	}
	return svc[len(svc)/2], cc.lastInfo, nil
}

// run makes one run on a fresh device.
func (c *Config) run(ctx context.Context, policy string, arrivals []time.Duration, withBE bool) (*sched.Trace, error) {
	p, err := policies.ByName(policy)
	if err != nil {
		return nil, err
	}
	dev, err := c.NewDevice()
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	c.lastInfo = dev.Info()
	w := sched.Workload{HP: c.hpClients(arrivals)}
	if withBE && c.BE != nil {
		w.BE = []sched.BEWorkload{{Name: c.BE.Model, Profile: c.BE}}
	}
	opt := sched.Options{Policy: p, Duration: c.Warmup + c.Duration, Warmup: c.Warmup, RecordSpans: c.recordSpans || c.KernelSpans, NoHPGraphs: c.NoHPGraphs, NoBEGraphs: c.NoBEGraphs, HPKernelEvents: c.HPKernelEvents, DecisionOrder: c.DecisionOrder}
	if c.KernelSolo != nil {
		for range w.HP {
			opt.KernelSolo = append(opt.KernelSolo, c.KernelSolo)
		}
	}
	if c.Binder != nil {
		if opt.Binder, err = c.Binder(dev, w); err != nil {
			return nil, err
		}
	}
	tr, err := sched.Run(ctx, dev, w, opt)
	if err == nil && c.recordSpans && len(tr.KernelSpans) > 0 {
		spans := make([]time.Duration, len(tr.KernelSpans[0]))
		for k, st := range tr.KernelSpans[0] {
			spans[k] = st.Median
		}
		c.lastSpans = spans
	}
	return tr, err
}

// hpClients is the HP side of a run: one client with every arrival, or
// HPStreams clients of one group (sched.HPWorkload.Group), the arrivals on
// the first, each arrival served by the member with the fewest requests
// unfinished when it arrives.
func (c *Config) hpClients(arrivals []time.Duration) []sched.HPWorkload {
	if len(arrivals) == 0 {
		return nil
	}
	n := max(c.HPStreams, 1)
	hp := []sched.HPWorkload{{Name: c.HP.Model, Profile: c.HP, Arrivals: arrivals, Batched: c.HPBatched}}
	if n == 1 {
		return hp
	}
	hp[0].Group = c.HP.Model
	for range n - 1 {
		hp = append(hp, sched.HPWorkload{Name: c.HP.Model, Profile: c.HP, Group: c.HP.Model, Batched: c.HPBatched})
	}
	return hp
}

// RunPolicy runs one policy on the shared workload and reports it against
// the baseline.
func RunPolicy(ctx context.Context, c *Config, b *Baseline, policy string) (*Report, error) {
	start := time.Now()
	c.progress(policy)
	tr, err := c.run(ctx, policy, b.Arrivals, policy != "dedicated")
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", policy, err)
	}
	r := c.report(b, policy, tr)
	r.WallSec = time.Since(start).Seconds()
	return r, nil
}

// Suite measures the baseline once and runs each policy, c.Parallel at a
// time. c.Progress is called from one goroutine at a time.
func Suite(ctx context.Context, c *Config, names []string) ([]*Report, error) {
	if p := c.Progress; p != nil {
		var mu sync.Mutex
		cs := *c
		cs.Progress = func(msg string) {
			mu.Lock()
			defer mu.Unlock()
			p(msg)
		}
		c = &cs
	}
	b, err := Measure(ctx, c)
	if err != nil {
		return nil, err
	}
	parallel := c.Parallel
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	out := make([]*Report, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cc := *c // run() records lastInfo: one copy per goroutine
			out[i], errs[i] = RunPolicy(ctx, &cc, b, name)
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// report turns traces into the report of design brief §4.
func (c *Config) report(b *Baseline, policy string, tr *sched.Trace) *Report {
	r := &Report{
		Policy:  policy,
		Backend: b.Info.Backend,
		Device:  b.Info.Name,
		Driver:  b.Info.Driver,
		BLAS:    b.Info.BLAS,
		Command: c.Command,
		Workload: WorkloadInfo{
			HPModel:     c.HP.Model,
			HPBatch:     c.HP.Batch,
			Profiles:    profilesLabel(c.HP, c.BE) + batchedLabel(c.HP, c.HPBatched),
			Arrival:     c.Arrival,
			Load:        c.Load,
			RatePerSec:  b.Rate,
			Seed:        c.Seed,
			DurationSec: c.Duration.Seconds(),
			WarmupSec:   c.Warmup.Seconds(),
			SoloHPUs:    float64(b.Solo) / float64(time.Microsecond),
		},
	}
	if c.HPStreams > 1 {
		r.Workload.HPStreams = c.HPStreams
	}
	var sizes []string
	for _, p := range c.HPBatched {
		sizes = append(sizes, strconv.Itoa(p.Batch))
	}
	r.Workload.HPBatches = strings.Join(sizes, ",")
	if c.Arrival == Trace {
		r.Workload.Load = b.Rate * b.Solo.Seconds()
	}
	if c.BE != nil {
		r.Workload.BEModel, r.Workload.BEBatch = c.BE.Model, c.BE.Batch
	}
	lat, svc := latencies(tr)
	r.HP, r.HPService, r.HPCDF = Summarize(lat), Summarize(svc), CDF(lat)
	r.HPCompleted = len(lat)
	dl, _ := latencies(b.Dedicated)
	r.Dedicated, r.DedicatedCDF = Summarize(dl), CDF(dl)
	if c.BE != nil {
		r.BEWorkPerSec = tr.BEWork.Seconds() / tr.Window().Seconds()
		r.BEAlonePerS = b.BEAlone.BEWork.Seconds() / b.BEAlone.Window().Seconds()
		r.BEItersPerSec = float64(len(tr.Iterations)) / tr.Window().Seconds()
		r.BEAloneItersPerSec = float64(len(b.BEAlone.Iterations)) / b.BEAlone.Window().Seconds()
		r.BEKernelsPerStep = len(c.BE.Kernels)
		r.HPBusyShare, r.BEBesideBusyHP, r.BEWhileHPIdle = busySplit(tr, r.BEAlonePerS)
		if tr.HPBusy > 0 {
			dry := min(1, float64(tr.BEDryHPBusy())/float64(tr.HPBusy))
			r.BEDryShare = &dry
		}
		if gaps := tr.BEDryGaps(); len(gaps) > 0 {
			g := Summarize(gaps)
			r.BEDryGaps = &g
		}
	}
	if c.Samples {
		// Kept in arrival order: latencies of neighbouring requests are
		// correlated (one queue), so the CIs resample blocks of them.
		r.HPSamples, r.DedicatedSamples = EncodeSeries(lat), EncodeSeries(dl)
		// The CIs come from the stored (0.1 µs) samples, so that anyone
		// recomputes the same intervals from the report.
		hs, _, _ := DecodeSeries(r.HPSamples)
		ds, _, _ := DecodeSeries(r.DedicatedSamples)
		if len(hs) > 1 {
			ci := BlockBootstrapQuantile(hs, 0.99, c.Seed)
			r.P99CI = &ci
		}
		if len(hs) > 1 && len(ds) > 1 {
			ci := BlockBootstrapOverhead(hs, ds, 0.99, c.Seed)
			r.P99OverheadCI = &ci
		}
	}
	r.SoloKernelsUs, r.Causes = causeStats(tr)
	r.Blame = blameStats(tr, len(lat))
	if c.KernelSpans {
		r.HPKernels = c.kernelSpans(tr)
	}
	r.Unpadded = tr.UnpaddedLaunches
	var pl []time.Duration
	for _, p := range tr.Preemptions {
		if p.Stopped > p.Decided {
			pl = append(pl, p.Stopped-p.Decided)
		}
	}
	r.Preemptions = len(tr.Preemptions)
	r.PreemptLatency = Summarize(pl)
	r.Padded = tr.PaddedLaunches
	r.Launches = tr.Launches
	r.GraphLaunches, r.HPGraphs, r.HPGraphEvents, r.Streams = tr.GraphLaunches, tr.HPGraphs, tr.HPGraphEvents, tr.Streams
	r.BEGraphs, r.BEChunks, r.BEChunkLaunches = tr.BEGraphs, tr.BEChunks, tr.BEChunkLaunches
	r.LaunchOrder = "hp-first"
	if c.DecisionOrder {
		r.LaunchOrder = "decision"
	}
	if len(c.HPBatched) > 0 {
		r.HPByBatch = map[string]int{}
		for _, q := range tr.Requests {
			r.HPByBatch[strconv.Itoa(q.Batch)]++
		}
	}
	r.GraphWaits, r.StaleGraphEvents = tr.GraphWaits, tr.StaleGraphEvents
	if b.Info.Backend == "cuda" {
		s := tr.HostStalls
		r.HostStalls = &StallStat{Count: s.Count, TotalMs: round3(s.Total.Seconds() * 1e3), LongestMs: round3(s.Longest.Seconds() * 1e3)}
	}
	if tr.Launches > 0 {
		n := float64(tr.Launches)
		us := func(d time.Duration) float64 { return round3(float64(d) / n / 1e3) }
		r.HostUsPerLaunch = us(tr.LaunchHost)
		h := tr.Host
		r.HostPerLaunch = &HostSplit{BindUs: us(h.Bind), LaunchUs: us(h.Launch), RecordUs: us(h.Record), PollUs: us(h.Poll),
			Queries: round3(float64(h.Queries) / n), GraphBuildMs: round3(h.GraphBuild.Seconds() * 1e3),
			DecideUs:     us(max(h.Round-h.Bind-h.Launch-h.Record-h.Poll, 0)),
			SlowLaunches: h.SlowLaunches, SlowLaunchMs: round3(h.SlowLaunchTime.Seconds() * 1e3)}
		if h.Wall > 0 {
			r.HostPerLaunch.BusyShare = round3(float64(h.Round) / float64(h.Wall))
		}
		if h.Arrives > 0 {
			r.HostPerLaunch.ArriveStepUs = round3(float64(h.Arrive) / float64(h.Arrives) / 1e3)
		}
		if o := h.Steps - h.Arrives; o > 0 {
			r.HostPerLaunch.OtherStepUs = round3(float64(h.Step-h.Arrive) / float64(o) / 1e3)
		}
		r.HostPerLaunch.Steps = round3(float64(h.Steps) / n)
	}
	r.Finish()
	return r
}

// latencies are each measured request's latency (end − scheduled arrival)
// and service time (end − first kernel start).
func latencies(tr *sched.Trace) (lat, svc []time.Duration) {
	for _, q := range tr.Requests {
		lat = append(lat, q.End-q.Arrival)
		svc = append(svc, q.End-q.Start)
	}
	return lat, svc
}

// profilesLabel says where the kernel timings came from: "H100-SXM,
// measured", or each client's source when they differ ("H100-SXM, HP
// measured, BE estimated").
func profilesLabel(hp, be *profiles.Profile) string {
	if be == nil || (be.GPU == hp.GPU && be.Source == hp.Source) {
		return fmt.Sprintf("%s, %s", hp.GPU, hp.Source)
	}
	if be.GPU == hp.GPU {
		return fmt.Sprintf("%s, HP %s, BE %s", hp.GPU, hp.Source, be.Source)
	}
	return fmt.Sprintf("HP %s %s, BE %s %s", hp.GPU, hp.Source, be.GPU, be.Source)
}

// batchedLabel adds the batched passes' source where it differs from the
// request's (", batched passes estimated").
func batchedLabel(hp *profiles.Profile, batched []*profiles.Profile) string {
	for _, p := range batched {
		if p.Source != hp.Source {
			return ", batched passes " + p.Source
		}
	}
	return ""
}

// causeStats summarises the requests' causes of delay (µs).
func causeStats(tr *sched.Trace) (float64, []CauseStat) {
	if len(tr.Requests) == 0 {
		return 0, nil
	}
	var out []CauseStat
	xs := make([]time.Duration, len(tr.Requests))
	for c := range sched.NumCauses {
		for i, q := range tr.Requests {
			xs[i] = q.Causes[c]
		}
		s := Summarize(xs)
		out = append(out, CauseStat{Cause: c.String(), MeanUs: round3(s.Mean), P99Us: round3(s.P99)})
	}
	return microseconds(tr.Requests[0].Solo), out
}

// kernelSpans is HP client 0's kernels' spans in tr (its first pass
// variant's kernels, the profile's).
func (c *Config) kernelSpans(tr *sched.Trace) []KernelSpan {
	if len(tr.KernelSpans) == 0 {
		return nil
	}
	out := make([]KernelSpan, 0, len(tr.KernelSpans[0]))
	for k, st := range tr.KernelSpans[0] {
		out = append(out, KernelSpan{Kernel: c.HP.Kernels[k].Name, SoloUs: microseconds(st.Solo), MeanUs: microseconds(st.Mean), MedianUs: microseconds(st.Median)})
	}
	return out
}

// microseconds is d in µs, to the ns.
func microseconds(d time.Duration) float64 { return round3(float64(d) / 1e3) }

// blameStats lists the BE kernels HP was slowed beside, most delay first
// (at most 10).
func blameStats(tr *sched.Trace, requests int) []BlameStat {
	var out []BlameStat
	for k, d := range tr.BlameByKernel {
		st := BlameStat{Kernel: k, TotalUs: microseconds(d)}
		if requests > 0 {
			st.PerRequestUs = round3(st.TotalUs / float64(requests))
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].TotalUs != out[j].TotalUs {
			return out[i].TotalUs > out[j].TotalUs
		}
		return out[i].Kernel < out[j].Kernel
	})
	return out[:min(len(out), 10)]
}

// busySplit splits a run's BE work by whether HP was busy when it finished
// (Report.HPBusyShare, BEBesideBusyHP, BEWhileHPIdle); nil where a part
// has no time or BE has no alone rate.
func busySplit(tr *sched.Trace, alone float64) (share, beside, idle *float64) {
	win, busy := tr.Window().Seconds(), tr.HPBusy.Seconds()
	if win <= 0 || alone <= 0 {
		return nil, nil, nil
	}
	busy = min(busy, win)
	sh := busy / win
	share = &sh
	if busy > 0 {
		v := tr.BEWorkHPBusy.Seconds() / busy / alone
		beside = &v
	}
	if win-busy > 0 {
		v := (tr.BEWork - tr.BEWorkHPBusy).Seconds() / (win - busy) / alone
		idle = &v
	}
	return share, beside, idle
}
