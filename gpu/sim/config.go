package sim

import (
	"errors"
	"fmt"
	"time"

	"atoll/gpu"
)

// Config parameterises a simulated device. The zero value is a simulated
// H100 SXM with the default model parameters.
type Config struct {
	// Spec is the GPU model; the zero value means gpu.H100SXM.
	Spec gpu.Spec
	// Seed drives the optional jitter. Same seed, same calls: same trace.
	Seed uint64

	// LaunchLatency is the time from a host Launch (or Memset32) call to
	// the op being eligible to run. Zero means Spec.LaunchLatency.
	LaunchLatency time.Duration
	// HostLaunchCost is host time each Launch call takes: the device clock
	// moves on by it (kernels keep running) before Launch returns, as a
	// real driver call plus the binder's argument packing occupy the
	// calling thread. It matters when one host thread launches for every
	// client — a burst of BE launches delays the next HP arrival's first
	// launch. Zero (the default) means launches cost no host time; the GPU
	// path measures the real figure (bench reports' hostUsPerLaunch).
	HostLaunchCost time.Duration
	// HostMatmulCost and HostConvCost are the host time of a launch of a
	// vendor product (Matmul) and of a convolution (Conv), in place of
	// HostLaunchCost: a cuBLASLt call costs the host more than a kernel
	// launch, and a convolution is several calls (its gathers, products
	// and scatters). Zero means HostLaunchCost.
	HostMatmulCost, HostConvCost time.Duration
	// HostQueryCost is host time each Query call takes, during which the
	// device runs on: the scheduler's driver polls an event per launch at
	// the head of each stream, takes a completion's time and decides what
	// it frees, all on the thread that launches. Zero (the default) means
	// queries cost no host time; bench, demo and matrix set the measured
	// figure (--sim-query-cost).
	HostQueryCost time.Duration
	// HostCompletionCost is the host time a Query that first finds an
	// event recorded by Record (a host call, not a graph's node) complete
	// takes beyond HostQueryCost, the completion's Time included: what a
	// kernel launched on its own costs the host when it completes. Zero
	// (the default) means nothing; bench, demo and matrix set the measured
	// figure (--sim-completion-cost).
	HostCompletionCost time.Duration
	// HostDecideCost is the host time of each launch decision the
	// scheduler's driver takes from its core (Device.Decided): the core's
	// and the policy's work, which the host does before it launches them,
	// so that a request of n kernels waits n of them on the host before its
	// launch. Zero (the default) means decisions cost no host time; bench,
	// demo and matrix set the measured figure (--sim-decide-cost).
	HostDecideCost time.Duration
	// HostGraphLaunchCost is the host time of a LaunchGraph call beyond
	// the events its graph records, HostGraphEventCost each. Zero means
	// HostLaunchCost and HostLaunchCost/4; bench, demo and matrix set the
	// simulated GPU's own measurement (MeasuredHostGraph).
	HostGraphLaunchCost time.Duration
	HostGraphEventCost  time.Duration
	// EventCost is the GPU time an event record holds its stream: the op
	// after it starts EventCost after the event completes. A kernel
	// launched on its own runs its Cost.Duration less EventCost (at most
	// half of it), since the profiled duration holds its record (the
	// profiler records an event after every kernel and times kernel i
	// from event i to event i+1): launched one by one, each with its
	// record, a pass takes its profiled sum. Zero (the default) leaves
	// both out; bench, demo and matrix set MeasuredEventCost
	// (--sim-event-cost).
	EventCost time.Duration
	// ProfileGap is what a profiled kernel duration holds beyond the
	// kernel when the kernel runs inside a graph: the profiler's launch
	// and record of each kernel cost the GPU that much more than a graph
	// step without an event. A kernel launched in a graph runs its
	// Cost.Duration less ProfileGap (at most half of it); the graph's
	// events hold the stream EventCost each. A kernel with a
	// Cost.GraphDuration (a profile's graphUs) runs that in a graph instead.
	// Zero (the default) means EventCost: the profile held its record and
	// nothing more; bench, demo and matrix set MeasuredProfileGap
	// (--sim-profile-gap).
	ProfileGap time.Duration
	// KernelGap is the GPU time a kernel's stream holds after it
	// completes before the stream's next op starts (the front end's turn
	// from one dependent kernel to the next): the kernel's SMs are free
	// meanwhile, and pending blocks of other streams, however low their
	// priority, take them. A profiled duration holds it, so a kernel runs
	// its Cost.Duration (or GraphDuration) less KernelGap as well (within
	// the same cap). Zero (the default) starts the next op at once.
	KernelGap time.Duration
	// GraphYield makes a graph's kernel keep the speed it has inside a
	// graph (Cost.GraphDuration) only while no kernel of a more urgent
	// stream has blocks active: meanwhile it runs at the rate of its time
	// launched on its own (Cost.Duration less EventCost and KernelGap). On
	// an H200, BE's kernels queued in graphs beside an HP stream ran
	// 1.07–1.37× their time launched alone (BERT-base's step: 0.96× for
	// its kernels under 10 µs, 1.20× for longer ones), where keeping the
	// graph's speed gives 0.99–1.23× (results/corun-h200 s31h; docs/simulator.md, "A
	// graph beside more urgent work"). False (the default) keeps
	// GraphDuration throughout; Defaults sets it (--sim-graph-yield).
	GraphYield bool
	// NoticeLatency is the time from an event's completion on the device
	// until the host sees it: Query answers true and Wait returns only
	// then (Time still gives the completion time). It stands for the
	// host's whole reaction to a completion before its next launch call —
	// the driver's spin noticing the event, polling it, deciding — so
	// that a kernel launched on seeing another's completion starts
	// NoticeLatency + LaunchLatency after it, as measured on the GPU
	// (tools/gpu/launchpath.sh; docs/simulator.md). Zero (the default):
	// the host sees a completion at once; bench, demo and matrix set the
	// measured figure (--sim-notice).
	NoticeLatency time.Duration
	// WakeLatency is how late a Wait that reaches its deadline returns
	// (the device runs on meanwhile): the host's wait loop polls the
	// events in flight and reads the clock in rounds, so it sees the time
	// it waited for — an HP arrival, the next quantum — only at the end
	// of a round. A completion noticed in that time ends the Wait then.
	// Zero (the default): at the deadline exactly; bench, demo and matrix
	// set MeasuredWakeLatency (--sim-wake).
	WakeLatency time.Duration
	// CoRunDevice, CoRunSM and CoRunMemory slow every block while blocks
	// of other kernels are resident: the interference of the memory
	// system, L2, the SM's pipes and the front end, which the profiles'
	// throughput fractions (the compute and DRAM sharing above) do not
	// carry. A block's rate is divided by 1 + CoRunDevice·D + CoRunSM·S +
	// CoRunMemory·U⁴, where D is 1 while blocks of other kernels are
	// active anywhere on the device (0 when none are), S the fraction of
	// its own SM's warp slots other kernels' blocks hold, and U the share
	// of the spec's DRAM bandwidth the other kernels' blocks move (their
	// profiled bytes over duration, at most 1). Zero (the default) leaves
	// all out; MeasuredCoRun gives the figures fitted to a GPU
	// (--sim-corun measured).
	CoRunDevice, CoRunSM, CoRunMemory float64
	// BlockMin is the shortest lifetime of any block: the time a block
	// that exits at once (raised flag, nothing left to take) holds its
	// slot, and the floor of every block's solo duration. Zero means
	// DefaultBlockMin.
	BlockMin time.Duration
	// TimeSlice is how long one GPU context runs before the GPU switches
	// to another context that has work. Zero means DefaultTimeSlice.
	TimeSlice time.Duration
	// SwitchCost is the idle time of a context switch (save and restore
	// of the resident blocks). Zero means DefaultSwitchCost.
	SwitchCost time.Duration
	// HostReadLatency is the service time of one read of mapped host
	// memory by a block. Such reads cross PCIe and serialise across the
	// whole GPU: the simulator serves them from one GPU-wide server, one
	// at a time. Only Reset blocks whose launch has a Flag and no Counter
	// (no device-memory relay) read the host word at their start; each
	// such block's start waits for its read. Zero means
	// DefaultHostReadLatency.
	HostReadLatency time.Duration
	// Jitter, in [0, 0.5], scales each kernel's block duration by a
	// factor drawn uniformly from [1-Jitter, 1+Jitter] (from Seed). Zero
	// means none: a kernel alone takes exactly its profiled time.
	Jitter float64
	// Coalesce is the largest difference in remaining work at which block
	// groups of the same kernel on different SMs are merged and from then
	// on finish together (their remaining work is averaged, so the total
	// work is kept). Zero merges only groups that are exactly in step.
	// Larger values trade timing detail (at most Coalesce per block) for
	// speed when many kernels of odd grid sizes fragment the SMs.
	Coalesce time.Duration
	// SamePriority is the order in which the dispatcher serves eligible
	// kernels of equal stream priority. The zero value is FIFO, the order
	// measured on the real GPU (docs/simulator.md).
	SamePriority SamePriority
	// Memory is the device memory size in bytes that Alloc hands out.
	// Zero means DefaultMemory. It is bookkeeping only.
	Memory int64
	// BLAS makes the device a gpu.BLAS, as a GPU with cuBLASLt is: Matmul
	// returns a function that the simulator times like any kernel, by its
	// launch's Cost. Off, Matmul answers errors.ErrUnsupported and callers
	// use their own kernels.
	BLAS bool

	// Trace, when set, is called synchronously for every TraceEvent, from
	// the goroutine that owns the Device. It must not call the Device.
	Trace func(TraceEvent)
}

