package sched

import (
	"cmp"
	"context"
	"slices"
	"time"

	"atoll/gpu"
	"atoll/profiles"
)

// Workload is what Run serves.
type Workload struct {
	HP []HPWorkload
	BE []BEWorkload
}

// HPWorkload is one open-loop HP client: each arrival is a request that runs
// the profile's kernel sequence once.
type HPWorkload struct {
	Name     string
	Profile  *profiles.Profile
	Arrivals []time.Duration // device-clock times, ascending
	// Group, when set, makes the clients of one Group (same profile) the
	// streams of one server: an arrival of any of them goes, when it
	// arrives, to the member with the fewest requests unfinished (the first
	// such in workload order), so that a request waits only while every
	// stream is busy.
	Group string
	// Batched, when set, are the model's profiles at larger batch sizes
	// (ascending multiples of Profile.Batch, at most MaxBatched): the
	// client then serves the requests waiting when its stream empties in
	// one pass of the largest batch that does not exceed them, so that a
	// queue is served faster than one request after another.
	Batched []*profiles.Profile
}

// BEWorkload is one closed-loop BE client: from Start it runs iterations of
// the profile's kernel sequence back to back until the run ends.
type BEWorkload struct {
	Name    string
	Profile *profiles.Profile
	Start   time.Duration
}

// Options control Run.
type Options struct {
	Policy Policy
	// Duration: HP arrivals at or after it are not admitted and BE stops
	// at it; Run then drains the HP requests admitted.
	Duration time.Duration
	// Warmup: requests arriving, iterations starting, preemptions decided
	// and BE work completed before it are left out of the Trace.
	Warmup time.Duration
	// Binder makes launches; nil means NewProfileBinder (gpu/sim).
	Binder Binder
	// Stall is how long (device time) launches may be in flight with none
	// completing before Run gives up (default 10 s).
	Stall time.Duration
	// Drain is how long after Duration the run may take to drain
	// (default 60 s).
	Drain time.Duration
	// KernelSolo, when set, is each HP client's per-kernel solo duration
	// (indexed like the profile's kernels) that attribution measures
	// delay against; kernels it lacks use the profile's duration.
	KernelSolo [][]time.Duration
	// NoAttribution turns the per-request split into causes off
	// (RequestRecord.Causes stay zero); it costs about 0.1 µs of host time
	// per HP launch (BenchmarkAttribution).
	NoAttribution bool
	// RecordSpans keeps each measured HP kernel's device span (completion
	// − max(submission, previous completion)): Trace.KernelSpans.
	RecordSpans bool
	// OnDecision, when set, sees every decision as the driver applies it
	// (a decision log for debugging and reports). It must not block.
	OnDecision func(Decision)
	// NoHPGraphs launches HP requests kernel by kernel even where the
	// device records graphs (gpu.Grapher): by default a request whose
	// kernels are all launched at once, in Plain form, is submitted as one
	// graph (sched/graphs.go), one host call instead of one per kernel.
	NoHPGraphs bool
	// HPKernelEvents records an event after every kernel of an HP graph.
	// By default a graph records one event per chunk of its kernels (cut
	// as BE iterations are: chunks.go), after the chunk's last kernel: a
	// recorded event costs cuGraphLaunch about a quarter of a launch of
	// host time (153 µs for 57 kernels with an event each on an H100,
	// 6.5 µs with one), and the core then sees a chunk's kernels complete
	// together, when its last one does. The request's end is exact either
	// way (its last kernel ends a chunk).
	HPKernelEvents bool
	// NoBEGraphs launches BE kernels one by one even where the device
	// records graphs: by default the core cuts each BE iteration into
	// chunks (Config.BEChunks) and a chunk launched whole is submitted as
	// one graph (sched/begraphs.go).
	NoBEGraphs bool
	// DecisionOrder sends each round's launches to the device in the order
	// the core decided them. By default a round's HP launches go before
	// its BE launches, and the BE launches stop for an HP arrival that
	// comes due while the host makes them (sched/loop.go, holdBE); this is
	// the behaviour before that, kept to measure the difference.
	DecisionOrder bool
}

