package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/policies"
	"atoll/preempt"
	"atoll/profiles"
	"atoll/sched"
)

// The physics probe re-measures the design brief's §2 table with atoll's
// own kernels, driven through atoll's scheduler: an HP "inference" of
// HPKernels back-to-back bf16 GEMMs (132 blocks of 256 threads, each about
// HPKernelUs alone), one request at a time on a uniform arrival grid, beside
// a saturating closed-loop BE job of bf16 GEMMs whose logical blocks (one
// 128×128 output tile each) last about a chosen length, set by the GEMM's K.
// Every cell is one sched.Run of one policy on one BE block length.
//
// Unlike the rest of this package the probe touches a device besides
// handing it to sched.Run: it times kernels (DeviceTimer) and owns their
// buffers (BufferPool). It does so only through gpu.Device and the kernel
// library, and it makes no scheduling decision: the policies do.

// ProbeVersion is the apiVersion of probe results.
const ProbeVersion = "atoll/probe/v1"

// ProbePolicies are the mechanisms the probe knows, in table order:
// registry policies plus two variants with a side channel turned off.
var ProbePolicies = []string{"dedicated", "streams", "priority", "reef", "reef-nopad", "reef-relay", "atoll", "atoll-ptb"}

// ProbePolicySummary says what each probe mechanism is, for tables and docs.
var ProbePolicySummary = map[string]string{
	"dedicated":  "HP alone",
	"streams":    "plain streams, equal priority, BE launches its whole iteration",
	"priority":   "HP at the greatest stream priority, BE at the least",
	"reef":       "priorities + reset (flag read at block start), BE window 2, padding on",
	"reef-nopad": "priorities + reset, BE window 2, padding off",
	"reef-relay": "reef, with the reset flag read through the library's device-memory relay",
	"atoll":      "priorities + resumable persistent blocks, padding and admission on",
	"atoll-ptb":  "priorities + resumable persistent blocks only (padding and admission off)",
}

// ProbePolicy returns a fresh policy for a probe mechanism name.
func ProbePolicy(name string) (sched.Policy, error) {
	switch name {
	case "reef-nopad":
		return &preempt.REEF{NoPadding: true}, nil
	case "reef-relay":
		return preempt.New(), nil // the binder adds the relay (ProbeBinder.ResetRelay)
	case "atoll-ptb":
		return &policies.Atoll{Preempt: true, Reserve: -1}, nil
	case "atoll":
		return &policies.Atoll{Preempt: true, Padding: true, Reserve: -1}, nil
	}
	if !slices.Contains(ProbePolicies, name) {
		return nil, fmt.Errorf("%w: unknown mechanism %q (known: %s)", ErrProbe, name, strings.Join(ProbePolicies, ", "))
	}
	return policies.ByName(name)
}

// ProbeConfig is what the probe runs.
type ProbeConfig struct {
	BlockUs    []float64     `json:"blockUs"`    // BE logical-block lengths to aim at, µs (e.g. 2000, 200, 20)
	Requests   int           `json:"requests"`   // measured HP requests per cell
	Warmup     int           `json:"warmup"`     // HP requests run first and discarded per cell
	Gap        time.Duration `json:"gapNs"`      // HP arrival spacing (uniform)
	Policies   []string      `json:"policies"`   // mechanisms (ProbePolicies)
	HPKernels  int           `json:"hpKernels"`  // kernels per HP request
	HPKernelUs float64       `json:"hpKernelUs"` // aimed duration of one HP kernel alone, µs
	BEKernels  int           `json:"beKernels"`  // kernels per BE iteration
	// BEWaves is the BE grid in waves of resident blocks; 0 means
	// clamp(ceil(1000 µs / block), 2, 32), so a BE kernel lasts about
	// a millisecond or two blocks, whichever is longer.
	BEWaves int    `json:"beWaves"`
	Reps    int    `json:"reps"` // timed runs per kernel when measuring (median), after 3 warm-ups
	Seed    uint64 `json:"seed"` // buffer contents
	// Drain bounds how long a cell may take to serve its admitted requests
	// after the last arrival (plain streams queue HP behind whole BE
	// kernels); 0 means 30 s.
	Drain time.Duration `json:"drainNs"`
	// SpinWait, when positive, caps every device Wait the scheduler makes
	// at this long (real GPUs only): the driver loop then polls at least
	// that often instead of sleeping until the next arrival, whose wake-up
	// can be late by a timer tick. 0 leaves Wait as the device has it.
	SpinWait time.Duration `json:"spinWaitNs"`
	// Setup, when set, skips calibration and runs these ops and profiles
	// (e.g. those a GPU run measured, replayed on the simulator).
	Setup *ProbeSetup `json:"-"`
	// Command is recorded in the result.
	Command  string           `json:"-"`
	Progress func(msg string) `json:"-"`
}