// SamePriority is the dispatch order among eligible kernels of one stream
// priority level (in one context). Either way, a level that still has
// pending blocks keeps every less urgent level from placing any.
type SamePriority uint8

const (
	// FIFO serves kernels in the order they became eligible (at the head
	// of their stream, past launch latency; ties by launch order): the
	// first places as many blocks as fit, and a kernel behind it places
	// blocks only once every block of the kernels ahead of it has been
	// dispatched. It models what the real GPU was measured to do (design
	// §2): a kernel waits behind whole queued kernels of equal priority.
	FIFO SamePriority = iota
	// RoundRobin lets the kernels of a level take turns, each placing one
	// block per SM with room per turn, starting from a rotating offset.
	RoundRobin
)

func (o SamePriority) String() string {
	switch o {
	case FIFO:
		return "fifo"
	case RoundRobin:
		return "round-robin"
	}
	return fmt.Sprintf("SamePriority(%d)", uint8(o))
}

// The host's figures bench, demo and matrix simulate with (their
// --sim-launch-cost and --sim-notice defaults; Config's zero values leave
// both out): host time per launch of an own kernel, the GPU matrix's
// median of 8.9 µs (hostUsPerLaunch over its 56 H100 runs); of a batch-1
// cuBLASLt product and of a batch-1 3×3 convolution, what an H200's host
// took to launch one and record an event after it (9.9 and 15.8 µs,
// gpu/cuda BenchmarkGPUHostLaunch, results/hostcost-h200) plus the
// scheduler's binding (about 1 µs; the same host launched its own kernel
// in 6.2 µs); time from a completion to the host seeing it, the median
// turnaround of a BE kernel launched on seeing its predecessor complete on
// an H100 (30.9 µs, tools/gpu/launchpath.sh) less the 4 µs launch latency.
const (
	MeasuredHostLaunchCost = 8 * time.Microsecond
	MeasuredHostMatmulCost = 11 * time.Microsecond
	MeasuredHostConvCost   = 17 * time.Microsecond
	MeasuredNoticeLatency  = 27 * time.Microsecond
	// MeasuredNoticeLatencyH200 is the same figure on an H200: the median
	// turnaround with one BE launch in flight there (28.3 and 26.0 µs,
	// results/launchpath-h200) less the 4 µs launch latency.
	MeasuredNoticeLatencyH200 = 23 * time.Microsecond
	// MeasuredHostQueryCost is the driver thread's time per event query
	// — its polls, pollUs / queries in the GPU reports' hostPerLaunch — and
	// MeasuredHostDecideCost its time per launch decision beyond its
	// launches and polls (decideUs): the medians over the 48 runs of
	// results/matrix-h200-g8-events, 1.03 µs (0.42–2.66) and 0.61 µs
	// (0.34–1.84; REEF's highest). The 40 runs of results/admission-h200
	// give 0.85 and 0.68, the 18 of results/onmachine-all-h200 0.76 and
	// 0.65.
	MeasuredHostQueryCost  = 1000 * time.Nanosecond
	MeasuredHostDecideCost = 600 * time.Nanosecond
	// MeasuredHostCompletionCost is what noticing the completion of a
	// kernel launched on its own costs the host beyond a query: on an H200,
	// 56 kernels of 6 µs launched one by one with an event record after
	// each, up to four in flight, the oldest polled and timed and the next
	// launched on its completion (as REEF launches an HP request and Orion
	// its BE kernels), the Query that found an event complete took 1.56 µs
	// and the Time after it 2.76 µs (gpu/cuda TestGPUCompletionCost,
	// results/completion-h200; 1.59 and 2.80 µs with 2 µs kernels): 4.3 µs,
	// less the 1.0 µs every query is charged. A single event polled until
	// done with no launch in between costs less (1.91 and 1.22 µs).
	MeasuredHostCompletionCost = 3300 * time.Nanosecond
	// MeasuredEventCost is the GPU time per event recorded between two
	// kernels of a graph, measured on an H200 with 64 kernels and an
	// event after each against one at the end (gpu/cuda
	// TestGPUGraphEventGPUCost, results/hpevents-h200/
	// cuda-graph-event-cost.log): 2.39 µs between empty one-block
	// kernels, 2.17 µs between 5 µs kernels with a block on every SM.
	// Whole requests agree: BERT-base bs1 alone took 1,158–1,168 µs as a
	// graph with an event after each of its 137 kernels and 873–880 µs
	// with one per chunk (26), interleaved on one H200, 2.6 µs per event.
	MeasuredEventCost = 2300 * time.Nanosecond
	// MeasuredProfileGap is how much longer 64 kernels queued behind a
	// blocker took launched one by one, each followed by an event record
	// (as the profiler times them), than as one graph with a single event,
	// per kernel, on an H200 (gpu/cuda TestGPUProfileGap,
	// results/graphstart-h200/cuda-kernel-level.log): 2.67 µs for empty
	// one-block kernels, 2.66 µs for 5 µs kernels with a block on every
	// SM. A graph with an event after each kernel took 2.50 and 2.17 µs
	// per kernel more than with one (TestGPUGraphEventGPUCost, same log).
	MeasuredProfileGap = 2670 * time.Nanosecond
	// MeasuredKernelGap is the turn from one kernel of a graph to the
	// next on an H100: 20 kernels of 32 one-warp blocks spinning 10 µs,
	// one graph, took 224.6 µs alone, 1.23 µs a kernel beyond its spin
	// (gpu/cuda TestGPUBEGraphsBesideHP, results/begraphs-h100); 64
	// empty kernels in a graph took 0.82 µs each (TestGPUProfileGap).
	MeasuredKernelGap = 1200 * time.Nanosecond
	// MeasuredKernelGapH200 is the same turn on an H200: the same graph
	// took 217.5–219.3 µs alone, about 0.9 µs a kernel beyond its spin
	// (results/begraphs-h200); 64 empty kernels in a graph took 0.54 µs
	// each.
	MeasuredKernelGapH200 = 900 * time.Nanosecond
	// MeasuredWakeLatency is how late the CUDA backend's Wait returned
	// after a deadline 300 µs ahead on an H200 host, the median over 41
	// waits with 0, 1, 13 and 26 events pending (7.7, 8.8, 7.9 and 9.9 µs;
	// p10 2.0-4.0 µs, p90 12.6-14.7 µs: a round of the wait loop, seen at
	// a uniform phase), gpu/cuda TestGPUWaitLateness,
	// results/graphstart-h200/cuda-kernel-level.log.
	MeasuredWakeLatency = 8 * time.Microsecond
)