// Trace is what a run measured. Times are on the device clock.
type Trace struct {
	// Start is the device-clock time the run began; arrivals, warm-up and
	// duration are relative to it, record times are device-clock times.
	Start            time.Duration
	Policy           string
	Streams          string // where the policy's streams ran (StreamPlan.String)
	Device           string
	Warmup, Duration time.Duration
	End              time.Duration // when the run drained
	Requests         []RequestRecord
	Iterations       []IterationRecord
	// BEWork is the profiled solo duration of the BE kernels completed in
	// [Warmup, Duration) (a kernel re-run after a cut counts once).
	BEWork         time.Duration
	BEWorkByClient []time.Duration
	// HPBusy is the time in [Warmup, Duration) with an HP request in
	// flight; BEWorkHPBusy the part of BEWork that finished in it (the
	// core's view: completions as the host saw them).
	HPBusy, BEWorkHPBusy time.Duration
	// BEEmpty holds, per BE client, the spans (device clock) in which its
	// own stream had no work: from a launch's completion until the next
	// launch was enqueued after it. BEDryHPBusy measures them against
	// HP's busy time.
	BEEmpty        [][]Span
	Preemptions    []PreemptionRecord
	Launches       int // all launches of the run (a graph's kernels included)
	PaddedLaunches int
	// GraphLaunches are HP requests submitted as one graph each
	// (Options.NoHPGraphs); HPGraphs says whether graphs were used ("on",
	// "off", or "off: " and why).
	GraphLaunches int
	HPGraphs      string
	// HPGraphEvents is the events an HP graph records per request (the
	// first client's first pass; Options.HPKernelEvents), 0 without
	// graphs.
	HPGraphEvents int
	// BEGraphs says whether BE chunks were recorded as graphs ("on",
	// "off", or "off: " and why; Options.NoBEGraphs), BEChunks how many
	// (per BE client, chunks of two kernels or more), and
	// BEChunkLaunches how many replays of them were submitted.
	BEGraphs        string
	BEChunks        int
	BEChunkLaunches int
	// GraphWaits are HP requests held in the driver until one of their
	// client's graph instances completed (sched/graphs.go).
	GraphWaits int
	// StaleGraphEvents are the device's answers "not complete" to a query
	// of a graph's event that still showed the previous replay (devices
	// that count them: gpu/cuda).
	StaleGraphEvents int
	// HostStalls are the gaps of gpu.StallThreshold or more in the host
	// thread's waits over the run (devices that watch for them:
	// gpu/cuda): the driver's thread kept from its CPU.
	HostStalls gpu.HostStalls
	// UnpaddedLaunches are padded decisions launched as the HP kernel alone
	// because the pair kernel was not ready (Binder answered ErrNotReady).
	UnpaddedLaunches int
	// LaunchHost is the host (wall) time the driver spent making launches
	// — binding, the device's Launch and the event Record — over the whole
	// run. On a real GPU, LaunchHost/Launches is the host cost of one
	// launch (the simulator's HostLaunchCost models it). Host splits it,
	// and adds the polls.
	LaunchHost time.Duration
	Host       HostTime
	Stats      Stats // the core's counters over the whole run
	// BlameByKernel sums, per BE kernel ("model/layer"), the delay of the
	// measured HP requests' kernels that ran beside it (co-run, drain and
	// padded causes; see Cause).
	BlameByKernel map[string]time.Duration
	// KernelSpans is, per HP client and kernel, its device spans over the
	// measured requests (Options.RecordSpans). Kernels that complete
	// together (one event of an HP graph's chunk) count as one: the first
	// holds their span, the others 0.
	KernelSpans [][]SpanStat
}

// SpanStat is one HP kernel's device spans over a run's measured requests
// (Trace.KernelSpans): their median and mean, and the solo baseline
// attribution measures them by (Options.KernelSolo, else the profile).
type SpanStat struct{ Solo, Median, Mean time.Duration }

