package policies

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"atoll/gpu"
	"atoll/orion"
	"atoll/preempt"
	"atoll/profiles"
	"atoll/sched"
)

// ErrConfig is wrapped by errors about atoll's parameters.
var ErrConfig = errors.New("policies: invalid parameter")

// DefaultPlainBound is the longest BE kernel atoll runs in Plain form:
// waiting for a kernel this short costs no more than Tally's preemption
// latency bound (31.6 µs), so preempting it buys nothing.
const DefaultPlainBound = 31600 * time.Nanosecond

// DefaultBEWindow is the most Plain BE submissions (a launch, or a chunk
// of launches: sched.BEClient.Calls) atoll keeps in flight per client;
// DefaultBEQueue bounds them first.
const DefaultBEWindow = 16

// DefaultBEQueue bounds the BE work a client keeps queued on the device
// (the profiled solo time of its launches in flight; one launch always
// may go): enough that the GPU does not idle through the host's 26-34 µs
// turnaround between a completion and the next launch
// (results/launchpath-h100, -h200), little enough that a long kernel is
// queued alone. Half and twice it measured no better on the GPU
// (results/bequeue-size-h100, docs/policies.md "BE work queued").
const DefaultBEQueue = 200 * time.Microsecond

// DefaultHPWindow is the HP launches atoll keeps in flight per client:
// more than any zoo model has kernels, so a request's kernels are all
// queued on the device when it arrives, as Orion does. A shallow window
// leaves the HP stream idle while the driver loop sees a completion and
// launches the next kernel (results/matrix-h100-hp-window-2: `host` delay
// 400 µs per request with 4 in flight, 62 µs with 64).
const DefaultHPWindow = 1024