// The co-run interference (Config.CoRunDevice, CoRunSM, CoRunMemory;
// --sim-corun measured, the default of bench, demo and matrix), fitted on
// the simulator as those commands run it (Defaults: the events' and the
// profile gap's GPU time, the host's launches) to kernel-level
// measurements (atoll corun, ResNet-50 bs1 beside each kernel of ResNet-50
// training bs32; docs/simulator.md, "Co-run interference"), on the
// simulator as bench and matrix run it, the turn between kernels
// (MeasuredTurn) included: a small grid's least squares over BE
// confined to 16, 32, 64 and 96 SMs, BE on every SM, and HP on the 36 SMs
// a 96-SM partition leaves, kernel by kernel, and (on an H100) HP as
// graphs beside BE on every SM, all queued or 8 at a time; the profiles'
// vendor launches placed as the GPU places them (cuBLASLt's whole-SM
// GEMMs, not atoll's stand-in blocks). On an H100 (results/corun-h100:
// partition-resnet50-p16, -p32, -p64, -p96, resnet50-rest, resnet50,
// variants-r-graph-d8, variants-r-graph) the simulator's mean HP
// slowdowns are 1.143 / 1.204 / 1.335 / 1.469 / 1.139 / 1.469 / 1.412 /
// 1.429 against the GPU's 1.115 / 1.160 / 1.298 / 1.450 / 1.233 / 1.436 /
// 1.433 / 1.454 (rms error 3.5 %, the least of a 10-point grid).
//
// The memory weight is 0: fitted to these sweeps (0.2, 1.0, 6 on an H200,
// without the turn) it brings the held-out kernel-level pairs closer and
// the whole matrix held out further from the GPU (docs/simulator.md has
// both); --sim-corun DEVICE,SM,MEMORY sets it.
const (
	MeasuredCoRunDevice = 0.175
	MeasuredCoRunSM     = 0.5
	MeasuredCoRunMemory = 0
	// MeasuredCoRunDeviceH200 and MeasuredCoRunSMH200 are the same fit on
	// an H200 (results/corun-h200), with the H200's turn
	// (MeasuredKernelGapH200) and the H200 profiles' vendor launches
	// (cuBLASLt's whole-SM GEMMs placed as the GPU places them, not as
	// atoll's stand-in blocks), over the kernel by kernel sweeps (every
	// SM, the rest), the sweep with HP as graphs and 16 BE launches
	// queued (BE in 32, 64, 96 and 120 SMs, on every SM) and BE in graphs
	// with HP sent 300 µs apart (s31h gg300): rms 2.8 % over those eight
	// reports, the least of a 13-point grid (tools/corun-sim.sh
	// D,S; docs/simulator.md); with BE's graphs yielding their speed
	// beside HP (Config.GraphYield) 3.3 %, still the least against 0.075
	// and 0.125 (3.75 %, 3.5 %). With the real geometry the SMs' sharing
	// needs no term of its own.
	MeasuredCoRunDeviceH200 = 0.1
	MeasuredCoRunSMH200     = 0
	MeasuredCoRunMemoryH200 = 0
)