// HostTime is where the driver's host (wall) time went over a run, for
// the host-launch path's cost on a real GPU (on the simulator it is the Go
// code's own cost).
type HostTime struct {
	// The three parts of LaunchHost: up to the device's Launch call
	// (Binder.Bind: the launch record, args and buffers), the call, and
	// after it (the completion event taken and recorded, bookkeeping).
	Bind   time.Duration
	Launch time.Duration
	Record time.Duration
	// SlowLaunches counts the device's launch calls (Launch, LaunchGraph)
	// that took SlowLaunch or more, SlowLaunchTime their time: a stream's
	// full launch queue blocks the call (gpu/cuda TestGPULaunchQueueDepth,
	// TestGPUGraphQueueDepth), holding the one driver thread.
	SlowLaunches   int
	SlowLaunchTime time.Duration
	// Poll is the time in polls for completions: an event Query per
	// launch in flight at the head of its stream, and Time (and the done
	// word) per completion; Queries counts the Query calls.
	Poll    time.Duration
	Queries int
	// GraphBuild is the time spent recording HP graphs and BE chunk
	// graphs before the run (Options.NoHPGraphs, NoBEGraphs).
	GraphBuild time.Duration
	// Round is the time in the loop's rounds: everything the driver's
	// thread does between its waits for the device — the polls and
	// launches above, and the core's and the policy's decisions. The rest
	// of the run's wall time (Wall, the loop's from its start to its end)
	// it waited (on a GPU, spinning on the events).
	Round, Wall time.Duration
	// Step is the time in the core's steps (Core.Step and its policy's
	// decisions) over Steps steps; Arrive and Arrives are
	// those of HP arrivals, whose decisions come before the request's
	// launch (the rest follow completions).
	Step, Arrive   time.Duration
	Steps, Arrives int
}

// SlowLaunch is the length of a device launch call that HostTime counts as
// slow: ten times the slowest kind measured unblocked (a convolution's
// 15.8 µs on an H200, results/hostcost-h200).
const SlowLaunch = 150 * time.Microsecond

// Window is the measured interval, Duration − Warmup.
func (t *Trace) Window() time.Duration { return t.Duration - t.Warmup }

// Span is an interval [From, To) of device-clock time.
type Span struct{ From, To time.Duration }

// BEDryHPBusy is the time in the measured window in which an HP request
// was in flight (arrived, not finished) and no BE client's own stream had
// work (Trace.BEEmpty; every client's at once): BE kept from running
// beside busy HP by the policy or by the host's refills, as the GPU's
// clock saw it. Zero without BE clients.
func (t *Trace) BEDryHPBusy() time.Duration {
	if len(t.BEEmpty) == 0 {
		return 0
	}
	lo, hi := t.Start+t.Warmup, t.Start+t.Duration
	dry := clip(t.hpBusySpans(), lo, hi)
	for _, e := range t.BEEmpty {
		dry = intersect(dry, e)
	}
	var sum time.Duration
	for _, s := range dry {
		sum += s.To - s.From
	}
	return sum
}

// BEDryGaps are the lengths of BE's empty spans (Trace.BEEmpty, every
// client's) that began in the measured window while HP was busy: from a BE
// launch's completion beside busy HP to the next launch on that client's
// stream. Where the policy keeps BE running beside HP they are the host's
// turnaround per refill; a policy that holds BE back makes them as long as
// it holds it.
func (t *Trace) BEDryGaps() []time.Duration {
	lo, hi := t.Start+t.Warmup, t.Start+t.Duration
	busy := t.hpBusySpans()
	var gaps []time.Duration
	for _, e := range t.BEEmpty {
		j := 0
		for _, s := range e {
			if s.From < lo || s.From >= hi {
				continue
			}
			for j < len(busy) && busy[j].To <= s.From {
				j++
			}
			if j < len(busy) && busy[j].From <= s.From {
				gaps = append(gaps, s.To-s.From)
			}
		}
	}
	return gaps
}