// Atoll is the combined policy:
//
//   - streams: HP at the greatest priority, BE at the least, both on the
//     whole GPU; with a Reserve (or AutoReserve) BE runs in an SM
//     partition that leaves those SMs to HP alone, so an arriving HP
//     kernel always finds SMs free, whatever long BE blocks are resident
//     (the wait that priorities cannot cut, and that preempting cannot cut
//     either for one-wave kernels) — at a fifth to a quarter of BE's work
//     on the GPU, where the zoo's BE blocks are short;
//   - HP is never held back: its kernels launch as they come, HPWindow in
//     flight per client (with Padding, each padded with BE work when the
//     padding selector finds a class-compatible BE head kernel that fits
//     beside it);
//   - while no HP request is in flight (and HP has been idle ResumeAfter),
//     BE runs freely (in its partition, if any), Plain launches per
//     client while its queued work is under BEQueue, at most BEWindow
//     (with Preempt, each kernel in the form Form chooses from its
//     profile: one Resumable launch or such Plain ones);
//   - while HP is busy no BE launches (with Admission, the BE kernels
//     Orion's rule admits beside the HP kernel running — class-compatible,
//     SM need <= SMThreshold, under the duration cap — launch, in Plain
//     form, one per client); the BE launches in flight when HP arrived
//     run out (with Preempt, Resumable ones are preempted instead: flag
//     raised, the launch exits between logical blocks with its progress
//     kept, and resumes once HP has been idle ResumeAfter).
//
// Preemption and padding are off by default: a preempted kernel's
// continuation cannot be admitted beside HP, so its client idles for the
// whole HP request, and a padded BE body runs beside the HP kernel of its
// launch (docs/policies.md).
type Atoll struct {
	// ResumeAfter is the HP idle time before BE resumes (default 0.1 ms).
	ResumeAfter time.Duration
	// PlainBound: BE kernels whose solo duration is at most this run in
	// Plain form (default DefaultPlainBound).
	PlainBound time.Duration
	// BEWindow is the most Plain BE launches in flight per client
	// (default DefaultBEWindow), and BEQueue the profiled BE work queued
	// per client beyond which no further one launches (default
	// DefaultBEQueue; negative: no bound but BEWindow).
	BEWindow int
	BEQueue  time.Duration
	// HPWindow is the HP launches in flight per client (default
	// DefaultHPWindow).
	HPWindow int
	// Padding pads HP launches with BE work (REEF's dynamic kernel
	// padding); Preempt runs multi-wave BE kernels Resumable and preempts
	// them when HP arrives (Tally's persistent blocks). Both default off.
	Padding, Preempt bool
	// Admission launches, beside busy HP, the BE kernels Orion's rule
	// admits (admission=true). Off by default: over the whole committed
	// matrix on an H200 it added 0.00–0.02 of BE's alone rate and up to
	// 10 points of HP p99 overhead (results/admission-h200): BE's work
	// comes from HP's idle time.
	Admission bool
	// Confined keeps BE running in its partition while HP is busy, as
	// while HP is idle (BEWindow Plain launches per client), instead of
	// admitting only what Orion's rule lets beside the running HP kernel:
	// the reserve is then HP's only protection (SMs no BE block holds),
	// and HP kernels wider than the reserve share the partition's SMs and
	// DRAM with BE. Without a partition (Reserve < 0, or a device without
	// partitions) it has no effect: admission applies.
	Confined bool
	// PadAnyClass pads with BE kernels of any class (REEF's rule);
	// by default only class-compatible ones pad (see padKeep).
	PadAnyClass bool
	// SMThreshold, DurThreshold and DurFraction are Orion's parameters
	// for BE kernels admitted beside HP (defaults as in package orion).
	SMThreshold  int
	DurThreshold time.Duration
	DurFraction  float64
	// Reserve is how many SMs BE never uses: BE streams run in a partition
	// of the others, rounded down to the device's partition step. Zero
	// (the default): no partition — BE shares every SM — unless Split or
	// Confined, which need one and derive it as AutoReserve does; negative:
	// no partition in any case. On the H200, over the whole committed
	// matrix, BE on every SM did 21–35 % more work than in the default
	// partition with HP's p99 inside the same CIs (results/sched-h200,
	// docs/policies.md "What the partition costs").
	Reserve int
	// AutoReserve derives the reserve from the HP profiles (ReserveSMs,
	// or SplitReserve with Split): reserve=auto.
	AutoReserve bool
	// Split confines HP to the reserve too: HP streams run on the SMs
	// BE's partition leaves (gpu.Device.NewPartitionRest), so the two
	// share no SM, and BE runs in its partition at all times, within
	// BEQueue and BEWindow, whatever HP does. HP is then never
	// delayed by a BE block, only by what the two share (memory, L2), and
	// runs on fewer SMs than the whole GPU. It needs a partition; padding
	// and preemption have nothing to act on and are refused with it.
	Split bool

	cap    orion.Cap
	seenHP bool
	part   int // SMs of BE's partition after Start; 0: none
}

// ReserveSMs is the default reserve: the SMs that the HP kernels holding
// three quarters of HP's solo time need for one wave (duration-weighted
// 75th percentile of Orion's SMs-needed over every HP client's kernels),
// at least one partition step and at most a quarter of the device, so BE
// keeps at least three quarters of the SMs at all times.
func ReserveSMs(spec gpu.Spec, hp []*profiles.Profile) int {
	type need struct {
		sms int
		dur float64
	}
	var ks []need
	total := 0.0
	for _, p := range hp {
		for i := range p.Kernels {
			k := &p.Kernels[i]
			ks = append(ks, need{sched.SMsNeeded(spec, k), k.DurationUs})
			total += k.DurationUs
		}
	}
	slices.SortFunc(ks, func(a, b need) int { return a.sms - b.sms })
	r, acc := 0, 0.0
	for _, k := range ks {
		acc += k.dur
		if r = k.sms; acc >= 0.75*total {
			break
		}
	}
	return min(max(r, spec.PartitionStep), spec.SMs/4)
}

// SplitSlack is how much slower than on the whole GPU SplitReserve lets
// HP's requests be on the SMs it keeps for them: "within a few % of
// dedicated".
const SplitSlack = 1.05

