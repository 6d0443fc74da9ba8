package kernels

import (
	"math"
	"math/rand/v2"
	"time"

	"atoll/gpu"
)

func (r *runner) measure(rep *Report, opts Options, next func() uint64) error {
	n := opts.GEMMSize
	if n <= 0 {
		n = 4096
	}
	// GEMM throughput (plain form).
	for _, in := range []DType{BF16, F16} {
		g := GEMM{M: n, N: n, K: n, In: in, Out: in}
		b, err := Alloc(r.dev, g, next())
		if err != nil {
			return err
		}
		blas := r.blasLibrary()
		for _, lib := range []*Library{r.lib, blas} {
			l, err := lib.Launch(g, gpu.Plain, b, Control{})
			if err != nil {
				return err
			}
			if lib == blas && !IsBLAS(l) {
				continue // no BLAS: the own kernel's row is there already
			}
			var ts []float64
			for i := 0; i < 23; i++ {
				t, err := r.timed(l, nil)
				if err != nil {
					return err
				}
				if i >= 3 {
					ts = append(ts, us(t))
				}
			}
			m := median(ts)
			p := Perf{Kernel: g.Kernel(), Shape: g.Shape(), MedUS: m, TFLOPS: g.FLOPs() / (m * 1e-6) / 1e12, Runs: len(ts)}
			if IsBLAS(l) {
				p.Kernel = lib.BLASName()
			} else if fa, ok := r.dev.(funcAttributer); ok {
				if regs, _, _, err := fa.FuncAttributes(l.Func); err == nil {
					p.Registers = regs
					p.BlocksPerSM, _, _ = r.dev.Info().Spec.Occupancy(l.Block.Count(), regs, l.SharedMem)
				}
			}
			rep.Perf = append(rep.Perf, p)
		}
		if err := b.Free(r.dev); err != nil {
			return err
		}
	}

	targets := opts.BlockTargets
	if targets == nil {
		targets = []time.Duration{5 * time.Microsecond, 20 * time.Microsecond, 100 * time.Microsecond}
	}
	trials := opts.LatencyTrials
	if trials <= 0 {
		trials = 100
	}
	variants := []variant{{"plain", r.lib, gpu.Plain}, {"reset", r.lib, gpu.Reset}, {"resumable", r.lib, gpu.Resumable}, {"padded (BE)", r.lib, gpu.Padded}}
	// Calibrate the BE GEMM: block time is about a + b·K (fixed prologue
	// and epilogue, then the K loop); fit it from two runs. Batches (grid.z)
	// make each kernel last about 2 ms whatever the block length, so that
	// the host's raise lands inside it.
	base := GEMM{M: 4096, N: 4096, K: 256, In: BF16, Out: BF16}
	t1, err := r.blockTime(base, next)
	if err != nil {
		return err
	}
	long := base
	long.K = 4096
	t2, err := r.blockTime(long, next)
	if err != nil {
		return err
	}
	slope := float64(t2-t1) / float64(long.K-base.K)
	kFor := func(tgt time.Duration) int {
		k := (float64(tgt) - float64(t1)) / slope
		return max(32, int(math.Round((k+float64(base.K))/32))*32)
	}
	wk, err := r.lib.Workers(base)
	if err != nil {
		return err
	}
	for _, tgt := range targets {
		g := base
		g.K = kFor(tgt)
		g.Batch = max(1, int(math.Ceil(2e-3*float64(wk)/tgt.Seconds()/1024)))
		if err := r.latency(rep, g, variants, trials, next); err != nil {
			return err
		}
	}
	// Short blocks: an elementwise BE kernel (~1 µs logical blocks, tickets of 8).
	if err := r.latency(rep, Elementwise{Name: "add", Elems: 1 << 27, Inputs: 2, In: BF16}, variants, trials, next); err != nil {
		return err
	}
	// Flag-check cost: same BE kernels, flag never raised.
	var costOps []Op
	for _, tgt := range targets {
		g := base
		g.K = kFor(tgt)
		costOps = append(costOps, g)
	}
	costOps = append(costOps, Elementwise{Name: "add", Elems: 1 << 26, Inputs: 2, In: BF16})
	for _, op := range costOps {
		if err := r.flagCost(rep, op, next); err != nil {
			return err
		}
	}
	return nil
}

// blockTime measures the mean logical-block duration of op (plain form):
// kernel time x blocks resident at once / logical blocks.
func (r *runner) blockTime(op Op, next func() uint64) (time.Duration, error) {
	b, err := Alloc(r.dev, op, next())
	if err != nil {
		return 0, err
	}
	defer b.Free(r.dev)
	l, err := r.lib.Launch(op, gpu.Plain, b, Control{})
	if err != nil {
		return 0, err
	}
	var ts []float64
	for i := 0; i < 6; i++ {
		t, err := r.timed(l, nil)
		if err != nil {
			return 0, err
		}
		ts = append(ts, float64(t))
	}
	w, err := r.lib.Workers(op)
	if err != nil {
		return 0, err
	}
	logical := l.LogicalBlocks()
	return time.Duration(median(ts[1:]) * float64(min(w, logical)) / float64(logical)), nil
}