// DefaultProbeConfig is the §2 probe: 2000, 200 and 20 µs blocks, 60
// requests (after 5 discarded) every 3 ms, 20 kernels of ~50 µs.
func DefaultProbeConfig() ProbeConfig {
	return ProbeConfig{
		BlockUs: []float64{2000, 200, 20}, Requests: 60, Warmup: 5, Gap: 3 * time.Millisecond,
		Policies: ProbePolicies, HPKernels: 20, HPKernelUs: 50, BEKernels: 4, Reps: 11, Seed: 1,
	}
}

// Validate checks the configuration; errors wrap ErrProbe and name the flag
// or field to fix.
func (c *ProbeConfig) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrProbe, fmt.Sprintf(f, a...)) }
	switch {
	case c.Setup == nil && len(c.BlockUs) == 0:
		return bad("no BE block lengths (--blocks)")
	case c.Requests < 1:
		return bad("requests must be at least 1, got %d", c.Requests)
	case c.Warmup < 0:
		return bad("warm-up requests must not be negative, got %d", c.Warmup)
	case c.Gap <= 0:
		return bad("arrival gap must be positive, got %v", c.Gap)
	case len(c.Policies) == 0:
		return bad("no mechanisms (--policies)")
	case c.HPKernels < 1 || c.BEKernels < 1:
		return bad("HP and BE need at least one kernel each, got %d and %d", c.HPKernels, c.BEKernels)
	case !(c.HPKernelUs > 0):
		return bad("HP kernel length must be positive, got %v µs", c.HPKernelUs)
	case c.BEWaves < 0 || c.Reps < 0:
		return bad("BE waves and reps must not be negative")
	}
	for _, b := range c.BlockUs {
		if !(b > 0) {
			return bad("block lengths must be positive, got %v µs", b)
		}
	}
	for _, p := range c.Policies {
		if _, err := ProbePolicy(p); err != nil {
			return err
		}
	}
	return nil
}

func round3(x float64) float64 { return math.Round(x*1e3) / 1e3 }

// ProbeBE is the BE job of one block length.
type ProbeBE struct {
	TargetBlockUs float64           `json:"targetBlockUs"`
	Waves         int               `json:"waves"`
	Op            kernels.GEMM      `json:"op"`
	BlockUs       float64           `json:"blockUs"` // kernel duration alone / waves: the measured block length
	Profile       *profiles.Profile `json:"profile"`
	// FormUs is the kernel alone in its preemptible forms, flag lowered
	// ("reset", "reset-relay", "resumable"), where the timer can measure
	// them.
	FormUs map[string]float64 `json:"formUs,omitempty"`
}

// ProbeSetup is the calibrated workload: the HP GEMM and the BE GEMM of
// each block length, with their profiles.
type ProbeSetup struct {
	HPOp      kernels.GEMM      `json:"hpOp"`
	HPProfile *profiles.Profile `json:"hpProfile"`
	BE        []ProbeBE         `json:"be"`
	// Calibration lists every timing the search made, for the record.
	Calibration []string `json:"calibration,omitempty"`
}

// tileGEMM is a bf16 GEMM of exactly tiles 128×128 output tiles (one
// logical block each) with inner dimension k: M and N are multiples of 128
// whose tile counts multiply to tiles, as square as possible. The library
// uses 128×128 tiles from 132 tiles up; below that it picks 64×64 tiles.
func tileGEMM(tiles, k int) kernels.GEMM {
	x := int(math.Sqrt(float64(tiles)))
	for x > 1 && tiles%x != 0 {
		x--
	}
	y := tiles / x
	return kernels.GEMM{M: 128 * x, N: 128 * y, K: k, In: kernels.BF16, Out: kernels.BF16}
}