// SplitReserve is Split's default reserve: the fewest SMs, of those a
// partition's rest can have on spec, on which every HP client's request
// (the sum of its kernels' DurationOn) takes at most SplitSlack times its
// time on the whole device. It is the whole device but one partition
// step when nothing smaller keeps HP within the slack.
func SplitReserve(spec gpu.Spec, hp []*profiles.Profile) int {
	step := max(spec.PartitionStep, 1)
	fits := func(sms int) bool {
		for _, p := range hp {
			var on time.Duration
			for i := range p.Kernels {
				on += sched.DurationOn(spec, &p.Kernels[i], sms)
			}
			if float64(on) > SplitSlack*float64(p.Total()) {
				return false
			}
		}
		return true
	}
	// BE's partition from the largest down: HP gets what it leaves.
	for part := gpu.PartitionFloor(spec, spec.SMs-1); part > step; part -= step {
		if fits(spec.SMs - part) {
			return spec.SMs - part
		}
	}
	return spec.SMs - step
}

// set applies "key=value,..." parameters (ByName's syntax).
func (p *Atoll) set(params string) error {
	for _, kv := range strings.Split(params, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return fmt.Errorf("%w: atoll parameter %q is not key=value", ErrConfig, kv)
		}
		var err error
		switch k {
		case "hp-window":
			p.HPWindow, err = strconv.Atoi(v)
		case "be-window":
			p.BEWindow, err = strconv.Atoi(v)
		case "be-queue":
			if v == "off" {
				p.BEQueue = -1
			} else if p.BEQueue, err = time.ParseDuration(v); err == nil && p.BEQueue <= 0 {
				err = errors.New("want a positive duration or off")
			}
		case "reserve":
			switch v {
			case "auto":
				p.Reserve, p.AutoReserve = 0, true
			case "off", "0":
				p.Reserve, p.AutoReserve = -1, false
			default:
				p.AutoReserve = false
				if p.Reserve, err = strconv.Atoi(v); err == nil && p.Reserve <= 0 {
					err = errors.New("want a positive number of SMs, auto or off")
				}
			}
		case "plain-bound":
			p.PlainBound, err = time.ParseDuration(v)
		case "resume-after":
			p.ResumeAfter, err = time.ParseDuration(v)
		case "admission":
			if p.Admission, p.Confined = false, v == "confined"; !p.Confined {
				p.Admission, err = strconv.ParseBool(v)
			}
		case "padding", "preempt", "split":
			var on bool
			if on, err = strconv.ParseBool(v); err == nil {
				switch k {
				case "padding":
					p.Padding = on
				case "preempt":
					p.Preempt = on
				default:
					p.Split = on
				}
			}
		default:
			return fmt.Errorf("%w: unknown atoll parameter %q (hp-window, be-window, be-queue, reserve, plain-bound, resume-after, padding, preempt, split, admission=true|false|confined)", ErrConfig, k)
		}
		if err != nil {
			return fmt.Errorf("%w: atoll parameter %s: %v", ErrConfig, k, err)
		}
		if p.HPWindow < 0 || p.BEWindow < 0 || p.PlainBound < 0 || p.ResumeAfter < 0 {
			return fmt.Errorf("%w: atoll parameter %s=%s must not be negative", ErrConfig, k, v)
		}
	}
	return nil
}

// New returns atoll's policy with defaults.
func New() *Atoll { return &Atoll{} }

func (p *Atoll) Name() string { return "atoll" }

// Streams is the priority plan with BE in its partition (Start sizes it),
// and with Split HP on the rest of it.
func (p *Atoll) Streams() sched.StreamPlan {
	plan := sched.PriorityPlan
	plan.BE.SMs = p.part
	if p.Split && p.part > 0 {
		plan.HP.SMs, plan.HP.Rest = p.part, true
	}
	return plan
}

// PartitionSMs is the size of BE's SM partition chosen by Start (0: none).
func (p *Atoll) PartitionSMs() int { return p.part }