// CommandCoalesce is the Coalesce atoll's commands simulate with: groups
// of one kernel's blocks whose remaining work differs by at most 200 ns
// finish together. With co-run interference each SM class runs at its own
// rate, so groups drift apart by nanoseconds and the fluid model's groups
// multiply: priority beside a training job at load 0.9 took 6.0 s per 10 s
// simulated exactly, 4.5 s with this (bench BenchmarkDemoWorkload10s).
const CommandCoalesce = 200 * time.Nanosecond

// Defaults is the simulated GPU spec as atoll's commands (bench, demo,
// matrix, serve) simulate it: every measured figure above — the host's
// launch, poll, notice and wake times, the events' and the profile gap's
// GPU time, the GPU's own co-run interference — and CommandCoalesce.
// Config's zero values leave all of them out.
func Defaults(spec gpu.Spec, seed uint64) Config {
	dev, onSM, memory := MeasuredCoRun(spec.Name)
	graph, graphEvent := MeasuredHostGraph(spec.Name)
	return Config{
		Spec: spec, Seed: seed,
		HostLaunchCost: MeasuredHostLaunchCost, HostMatmulCost: MeasuredHostMatmulCost, HostConvCost: MeasuredHostConvCost,
		HostQueryCost: MeasuredHostQueryCost, HostCompletionCost: MeasuredHostCompletionCost, HostDecideCost: MeasuredHostDecideCost, NoticeLatency: MeasuredNotice(spec.Name), WakeLatency: MeasuredWakeLatency,
		HostGraphLaunchCost: graph, HostGraphEventCost: graphEvent,
		EventCost: MeasuredEventCost, ProfileGap: MeasuredProfileGap, KernelGap: MeasuredTurn(spec.Name), GraphYield: true,
		CoRunDevice: dev, CoRunSM: onSM, CoRunMemory: memory, Coalesce: CommandCoalesce,
	}
}