// roundK rounds a GEMM inner dimension to a multiple of 64 (vector loads
// and whole 32-wide K steps), at least 64.
func roundK(k float64) int {
	return max(64, int(math.Round(k/64))*64)
}

// slots is how many blocks of op are resident on the device at once.
func slots(spec gpu.Spec, op kernels.Op, regs int) int {
	g := op.Geometry()
	if regs <= 0 {
		regs = g.Registers
	}
	per, _, err := spec.Occupancy(g.Block.Count(), regs, g.SharedMem)
	if err != nil || per < 1 {
		per = 1
	}
	return per * spec.SMs
}

// searchK finds the K at which a GEMM of the given tiles takes targetUs
// alone: two timings fit duration = a + b·K, then up to two refits through
// the latest point until the timing is within 5% of the target.
func searchK(ctx context.Context, t KernelTimer, name, slot string, tiles int, targetUs float64, k0, k1 int, log *[]string) (kernels.GEMM, profiles.Kernel, error) {
	measure := func(k int) (profiles.Kernel, error) {
		kk, err := t.Kernel(ctx, name, slot, tileGEMM(tiles, k))
		if err == nil {
			*log = append(*log, fmt.Sprintf("%s tiles=%d K=%d: %.3f µs", name, tiles, k, kk.DurationUs))
		}
		return kk, err
	}
	pa, err := measure(k0)
	if err != nil {
		return kernels.GEMM{}, profiles.Kernel{}, err
	}
	pb, err := measure(k1)
	if err != nil {
		return kernels.GEMM{}, profiles.Kernel{}, err
	}
	ka, da, kb, db := float64(k0), pa.DurationUs, float64(k1), pb.DurationUs
	var k int
	var best profiles.Kernel
	for range 3 {
		slope := (db - da) / (kb - ka)
		if !(slope > 0) {
			return kernels.GEMM{}, profiles.Kernel{}, fmt.Errorf("%w: %s: duration does not grow with K (%.3f µs at K=%v, %.3f µs at K=%v); cannot aim at %.0f µs",
				ErrProbe, name, da, ka, db, kb, targetUs)
		}
		k = roundK(kb + (targetUs-db)/slope)
		if best, err = measure(k); err != nil {
			return kernels.GEMM{}, profiles.Kernel{}, err
		}
		if math.Abs(best.DurationUs-targetUs) <= 0.05*targetUs || float64(k) == kb {
			break
		}
		ka, da, kb, db = kb, db, float64(k), best.DurationUs
	}
	return tileGEMM(tiles, k), best, nil
}

// Calibrate builds the probe's workload: the HP GEMM aimed at HPKernelUs
// per kernel and, per block length, a BE GEMM of BEWaves waves whose
// duration alone is waves × block length. Every timing comes from t.
func Calibrate(ctx context.Context, spec gpu.Spec, t KernelTimer, c ProbeConfig) (*ProbeSetup, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s := &ProbeSetup{}
	c.progress("calibrating the HP kernel")
	hpOp, hk, err := searchK(ctx, t, "hp.gemm", "hp", 132, c.HPKernelUs, 1024, 4096, &s.Calibration)
	if err != nil {
		return nil, err
	}
	s.HPOp = hpOp
	s.HPProfile = probeProfile(spec, "probe-hp", profiles.PhaseInference, t.Source(), hk, c.HPKernels, "hp.gemm")
	for _, blk := range c.BlockUs {
		waves := c.BEWaves
		if waves == 0 {
			waves = min(max(int(math.Ceil(1000/blk)), 2), 32)
		}
		// Slots from the geometry's register estimate; the library's
		// resumable workers use the driver's figure.
		tiles := waves * slots(spec, tileGEMM(132, 64), 0)
		c.progress(fmt.Sprintf("calibrating the BE kernel for %.0f µs blocks (%d waves, %d tiles)", blk, waves, tiles))
		kGuess := max(64, roundK(float64(hpOp.K)*blk/c.HPKernelUs/2))
		op, bk, err := searchK(ctx, t, fmt.Sprintf("be%.0fus.gemm", blk), "be", tiles, blk*float64(waves), roundK(float64(kGuess)/4), kGuess, &s.Calibration)
		if err != nil {
			return nil, err
		}
		pb := ProbeBE{
			TargetBlockUs: blk, Waves: waves, Op: op, BlockUs: round3(bk.DurationUs / float64(waves)),
			Profile: probeProfile(spec, fmt.Sprintf("probe-be-%.0fus", blk), profiles.PhaseTraining, t.Source(), bk, c.BEKernels, "be.gemm"),
		}
		if ft, ok := t.(formTimer); ok {
			pb.FormUs = map[string]float64{}
			for _, f := range []struct {
				name  string
				form  gpu.Form
				relay bool
			}{{"reset", gpu.Reset, false}, {"reset-relay", gpu.Reset, true}, {"resumable", gpu.Resumable, false}} {
				if pb.FormUs[f.name], err = ft.FormUs(ctx, "be", op, f.form, f.relay); err != nil {
					return nil, err
				}
			}
		}
		s.BE = append(s.BE, pb)
	}
	return s, nil
}