func (p *Atoll) Start(st *sched.State) error {
	if p.ResumeAfter < 0 || p.PlainBound < 0 || p.BEWindow < 0 || p.HPWindow < 0 {
		return fmt.Errorf("%w: resume-after %v, plain-bound %v, be-window %d, hp-window %d (want >= 0; 0 = default)",
			ErrConfig, p.ResumeAfter, p.PlainBound, p.BEWindow, p.HPWindow)
	}
	if p.ResumeAfter == 0 {
		p.ResumeAfter = preempt.DefaultResumeAfter
	}
	if p.PlainBound == 0 {
		p.PlainBound = DefaultPlainBound
	}
	if p.BEWindow == 0 {
		p.BEWindow = DefaultBEWindow
	}
	if p.BEQueue == 0 {
		p.BEQueue = DefaultBEQueue
	}
	if p.HPWindow == 0 {
		p.HPWindow = DefaultHPWindow
	}
	th, err := orion.Resolve(st, p.SMThreshold, p.DurThreshold, p.DurFraction)
	if err != nil {
		return err
	}
	p.SMThreshold, p.DurThreshold = th.SMs, th.Dur
	p.cap = orion.Cap{Limit: th.Dur}
	p.part = 0
	spec := st.Spec()
	if p.Split {
		switch {
		case p.Padding || p.Preempt:
			return fmt.Errorf("%w: split with padding or preemption: BE never shares HP's SMs, so there is nothing to pad or preempt", ErrConfig)
		case p.Reserve < 0 || spec.PartitionStep <= 0:
			return fmt.Errorf("%w: split needs an SM partition (reserve off, or %s cannot partition its SMs)", ErrConfig, spec.Name)
		}
	}
	if reserve := p.reserveSMs(st); reserve > 0 && spec.PartitionStep > 0 {
		p.part = gpu.PartitionFloor(spec, spec.SMs-reserve)
	}
	if p.Split && p.part == 0 {
		return fmt.Errorf("%w: split with a reserve of %d SMs leaves BE no partition on %s", ErrConfig, p.Reserve, spec.Name)
	}
	return nil
}

// reserveSMs is the reserve Start leaves HP: Reserve when positive; with
// AutoReserve, Split or Confined (which need a partition) and no Reserve,
// the one the HP profiles give (SplitReserve with Split, else
// ReserveSMs); otherwise 0, no partition.
func (p *Atoll) reserveSMs(st *sched.State) int {
	switch {
	case p.Reserve != 0:
		return max(p.Reserve, 0)
	case !p.AutoReserve && !p.Split && !p.Confined:
		return 0
	}
	var hp []*profiles.Profile
	for _, c := range st.HP() {
		hp = append(hp, c.Profile())
	}
	if p.Split {
		return SplitReserve(st.Spec(), hp)
	}
	return ReserveSMs(st.Spec(), hp)
}

// Form is atoll's per-kernel choice for a fresh BE kernel instance:
//
//   - Plain if its solo duration is at most plainBound: waiting for it is
//     cheaper than preempting it;
//   - Plain if its grid fits in one wave of resident blocks: a persistent
//     worker then holds one logical block each, so the flag could only be
//     seen after all the work is done — Resumable would add overhead and
//     cut nothing. Reset cuts nothing either: its blocks read the flag as
//     they start, and a one-wave kernel's blocks have all started. (Tried
//     on the H200: Reset for these kernels left preemption latency p99 at
//     1.5–1.7 ms on the ResNet-50 training step — the kernels' own length
//     — and re-ran the work; docs/policies.md.) At small batch most BE time
//     is in such kernels (measured H200 profiles: ResNet-152 bs1 80 %,
//     VGG-19 bs1 90 %, ResNet-50 training bs32 45 %, up to 1.9 ms), so HP
//     waits for them: only finer kernels (more, shorter blocks) would help;
//   - Resumable otherwise: preemption then waits for at most one logical
//     block per worker (about duration / waves).
//
// A kernel with progress saved always continues Resumable (the core
// enforces it).
func Form(spec gpu.Spec, k *profiles.Kernel, plainBound time.Duration) gpu.Form {
	if k.Duration() <= plainBound || sched.Waves(spec, k) <= 1 {
		return gpu.Plain
	}
	return gpu.Resumable
}

