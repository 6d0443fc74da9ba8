package bench

import (
	"context"
	"fmt"
	"sort"
	"time"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/models"
	"atoll/profiler"
	"atoll/profiles"
)

// KernelTimer says how long a probe GEMM takes alone: measured on the
// device (DeviceTimer) or estimated (EstimateTimer). It returns the
// profile record of the kernel.
type KernelTimer interface {
	Kernel(ctx context.Context, name, slot string, op kernels.GEMM) (profiles.Kernel, error)
	Source() string // profiles.SourceMeasured or SourceEstimated
}

// EstimateTimer estimates kernels with profiler.Estimate (the roofline
// the simulator's estimated profiles come from).
type EstimateTimer struct{ Spec gpu.Spec }

func (e EstimateTimer) Source() string { return profiles.SourceEstimated }

func (e EstimateTimer) Kernel(_ context.Context, name, _ string, op kernels.GEMM) (profiles.Kernel, error) {
	p, err := profiler.Estimate(e.Spec, "probe", 1, []models.Layer{{Name: name, Op: op}})
	if err != nil {
		return profiles.Kernel{}, fmt.Errorf("%w: %w", ErrProbe, err)
	}
	return p.Kernels[0], nil
}

// DeviceTimer measures kernels on a device with events around each of Reps
// launches of the Plain form (after 3 warm-ups) and takes the median.
type DeviceTimer struct {
	Lib  *kernels.Library
	Pool *BufferPool
	Reps int
}

func (t DeviceTimer) Source() string { return profiles.SourceMeasured }

// funcAttributer is implemented by devices that report a function's
// resources (gpu/cuda does).
type funcAttributer interface {
	FuncAttributes(gpu.Func) (registers, staticSharedMem, maxThreadsPerBlock int, err error)
}

func (t DeviceTimer) Kernel(ctx context.Context, name, slot string, op kernels.GEMM) (profiles.Kernel, error) {
	dev := t.Lib.Device()
	bufs, err := t.Pool.Get(slot, op)
	if err != nil {
		return profiles.Kernel{}, err
	}
	l, err := t.Lib.Launch(op, gpu.Plain, bufs, kernels.Control{})
	if err != nil {
		return profiles.Kernel{}, fmt.Errorf("%w: %s: %w", ErrProbe, name, err)
	}
	ds, err := timeLaunch(ctx, dev, l, 3, max(t.Reps, 1))
	if err != nil {
		return profiles.Kernel{}, fmt.Errorf("%w: timing %s (%s %s): %w", ErrProbe, name, op.Kernel(), op.Shape(), err)
	}
	us := make([]float64, len(ds))
	for i, d := range ds {
		us[i] = float64(d) / float64(time.Microsecond)
	}
	sort.Float64s(us)
	med := us[len(us)/2]
	regs := l.Registers
	if fa, ok := dev.(funcAttributer); ok {
		if r, _, _, err := fa.FuncAttributes(l.Func); err == nil && r > 0 {
			regs = r
		}
	}
	k := measuredKernel(dev.Info().Spec, name, op, regs, med)
	k.SpreadUs = round3(us[len(us)-1] - us[0])
	return k, nil
}

// FormUs times op alone in a preemptible form (gpu.Reset or
// gpu.Resumable) with the flag lowered: what the form itself costs over
// Plain (a host-memory flag read per block for Reset; tickets, flag relay
// and persistent workers for Resumable). relay gives a Reset launch a
// control block, so its blocks read the flag through the device-memory
// relay. Median of Reps, after one warm-up, in µs.
func (t DeviceTimer) FormUs(ctx context.Context, slot string, op kernels.GEMM, form gpu.Form, relay bool) (float64, error) {
	dev := t.Lib.Device()
	bufs, err := t.Pool.Get(slot, op)
	if err != nil {
		return 0, err
	}
	words, err := dev.NewHostWords(2)
	if err != nil {
		return 0, fmt.Errorf("%w: NewHostWords: %w", ErrProbe, err)
	}
	flag, done := words[0], words[1]
	dev.Store(flag, 0)
	ctr, err := dev.Alloc(kernels.CounterBytes)
	if err != nil {
		return 0, fmt.Errorf("%w: Alloc: %w", ErrProbe, err)
	}
	defer dev.Free(ctr)
	ctl := kernels.Control{Flag: flag}
	if form == gpu.Resumable {
		ctl.Counter, ctl.Done = ctr, done
	}
	if relay {
		ctl.Counter = ctr
	}
	var us []float64
	for i := 0; i < 1+max(t.Reps, 1); i++ {
		if err := dev.CopyToDevice(ctr, make([]byte, kernels.CounterBytes)); err != nil {
			return 0, fmt.Errorf("%w: zeroing the progress block: %w", ErrProbe, err)
		}
		dev.Store(done, 0)
		l, err := t.Lib.Launch(op, form, bufs, ctl)
		if err != nil {
			return 0, fmt.Errorf("%w: %s %s: %w", ErrProbe, op.Kernel(), form, err)
		}
		ds, err := timeLaunch(ctx, dev, l, 0, 1)
		if err != nil {
			return 0, fmt.Errorf("%w: timing %s %s: %w", ErrProbe, op.Kernel(), form, err)
		}
		if form == gpu.Resumable && dev.Load(done) != 1 {
			return 0, fmt.Errorf("%w: %s resumable ran with the flag lowered but did not finish (done word %d)", ErrProbe, op.Kernel(), dev.Load(done))
		}
		if i > 0 {
			us = append(us, float64(ds[0])/float64(time.Microsecond))
		}
	}
	sort.Float64s(us)
	return round3(us[len(us)/2]), nil
}