// hpBusySpans is HP's busy time: the union of the requests' [arrival,
// end], sorted and disjoint. Requests are recorded as they complete, which
// with several HP clients is not their arrival order.
func (t *Trace) hpBusySpans() []Span {
	reqs := make([]Span, len(t.Requests))
	for i, q := range t.Requests {
		reqs[i] = Span{q.Arrival, q.End}
	}
	slices.SortFunc(reqs, func(a, b Span) int { return cmp.Compare(a.From, b.From) })
	var busy []Span
	for _, r := range reqs {
		if n := len(busy); n > 0 && r.From <= busy[n-1].To {
			busy[n-1].To = max(busy[n-1].To, r.To)
			continue
		}
		busy = append(busy, r)
	}
	return busy
}

// clip cuts sorted, disjoint spans to [lo, hi).
func clip(s []Span, lo, hi time.Duration) []Span {
	var out []Span
	for _, x := range s {
		if f, t := max(x.From, lo), min(x.To, hi); t > f {
			out = append(out, Span{f, t})
		}
	}
	return out
}

// intersect is the intersection of two lists of sorted, disjoint spans.
func intersect(a, b []Span) []Span {
	var out []Span
	for i, j := 0, 0; i < len(a) && j < len(b); {
		if f, t := max(a[i].From, b[j].From), min(a[i].To, b[j].To); t > f {
			out = append(out, Span{f, t})
		}
		if a[i].To < b[j].To {
			i++
		} else {
			j++
		}
	}
	return out
}

// Run serves w on dev under opt.Policy and returns what it measured. It
// owns dev for the call (one goroutine). It returns an error wrapping
// ErrConfig for a bad workload or options, ErrDevice when a device call
// fails (the message names the call), ErrStuck when no progress is
// possible, ErrEvent when the device's events contradict the core, or
// ctx.Err() when ctx is done.
//
// Run is the scheduler loop Online runs, over a timeline known in
// advance: every HP arrival enters the core at its time, each BE client
// starts one run without an iteration budget at its Start, and the stop
// comes at opt.Duration; Run returns once the stop has drained.
func Run(ctx context.Context, dev gpu.Device, w Workload, opt Options) (*Trace, error) {
	d, err := newDriver(dev, w, opt)
	if err != nil {
		return nil, err
	}
	defer d.release()
	l := newLoop(d, nil)
	l.timeline = timeline(w, d.opt.Duration)
	l.rebase(dev.Now())
	stale, counts := dev.(interface{ StaleGraphEvents() int })
	before := 0
	if counts {
		before = stale.StaleGraphEvents() // the device may have served earlier runs
	}
	stalls, watched := dev.(interface{ TakeHostStalls() gpu.HostStalls })
	if watched {
		stalls.TakeHostStalls() // those of earlier runs
	}
	t0 := time.Now()
	if err := l.serve(ctx); err != nil {
		return nil, err
	}
	d.trace.Host.Wall = time.Since(t0)
	if counts {
		d.trace.StaleGraphEvents = stale.StaleGraphEvents() - before
	}
	if watched {
		d.trace.HostStalls = stalls.TakeHostStalls()
	}
	d.trace.Stats = d.core.State().Stats()
	d.trace.BlameByKernel = d.attr.blamed()
	d.trace.KernelSpans = d.attr.spanStats()
	return d.trace, nil
}

// timeline is Run's timed inputs in time order: the HP arrivals before
// the stop, the BE starts, the stop.
func timeline(w Workload, stop time.Duration) []Event {
	var in []Event
	for i, c := range w.HP {
		for j, a := range c.Arrivals {
			if a >= stop {
				break
			}
			in = append(in, Event{Kind: EvArrive, Time: max(a, 0), Client: HPClientID(i), Request: j})
		}
	}
	for i, c := range w.BE {
		if c.Start < stop {
			in = append(in, Event{Kind: EvReady, Time: max(c.Start, 0), Client: BEClientID(i)})
		}
	}
	in = append(in, Event{Kind: EvStop, Time: stop})
	slices.SortStableFunc(in, func(a, b Event) int { return cmp.Compare(a.Time, b.Time) })
	return in
}