// latency measures flag raise → last BE block retired for the plain, reset
// and resumable forms of op. Per trial: a one-block watcher on the HP
// stream records %globaltimer when it sees the flag; the BE kernel on the
// BE stream records each block's exit time; the host raises the flag at a
// random point of the kernel's run. Latency = max exit − watcher's time.
type variant struct {
	label string
	lib   *Library
	form  gpu.Form
}

func (r *runner) latency(rep *Report, op Op, variants []variant, trials int, next func() uint64) error {
	b, err := Alloc(r.dev, op, next())
	if err != nil {
		return err
	}
	defer b.Free(r.dev)
	perBlock, err := r.blockTime(op, next)
	if err != nil {
		return err
	}
	geo := op.Geometry()
	trace, err := r.dev.Alloc(int64(8 * geo.Grid.Count()))
	if err != nil {
		return err
	}
	defer r.dev.Free(trace)
	rng := rand.New(rand.NewPCG(next(), 2))
	// The HP side of padded launches: a small GEMM (16 blocks of 64x64).
	hp := GEMM{M: 256, N: 256, K: 256, In: BF16, Out: BF16}
	hb, err := Alloc(r.dev, hp, next())
	if err != nil {
		return err
	}
	defer hb.Free(r.dev)
	for _, v := range variants {
		ctl := Control{Flag: r.flag, Counter: r.counter, Done: r.done, Trace: trace}
		var l *gpu.Launch
		if v.form == gpu.Padded {
			l, err = v.lib.LaunchPadded(hp, hb, Control{}, 0, op, b, ctl)
		} else {
			l, err = v.lib.Launch(op, v.form, b, ctl)
		}
		if err != nil {
			return err
		}
		blocks := l.Grid.Count()
		if l.Pad != nil {
			blocks = l.Pad.Grid.Count() // BE workers trace into slots [0, workers)
		}
		full, err := r.timed(l, func() error { r.dev.Store(r.flag, 0); return r.zero(r.counter, CounterBytes) })
		if err != nil {
			return err
		}
		lat := Latency{Form: v.label, Kernel: op.Kernel() + " " + op.Shape(), BlockUS: us(perBlock)}
		var vals []float64
		for t := 0; t < trials+trials/2 && len(vals) < trials; t++ {
			r.dev.Store(r.flag, 0)
			r.dev.Store(r.done, 0)
			if err := r.zero(r.counter, CounterBytes); err != nil {
				return err
			}
			if err := r.zero(r.watch, 16); err != nil {
				return err
			}
			w, err := r.lib.Watch(op, r.flag, r.watch, r.watch+8)
			if err != nil {
				return err
			}
			if err := r.launch(r.hi, w); err != nil {
				return err
			}
			if err := r.launch(r.lo, l); err != nil {
				r.dev.Store(r.flag, 1)
				return err
			}
			spin(time.Duration(float64(full) * (0.2 + 0.6*rng.Float64())))
			r.dev.Store(r.flag, 1)
			if err := r.sync(r.lo); err != nil {
				return err
			}
			if err := r.sync(r.hi); err != nil {
				return err
			}
			ex, err := r.readU64(trace, blocks)
			if err != nil {
				return err
			}
			wv, err := r.readU64(r.watch, 2)
			if err != nil {
				return err
			}
			last := uint64(0)
			for _, e := range ex {
				last = max(last, e)
			}
			seen := wv[0]
			if seen == 0 || last < seen {
				lat.Late++
				continue
			}
			vals = append(vals, float64(last-seen)/1e3)
		}
		lat.Trials = len(vals)
		lat.P50, lat.P90, lat.P99 = percentile(vals, 50), percentile(vals, 90), percentile(vals, 99)
		lat.Max = percentile(vals, 100)
		rep.Latency = append(rep.Latency, lat)
	}
	return nil
}

func (r *runner) flagCost(rep *Report, op Op, next func() uint64) error {
	b, err := Alloc(r.dev, op, next())
	if err != nil {
		return err
	}
	defer b.Free(r.dev)
	r.dev.Store(r.flag, 0)
	ctl := Control{Flag: r.flag, Counter: r.counter, Done: r.done}
	var ls []*gpu.Launch
	for _, f := range []gpu.Form{gpu.Plain, gpu.Reset, gpu.Resumable} {
		l, err := r.lib.Launch(op, f, b, ctl)
		if err != nil {
			return err
		}
		ls = append(ls, l)
	}
	times := make([][]float64, len(ls))
	const runs = 21
	for i := 0; i < runs+2; i++ {
		for j, l := range ls { // interleaved, so clock drift hits all forms alike
			t, err := r.timed(l, func() error { r.dev.Store(r.done, 0); return r.zero(r.counter, CounterBytes) })
			if err != nil {
				return err
			}
			if i >= 2 {
				times[j] = append(times[j], us(t))
			}
		}
	}
	fc := FlagCost{Kernel: op.Kernel() + " " + op.Shape(), Runs: runs,
		PlainUS: median(times[0]), ResetUS: median(times[1]), ResumableUS: median(times[2])}
	fc.ResetPct = (fc.ResetUS/fc.PlainUS - 1) * 100
	fc.ResumePct = (fc.ResumableUS/fc.PlainUS - 1) * 100
	rep.FlagCost = append(rep.FlagCost, fc)
	return nil
}

// ---- tables -------------------------------------------------------------------