// MeasuredHostGraph is the host time of a LaunchGraph call
// (Config.HostGraphLaunchCost) and what each event its graph records adds
// (HostGraphEventCost), measured on the named GPU's host: on an H200 the
// call took 5.0–5.1 µs with two events and 24.5, 48.1 and 101.2 µs with
// one after each of 13, 26 and 57 kernels, 1.8 µs an event (gpu/cuda
// TestGPUGraphStartLatency, results/graphstart-h200/cuda-kernel-level.log);
// on an H100, 4.3–7.4 µs without events and 42.7, 153.3 and 416.1 µs with
// one after each of 16, 57 and 160 kernels, 2.6 µs an event
// (TestGPUGraphHostCost, results/matrix-h100-graphs/cuda-graph.log).
func MeasuredHostGraph(gpuName string) (launch, perEvent time.Duration) {
	if gpuName == gpu.H200.Name {
		return 5 * time.Microsecond, 1800 * time.Nanosecond
	}
	return 5300 * time.Nanosecond, 2600 * time.Nanosecond
}

// MeasuredNotice is the host's notice (Config.NoticeLatency) measured on
// the named GPU's host: the H200's on an H200, the H100's on any other.
func MeasuredNotice(gpuName string) time.Duration {
	if gpuName == gpu.H200.Name {
		return MeasuredNoticeLatencyH200
	}
	return MeasuredNoticeLatency
}