func probeProfile(spec gpu.Spec, model, phase, source string, k profiles.Kernel, n int, prefix string) *profiles.Profile {
	p := &profiles.Profile{APIVersion: profiles.APIVersion, GPU: spec.Name, Model: model, Batch: 1, Phase: phase, Source: source}
	for i := range n {
		kk := k
		kk.Name = fmt.Sprintf("%s%02d", prefix, i)
		kk.Scaling = slices.Clone(k.Scaling)
		p.Kernels = append(p.Kernels, kk)
	}
	return p
}

func (c *ProbeConfig) progress(msg string) {
	if c.Progress != nil {
		c.Progress(msg)
	}
}

// ProbeCell is one mechanism on one BE block length.
type ProbeCell struct {
	Policy        string         `json:"policy"`
	TargetBlockUs float64        `json:"targetBlockUs"`
	BlockUs       float64        `json:"blockUs"`
	HP            Latency        `json:"hp"`        // completion − scheduled arrival
	HPService     Latency        `json:"hpService"` // completion − first kernel start
	Preempt       Latency        `json:"preempt"`   // flag raised → last BE launch stopped
	Preemptions   int            `json:"preemptions"`
	Launches      int            `json:"launches"`
	Padded        int            `json:"padded"`
	BEForms       map[string]int `json:"beForms"` // BE launches by form
	BENorm        float64        `json:"beNorm"`  // BE solo-work per second of the measured window
	WallSec       float64        `json:"wallSec"`
	LatenciesUs   []float64      `json:"latenciesUs"` // every measured request, in arrival order
	// LaunchLag is host-side: device clock when the driver decided an HP
	// request's first (FirstLaunchLag) and last (LastLaunchLag) kernel
	// launch, minus the request's scheduled arrival; all requests.
	FirstLaunchLag Latency `json:"firstLaunchLag"`
	LastLaunchLag  Latency `json:"lastLaunchLag"`
	Error          string  `json:"error,omitempty"`
}

// ProbeResult is a whole probe run.
type ProbeResult struct {
	APIVersion string      `json:"apiVersion"`
	Backend    string      `json:"backend"`
	Device     string      `json:"device"`
	Driver     string      `json:"driver,omitempty"`
	Command    string      `json:"command"`
	Date       string      `json:"date"`
	Config     ProbeConfig `json:"config"`
	Setup      *ProbeSetup `json:"setup"`
	// DirectHPUs is one HP request's kernels launched back to back on one
	// stream with no scheduler (event-timed median of Reps): the reference
	// for the scheduler's own overhead on an idle device.
	DirectHPUs float64 `json:"directHpUs"`
	// DirectIdleHPUs is the same after the device idled a gap minus one
	// request before each run, as between the probe's requests.
	DirectIdleHPUs float64     `json:"directIdleHpUs"`
	Cells          []ProbeCell `json:"cells"`
}