func (p *Atoll) Schedule(st *sched.State, now time.Duration) {
	if p.Split {
		// HP and BE share no SM: each runs as it comes.
		for _, c := range st.HP() {
			preempt.LaunchHP(st, c, p.HPWindow, false, p.padKeep)
		}
		for _, b := range st.BE() {
			p.launchFree(st, b)
		}
		return
	}
	if st.HPBusy() {
		p.seenHP = true
		if p.Preempt {
			preempt.PreemptAll(st, false)
		}
		for _, c := range st.HP() {
			preempt.LaunchHP(st, c, p.HPWindow, p.Padding, p.padKeep)
		}
		switch {
		case p.Confined && p.part > 0:
			for _, b := range st.BE() {
				if !b.Raised() {
					p.launchFree(st, b)
				}
			}
		case p.Admission:
			p.admit(st)
		}
		return
	}
	if !preempt.IdleFor(st, now, p.ResumeAfter, p.seenHP) {
		return
	}
	for _, b := range st.BE() {
		if b.Raised() {
			// Lower the flag only once the preempted launches have
			// drained: a worker still finishing its logical block would
			// otherwise see the flag down and take the next one, and the
			// preemption would quietly stop being one (seen on the H200,
			// docs/physics.md). Their completions wake the policy again.
			if b.PreemptibleInFlight() > 0 || st.Stopping() {
				continue
			}
			st.Resume(b)
		}
		p.launchFree(st, b)
	}
}

// padKeep admits a BE head kernel as padding only when its class is
// compatible with the HP kernel's (Orion's class rule): co-resident blocks
// of the same class compete for the same unit and stretch the HP kernel.
func (p *Atoll) padKeep(hp, be *profiles.Kernel) bool {
	return p.PadAnyClass || orion.Compatible(be.Class, hp.Class)
}

// launchFree launches b's next kernels while HP is idle (and, confined or
// split, while it is busy): Plain ones a whole chunk at a time
// (State.LaunchBEChunk) while its queued work is under BEQueue and its
// submissions in flight under BEWindow.
func (p *Atoll) launchFree(st *sched.State, b *sched.BEClient) {
	for {
		k, _ := b.Next()
		if k == nil {
			return
		}
		form := gpu.Plain
		if p.Preempt {
			form = Form(st.Spec(), k, p.PlainBound)
		}
		if st.LaunchForm(b, form) == gpu.Plain {
			if b.Calls() >= p.BEWindow || p.BEQueue > 0 && b.Queued() >= p.BEQueue {
				return
			}
			if p.chunkPlain(st, b) {
				if st.LaunchBEChunk(b) == 0 {
					return
				}
				continue
			}
		}
		if _, ok := st.LaunchBE(b, form); !ok {
			return
		}
	}
}

// chunkPlain reports whether every kernel of b's chunk from its next one
// takes the Plain form: with Preempt a chunk may hold a kernel Form makes
// Resumable, and then b's kernels go one by one.
func (p *Atoll) chunkPlain(st *sched.State, b *sched.BEClient) bool {
	if !p.Preempt {
		return true
	}
	_, k := b.Next()
	ks := b.Profile().Kernels
	for end := b.ChunkEnd(); k < end; k++ {
		if Form(st.Spec(), &ks[k], p.PlainBound) != gpu.Plain {
			return false
		}
	}
	return true
}

// admit launches, beside the running HP kernel, the BE head kernels
// Orion's rule admits: fresh instances only, Plain form, one in flight per
// client, under the duration cap.
func (p *Atoll) admit(st *sched.State) {
	for _, b := range st.BE() {
		if !p.cap.Open(orion.BEInFlight(st)) {
			return
		}
		k, _ := b.Next()
		if k == nil || b.InFlight() > 0 || st.LaunchForm(b, gpu.Plain) != gpu.Plain {
			continue
		}
		if !orion.Admit(st.Spec(), k, true, st.RunningHP(), p.SMThreshold) || !p.cap.Fits(k.Duration(), true) {
			continue
		}
		if _, ok := st.LaunchBE(b, gpu.Plain); ok {
			p.cap.Add(k.Duration())
		}
	}
}