// MeasuredTurn is the turn between kernels (Config.KernelGap) measured on
// the named GPU: the H200's on an H200, the H100's on any other.
func MeasuredTurn(gpuName string) time.Duration {
	if gpuName == gpu.H200.Name {
		return MeasuredKernelGapH200
	}
	return MeasuredKernelGap
}

// MeasuredCoRun is the co-run interference fitted on the named GPU
// (gpu.Spec.Name): the H200's figures on an H200, the H100's on any
// other GPU (none else is measured).
func MeasuredCoRun(gpuName string) (device, onSM, memory float64) {
	if gpuName == gpu.H200.Name {
		return MeasuredCoRunDeviceH200, MeasuredCoRunSMH200, MeasuredCoRunMemoryH200
	}
	return MeasuredCoRunDevice, MeasuredCoRunSM, MeasuredCoRunMemory
}

// Defaults of the model parameters. They are estimates for Hopper-class
// GPUs; docs/simulator.md says where each comes from.
const (
	DefaultBlockMin   = 1 * time.Microsecond
	DefaultTimeSlice  = 2 * time.Millisecond
	DefaultSwitchCost = 25 * time.Microsecond
	// DefaultHostReadLatency is the kernel library's H200 measurement of
	// block-start reads of a mapped host flag (docs/kernels.md, "The flag
	// relay"): about 1 µs each, serialised GPU-wide (a 64k-block
	// elementwise kernel: 66 ms as Reset reading the host word, 0.26 ms
	// plain).
	DefaultHostReadLatency = 1 * time.Microsecond
	DefaultMemory          = 80 << 30
)

// ErrConfig is wrapped by every configuration error of New.
var ErrConfig = errors.New("sim: invalid config")