// RunProbe runs every mechanism on every BE block length of setup on dev,
// one sched.Run per cell, with launches bound by a ProbeBinder over lib.
// A cell that fails is recorded with its error and the probe goes on.
func RunProbe(ctx context.Context, lib *kernels.Library, pool *BufferPool, setup *ProbeSetup, c ProbeConfig) (*ProbeResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if setup == nil || setup.HPProfile == nil || len(setup.BE) == 0 {
		return nil, fmt.Errorf("%w: no calibrated setup (run Calibrate first)", ErrProbe)
	}
	dev := lib.Device()
	info := dev.Info()
	var err error
	res := &ProbeResult{APIVersion: ProbeVersion, Backend: info.Backend, Device: info.Name, Driver: info.Driver,
		Command: c.Command, Date: time.Now().UTC().Format(time.RFC3339), Config: c, Setup: setup}
	res.Config.Progress, res.Config.Setup = nil, nil
	hpOps := make([]kernels.Op, len(setup.HPProfile.Kernels))
	for i := range hpOps {
		hpOps[i] = setup.HPOp
	}
	if res.DirectHPUs, err = directHP(ctx, lib, pool, setup, max(c.Reps, 1), 0); err != nil {
		return nil, err
	}
	idle := max(c.Gap-setup.HPProfile.Total(), 0)
	if res.DirectIdleHPUs, err = directHP(ctx, lib, pool, setup, max(c.Reps, 1), idle); err != nil {
		return nil, err
	}
	for _, be := range setup.BE {
		beOps := make([]kernels.Op, len(be.Profile.Kernels))
		for i := range beOps {
			beOps[i] = be.Op
		}
		hp := BinderClient{Ops: hpOps, Profile: setup.HPProfile, Slot: "hp"}
		bc := BinderClient{Ops: beOps, Profile: be.Profile, Slot: "be"}
		b, err := NewProbeBinder(lib, pool, []BinderClient{hp}, []BinderClient{bc})
		if err != nil {
			return nil, err
		}
		if err := warmBinder(dev, b); err != nil {
			b.Close()
			return nil, err
		}
		for _, name := range c.Policies {
			if err := ctx.Err(); err != nil {
				b.Close()
				return res, err
			}
			c.progress(fmt.Sprintf("%s, %.0f µs BE blocks", name, be.TargetBlockUs))
			cell := runCell(ctx, dev, b, setup.HPProfile, be, name, c)
			res.Cells = append(res.Cells, cell)
		}
		if err := b.Close(); err != nil {
			return res, err
		}
	}
	return res, nil
}

// directHP times one HP request's kernels launched directly (Plain, one
// stream, no scheduler), median of reps after 2 warm-ups, in µs.
func directHP(ctx context.Context, lib *kernels.Library, pool *BufferPool, setup *ProbeSetup, reps int, idle time.Duration) (float64, error) {
	bufs, err := pool.Get("hp", setup.HPOp)
	if err != nil {
		return 0, err
	}
	l, err := lib.Launch(setup.HPOp, gpu.Plain, bufs, kernels.Control{})
	if err != nil {
		return 0, fmt.Errorf("%w: HP kernel: %w", ErrProbe, err)
	}
	l.Cost = setup.HPProfile.Kernels[0].Cost() // what the simulator times
	ls := make([]*gpu.Launch, len(setup.HPProfile.Kernels))
	for i := range ls {
		ls[i] = l
	}
	ds, err := timeSequence(ctx, lib.Device(), ls, 2, reps, idle)
	if err != nil {
		return 0, fmt.Errorf("%w: timing the HP request launched directly: %w", ErrProbe, err)
	}
	slices.Sort(ds)
	return round3(float64(ds[len(ds)/2]) / float64(time.Microsecond)), nil
}

func warmBinder(dev gpu.Device, b *ProbeBinder) error {
	words, err := dev.NewHostWords(2)
	if err != nil {
		return fmt.Errorf("%w: NewHostWords: %w", ErrProbe, err)
	}
	ctr, err := dev.Alloc(kernels.CounterBytes)
	if err != nil {
		return fmt.Errorf("%w: Alloc: %w", ErrProbe, err)
	}
	defer dev.Free(ctr)
	return b.Warm(true, words[0], words[1], ctr)
}

// spinDevice caps each Wait at slice: gpu/cuda's Wait spins (Gosched) for
// its first 200 µs and sleeps in 50 µs steps after that, and on the probe's
// VM a sleep ends up to about a millisecond late (the dedicated cell's
// HP launches came 0.6 ms after their arrivals, median). Returning early
// is within Wait's contract; the driver loop polls and waits again.
type spinDevice struct {
	gpu.Device
	slice time.Duration
}