// formTimer is implemented by timers that can time preemptible forms.
type formTimer interface {
	FormUs(ctx context.Context, slot string, op kernels.GEMM, form gpu.Form, relay bool) (float64, error)
}

// measuredKernel fills a profile record from a measured median duration:
// achieved compute and memory percentages against the spec's peaks, the
// profiler's class rule, Orion's SMs needed. Scaling is left empty: the
// probe cannot confine a kernel to fewer SMs.
func measuredKernel(spec gpu.Spec, name string, op kernels.Op, regs int, medUs float64) profiles.Kernel {
	g := op.Geometry()
	per, _, err := spec.Occupancy(g.Block.Count(), regs, g.SharedMem)
	if err != nil || per < 1 {
		per = 1
	}
	k := profiles.Kernel{
		Name: name, Kernel: op.Kernel(), Shape: op.Shape(),
		Grid:      [3]int{g.Grid.X, max(g.Grid.Y, 1), max(g.Grid.Z, 1)},
		Block:     [3]int{g.Block.X, max(g.Block.Y, 1), max(g.Block.Z, 1)},
		Registers: regs, SharedMem: g.SharedMem,
		DurationUs: round3(medUs), FLOPs: op.FLOPs(), Bytes: op.Bytes(),
		SMsNeeded: spec.SMsNeeded(g.Grid.Count(), per),
	}
	if medUs > 0 && spec.PeakFLOPS > 0 {
		k.ComputePct = min(round3(100*op.FLOPs()/(medUs*1e-6)/spec.PeakFLOPS), 100)
	}
	if medUs > 0 && spec.DRAMBandwidth > 0 {
		k.MemoryPct = min(round3(100*op.Bytes()/(medUs*1e-6)/spec.DRAMBandwidth), 100)
	}
	k.Class = profiler.Classify(k.ComputePct, k.MemoryPct)
	return k
}

// timeLaunch runs l on a fresh least-priority stream warm+reps times,
// waiting for each, and returns the event-timed durations of the last reps.
func timeLaunch(ctx context.Context, dev gpu.Device, l *gpu.Launch, warm, reps int) ([]time.Duration, error) {
	return timeSequence(ctx, dev, []*gpu.Launch{l}, warm, reps, 0)
}

// timeSequence is timeLaunch for a sequence of launches enqueued back to
// back (built beforehand, so no host work falls between them), after the
// device idled for idle before each run.
func timeSequence(ctx context.Context, dev gpu.Device, ls []*gpu.Launch, warm, reps int, idle time.Duration) ([]time.Duration, error) {
	s, err := dev.NewStream(gpu.StreamOptions{Priority: dev.Info().Priorities.Least})
	if err != nil {
		return nil, err
	}
	defer dev.DestroyStream(s)
	e0, err := dev.NewEvent()
	if err != nil {
		return nil, err
	}
	defer dev.DestroyEvent(e0)
	e1, err := dev.NewEvent()
	if err != nil {
		return nil, err
	}
	defer dev.DestroyEvent(e1)
	var out []time.Duration
	for i := 0; i < warm+reps; i++ {
		for until := dev.Now() + idle; dev.Now() < until; {
			if err := dev.Wait(ctx, until); err != nil {
				return nil, err
			}
		}
		if err := dev.Record(e0, s); err != nil {
			return nil, err
		}
		for _, l := range ls {
			if err := dev.Launch(s, l); err != nil {
				return nil, err
			}
		}
		if err := dev.Record(e1, s); err != nil {
			return nil, err
		}
		deadline := dev.Now() + 30*time.Second
		for {
			ok, err := dev.Query(e1)
			if err != nil {
				return nil, err
			}
			if ok {
				break
			}
			if dev.Now() > deadline {
				return nil, fmt.Errorf("kernel %s did not finish in 30 s", ls[len(ls)-1].Name)
			}
			if err := dev.Wait(ctx, dev.Now()+time.Millisecond); err != nil {
				return nil, err
			}
		}
		t0, err := dev.Time(e0)
		if err != nil {
			return nil, err
		}
		t1, err := dev.Time(e1)
		if err != nil {
			return nil, err
		}
		if i >= warm {
			out = append(out, t1-t0)
		}
	}
	return out, nil
}