// withDefaults fills zero fields and validates the result.
func (c Config) withDefaults() (Config, error) {
	if c.Spec.Name == "" && c.Spec.SMs == 0 {
		c.Spec = gpu.H100SXM
	}
	if err := c.Spec.Validate(); err != nil {
		return c, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.Spec.MaxThreadsPerSM%c.Spec.WarpSize != 0 {
		return c, fmt.Errorf("%w: MaxThreadsPerSM %d is not a multiple of WarpSize %d", ErrConfig, c.Spec.MaxThreadsPerSM, c.Spec.WarpSize)
	}
	if c.Spec.SMs > 1<<15-1 {
		return c, fmt.Errorf("%w: %d SMs (the simulator handles at most 32767)", ErrConfig, c.Spec.SMs)
	}
	neg := func(name string, d time.Duration) error {
		if d < 0 {
			return fmt.Errorf("%w: %s is %v; it must be >= 0 (0 means the default)", ErrConfig, name, d)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"LaunchLatency", c.LaunchLatency}, {"BlockMin", c.BlockMin}, {"TimeSlice", c.TimeSlice}, {"SwitchCost", c.SwitchCost}, {"HostReadLatency", c.HostReadLatency}, {"HostLaunchCost", c.HostLaunchCost}, {"HostGraphLaunchCost", c.HostGraphLaunchCost}, {"HostGraphEventCost", c.HostGraphEventCost}, {"HostMatmulCost", c.HostMatmulCost}, {"HostConvCost", c.HostConvCost}, {"HostQueryCost", c.HostQueryCost}, {"HostCompletionCost", c.HostCompletionCost}, {"HostDecideCost", c.HostDecideCost}, {"NoticeLatency", c.NoticeLatency}, {"WakeLatency", c.WakeLatency}, {"EventCost", c.EventCost}, {"ProfileGap", c.ProfileGap}, {"KernelGap", c.KernelGap}, {"Coalesce", c.Coalesce}, {"Spec.LaunchLatency", c.Spec.LaunchLatency}} {
		if err := neg(f.name, f.d); err != nil {
			return c, err
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"CoRunDevice", c.CoRunDevice}, {"CoRunSM", c.CoRunSM}, {"CoRunMemory", c.CoRunMemory}} {
		if !(f.v >= 0 && f.v <= 10) {
			return c, fmt.Errorf("%w: %s is %v; it must lie in [0, 10]", ErrConfig, f.name, f.v)
		}
	}
	if c.Jitter < 0 || c.Jitter > 0.5 || c.Jitter != c.Jitter {
		return c, fmt.Errorf("%w: Jitter is %v; it must lie in [0, 0.5]", ErrConfig, c.Jitter)
	}
	if c.SamePriority != FIFO && c.SamePriority != RoundRobin {
		return c, fmt.Errorf("%w: SamePriority is %v; use sim.FIFO or sim.RoundRobin", ErrConfig, c.SamePriority)
	}
	if c.Memory < 0 {
		return c, fmt.Errorf("%w: Memory is %d bytes; it must be >= 0 (0 means %d)", ErrConfig, c.Memory, int64(DefaultMemory))
	}
	if c.LaunchLatency == 0 {
		c.LaunchLatency = c.Spec.LaunchLatency
	}
	if c.BlockMin == 0 {
		c.BlockMin = DefaultBlockMin
	}
	if c.TimeSlice == 0 {
		c.TimeSlice = DefaultTimeSlice
	}
	if c.SwitchCost == 0 {
		c.SwitchCost = DefaultSwitchCost
	}
	if c.HostReadLatency == 0 {
		c.HostReadLatency = DefaultHostReadLatency
	}
	if c.HostGraphLaunchCost == 0 {
		c.HostGraphLaunchCost = c.HostLaunchCost
	}
	if c.HostGraphEventCost == 0 {
		c.HostGraphEventCost = c.HostLaunchCost / 4
	}
	if c.HostMatmulCost == 0 {
		c.HostMatmulCost = c.HostLaunchCost
	}
	if c.HostConvCost == 0 {
		c.HostConvCost = c.HostLaunchCost
	}
	if c.Memory == 0 {
		c.Memory = DefaultMemory
	}
	return c, nil
}