func (s spinDevice) Wait(ctx context.Context, until time.Duration) error {
	return s.Device.Wait(ctx, min(until, s.Device.Now()+s.slice))
}

// runCell runs one mechanism on one BE job. Arrivals and the BE start are
// relative to the run's start: sched.Run moves them onto the device clock
// (Trace.Start), which keeps running across cells.
func runCell(ctx context.Context, dev gpu.Device, b *ProbeBinder, hp *profiles.Profile, be ProbeBE, name string, c ProbeConfig) ProbeCell {
	cell := ProbeCell{Policy: name, TargetBlockUs: be.TargetBlockUs, BlockUs: be.BlockUs, BEForms: map[string]int{}}
	start := time.Now()
	defer func() { cell.WallSec = round3(time.Since(start).Seconds()) }()
	p, err := ProbePolicy(name)
	if err != nil {
		cell.Error = err.Error()
		return cell
	}
	// BE gets a head start of a few BE kernels so HP meets a saturated GPU.
	base := time.Millisecond
	lead := max(2*time.Duration(be.Profile.Kernels[0].DurationUs*float64(time.Microsecond)), 5*time.Millisecond)
	n := c.Warmup + c.Requests
	arr := make([]time.Duration, n)
	for i := range arr {
		arr[i] = base + lead + time.Duration(i)*c.Gap
	}
	w := sched.Workload{HP: []sched.HPWorkload{{Name: hp.Model, Profile: hp, Arrivals: arr}}}
	if name != "dedicated" {
		w.BE = []sched.BEWorkload{{Name: be.Profile.Model, Profile: be.Profile, Start: base}}
	}
	drain := c.Drain
	if drain <= 0 {
		drain = 30 * time.Second
	}
	var first, last []time.Duration
	req, lastK := 0, len(hp.Kernels)-1
	// The probe measures launches one by one (their host cost, what each
	// HP kernel meets): HP graphs stay off.
	opt := sched.Options{Policy: p, Binder: b, Warmup: arr[c.Warmup], Duration: arr[n-1] + c.Gap, Drain: drain, NoHPGraphs: true,
		OnDecision: func(d sched.Decision) {
			if d.Kind != sched.DecLaunch {
				return
			}
			if d.Launch.Client.Class == sched.BE {
				cell.BEForms[d.Launch.Form.String()]++
				return
			}
			// Device times now; arrivals are added after the run, once
			// its start on the device clock is known.
			if req < n && d.Launch.Kernel == 0 {
				first = append(first, dev.Now()-arr[req])
			}
			if req < n && d.Launch.Kernel == lastK {
				last = append(last, dev.Now()-arr[req])
				req++
			}
		}}
	b.ResetRelay = name == "reef-relay"
	defer func() { b.ResetRelay = false }()
	runDev := dev
	if c.SpinWait > 0 && dev.Info().Backend != "sim" {
		runDev = spinDevice{Device: dev, slice: c.SpinWait}
	}
	tr, err := sched.Run(ctx, runDev, w, opt)
	if err != nil {
		cell.Error = err.Error()
		return cell
	}
	for i := range first {
		first[i] -= tr.Start
	}
	for i := range last {
		last[i] -= tr.Start
	}
	lat, svc := latencies(tr)
	cell.HP, cell.HPService = Summarize(lat), Summarize(svc)
	cell.FirstLaunchLag, cell.LastLaunchLag = Summarize(first), Summarize(last)
	for _, d := range lat {
		cell.LatenciesUs = append(cell.LatenciesUs, round3(float64(d)/float64(time.Microsecond)))
	}
	var pl []time.Duration
	for _, q := range tr.Preemptions {
		if q.Stopped > q.Decided {
			pl = append(pl, q.Stopped-q.Decided)
		}
	}
	cell.Preemptions, cell.Preempt = len(tr.Preemptions), Summarize(pl)
	cell.Launches, cell.Padded = tr.Launches, tr.PaddedLaunches
	if win := tr.Window(); win > 0 {
		cell.BENorm = round3(tr.BEWork.Seconds() / win.Seconds())
	}
	return cell
}
