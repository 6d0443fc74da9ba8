package kernels

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"atoll/gpu"
)

// Options configures SelfTest.
type Options struct {
	// Seed for the random inputs (each check draws fresh values from it).
	Seed uint64
	// Out receives the report tables as they complete; nil: none.
	Out io.Writer
	// Quick runs the correctness checks only (no preemption, latency or
	// performance measurements).
	Quick bool
	// Identity runs the bit-identity checks only (no correctness checks
	// against the CPU, no measurements): the preempt-and-resume part alone.
	Identity bool
	// Progress, when set, receives a line as the compiles start, as each
	// kernel's correctness checks begin and as each bit-identity check
	// ends (the tables go to Out only when a whole part is done).
	Progress io.Writer
	// LatencyTrials per (form, block length); 0 means 100.
	LatencyTrials int
	// BlockTargets are the logical-block lengths of the latency runs;
	// nil means 5, 20 and 100 µs.
	BlockTargets []time.Duration
	// Preemptions is the least number of preemptions each bit-identity
	// check must survive; 0 means 50.
	Preemptions int
	// GEMMSize is the side of the square bf16 GEMM whose TFLOP/s is
	// measured; 0 means 4096.
	GEMMSize int
	// Only, when set, limits the correctness and bit-identity checks to
	// kernels whose name contains one of its comma-separated substrings
	// (e.g. "bn_,xent") and skips the latency and performance
	// measurements.
	Only string
}

// Check is one correctness check: a kernel in a form against the CPU.
type Check struct {
	Kernel, Shape, Form, Output string
	RelErr, Bound               float64
	OK                          bool
	Note                        string
}

// Identity is one preempt-and-resume run compared with an uninterrupted run.
type Identity struct {
	Kernel      string
	Launches    int  // launches until done (each but the last was preempted)
	Preemptions int  // launches that ended with the flag raised before done
	Padded      int  // of the launches, those made as the BE part of a padded launch
	Identical   bool // output bytes equal to the uninterrupted run's
	Completed   int  // counter[1] at the end (must equal Logical)
	Logical     int
	Workers     int // resumable workers of the preempted run
	// Needed is the least number of preemptions the check must see:
	// Options.Preemptions, or Logical − 1 for a kernel with fewer logical
	// blocks.
	Needed int
}

// Latency is the preemption-latency distribution of one form and block length.
type Latency struct {
	Form     string
	Kernel   string
	BlockUS  float64 // measured mean logical-block duration, µs
	Trials   int     // trials where the flag was raised before the kernel ended
	Late     int     // trials discarded: the kernel had ended before the raise
	P50, P90 float64 // µs
	P99, Max float64 // µs
}

// FlagCost is the runtime of one BE kernel in each form, flag never raised.
type FlagCost struct {
	Kernel              string
	PlainUS, ResetUS    float64 // median µs
	ResumableUS         float64
	ResetPct, ResumePct float64 // overhead vs plain, %
	Runs                int
}

// Perf is a GEMM throughput measurement.
type Perf struct {
	Kernel string
	Shape  string
	MedUS  float64
	TFLOPS float64
	Runs   int
	// Registers per thread and blocks per SM the driver gives the kernel
	// (0 when the device does not report them).
	Registers, BlocksPerSM int
}

// Report is what SelfTest found.
type Report struct {
	Device, Driver string
	Checks         []Check
	Identity       []Identity
	Latency        []Latency
	FlagCost       []FlagCost
	Perf           []Perf
	Failures       int
	Elapsed        time.Duration
}

// ErrSelfTest is returned (wrapped) when a check fails; the Report says which.
var ErrSelfTest = errors.New("kernels: self-test failed")

// checkOps are the correctness cases: every kernel family, both GEMM tiles,
// vector and scalar load paths, all dtypes the kernels take.
func checkOps() []Op {
	return append([]Op{
		GEMM{M: 200, N: 136, K: 72, Batch: 2, In: BF16, Out: BF16, Bias: true, Act: ActGELU},
		GEMM{M: 1536, N: 1536, K: 96, In: F16, Out: F32, Act: ActReLU},
		GEMM{M: 1664, N: 1408, K: 136, In: BF16, Out: BF16, Bias: true},
		GEMM{M: 100, N: 70, K: 45, In: BF16, Out: F32},
		GEMM{M: 70, N: 200, K: 1000, In: BF16, Out: BF16, Bias: true, Act: ActReLU},                                                    // split-K 4 (auto)
		GEMM{M: 33, N: 40, K: 517, In: F16, Out: F32, SplitK: 3},                                                                       // split-K, scalar loads
		Conv2D{N: 1, H: 7, W: 7, C: 256, OutC: 128, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16, Bias: true, Act: ActReLU, Residual: true}, // split-K 9
		Conv2D{N: 1, H: 20, W: 20, C: 3, OutC: 16, R: 7, S: 7, Stride: 2, Pad: 3, In: F16, SplitK: 2},
		Conv2D{N: 2, H: 14, W: 14, C: 16, OutC: 32, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16, Bias: true, Act: ActReLU, Residual: true},
		Conv2D{N: 2, H: 15, W: 15, C: 3, OutC: 16, R: 7, S: 7, Stride: 2, Pad: 3, In: F16},
		Conv2D{N: 2, H: 9, W: 9, C: 8, OutC: 16, R: 3, S: 3, Stride: 2, Pad: 1, In: BF16, BackwardData: true},
		Conv2D{N: 2, H: 8, W: 8, C: 16, OutC: 24, R: 3, S: 3, Stride: 1, Pad: 1, In: F16, BackwardFilter: true},
		// The gradients' register-staged runs on the 128x128 tile, and the
		// scalar loads they fall back to (channels not a multiple of 8).
		Conv2D{N: 2, H: 28, W: 28, C: 1408, OutC: 16, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16, BackwardData: true},
		Conv2D{N: 2, H: 7, W: 7, C: 256, OutC: 1024, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16, BackwardFilter: true},
		Conv2D{N: 2, H: 9, W: 9, C: 16, OutC: 12, R: 3, S: 3, Stride: 2, Pad: 1, In: BF16, BackwardData: true},
		Conv2D{N: 2, H: 15, W: 15, C: 3, OutC: 16, R: 7, S: 7, Stride: 2, Pad: 3, In: BF16, BackwardFilter: true},
		// 1x1 convolutions: GEMMs over the pixels, which the device's BLAS
		// also runs (form "blas").
		Conv2D{N: 2, H: 7, W: 7, C: 64, OutC: 96, R: 1, S: 1, Stride: 1, In: BF16, Bias: true, Act: ActReLU, Residual: true},
		// Biases of the output's type (what the BLAS takes), in every
		// epilogue: both tiles, split-K's fixup, f16.
		Conv2D{N: 2, H: 7, W: 7, C: 64, OutC: 96, R: 1, S: 1, Stride: 1, In: BF16, Bias: true, BiasType: BF16, Act: ActReLU, Residual: true},
		GEMM{M: 200, N: 136, K: 72, In: BF16, Out: BF16, Bias: true, BiasType: BF16, Act: ActGELU},
		GEMM{M: 1664, N: 1408, K: 136, In: BF16, Out: BF16, Bias: true, BiasType: BF16},
		GEMM{M: 70, N: 200, K: 1000, In: BF16, Out: BF16, Bias: true, BiasType: BF16, Act: ActReLU},
		GEMM{M: 96, N: 72, K: 64, In: F16, Out: F16, Bias: true, BiasType: F16},
		Conv2D{N: 2, H: 7, W: 7, C: 64, OutC: 96, R: 1, S: 1, Stride: 1, In: BF16, BackwardData: true},
		Conv2D{N: 2, H: 7, W: 7, C: 64, OutC: 96, R: 1, S: 1, Stride: 1, In: BF16, BackwardFilter: true},
		Conv2D{N: 4, H: 7, W: 7, C: 64, OutC: 96, R: 1, S: 1, Stride: 1, In: BF16, BackwardFilter: true, Split: 2},
		// Larger filters and strides, which the BLAS runs as convolutions
		// (patches gathered, products, patch gradients summed back).
		Conv2D{N: 2, H: 14, W: 14, C: 16, OutC: 32, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16, Bias: true, BiasType: BF16, Act: ActReLU, Residual: true},
		Conv2D{N: 4, H: 9, W: 9, C: 16, OutC: 24, R: 3, S: 3, Stride: 2, Pad: 1, In: BF16, BackwardFilter: true, Split: 2},
		Conv2D{N: 2, H: 8, W: 8, C: 16, OutC: 24, R: 1, S: 1, Stride: 2, In: BF16, BackwardData: true},
		Depthwise{N: 2, H: 13, W: 13, C: 24, R: 3, S: 3, Stride: 2, Pad: 1, In: F16, Act: ActReLU6},
		Elementwise{Name: "bias_act", Elems: 5000, Inputs: 1, In: BF16, Act: ActGELU, Cols: 40},
		Elementwise{Name: "add", Elems: 4099, Inputs: 2, In: F32, Act: ActReLU},
		Elementwise{Name: "sgd", Elems: 3000, Inputs: 3, Outputs: 2, In: F16},
		LayerNorm{Rows: 37, Cols: 768, In: BF16},
		LayerNorm{Rows: 5, Cols: 300, In: F32},
		Softmax{Rows: 33, Cols: 1000, In: F16},
		Pool{N: 2, H: 15, W: 15, C: 16, R: 3, S: 3, Stride: 2, Pad: 1, Max: true, In: BF16},
		Pool{N: 1, H: 8, W: 8, C: 8, R: 2, S: 2, Stride: 2, In: F32},
		Pool{N: 3, H: 11, W: 11, C: 3, R: 3, S: 3, Stride: 2, Pad: 1, Max: true, In: BF16}, // an output a thread
		Pool{N: 2, H: 7, W: 7, C: 12, R: 7, S: 7, In: F16},
		Reduce{Name: "mean", Rows: 70, Cols: 490, In: BF16},
		Reduce{Name: "sum", Rows: 33, Cols: 100, In: F32},
		Gather{Rows: 50, Cols: 72, In: BF16, Vocab: 500},
		Elementwise{Name: "tanh", Elems: 3000, Inputs: 1, In: BF16},
	}, slices.Concat(sgemmCheckOps(), trainCheckOps(), bertTrainCheckOps())...)
}

// SelfTest checks every kernel and form on dev against the CPU references,
// checks that preempted-and-resumed BE kernels give bit-identical output,
// and (unless opts.Quick) measures preemption latency per form, the cost of
// the flag checks and GEMM throughput. dev must be a real GPU: with any
// other backend it returns an error wrapping gpu.ErrNoDevice. A failed check
// returns the full report and an error wrapping ErrSelfTest.
func SelfTest(ctx context.Context, dev gpu.Device, opts Options) (Report, error) {
	if dev == nil || dev.Info().Backend != "cuda" {
		return Report{}, fmt.Errorf("%w: kernels: SelfTest runs kernels on a real GPU (backend %q): open one with gpu/cuda", gpu.ErrNoDevice, backendOf(dev))
	}
	start := time.Now()
	info := dev.Info()
	rep := Report{Device: info.Name, Driver: info.Driver}
	lib := New(dev)
	lib.NoBLAS = true // the own kernels in every form; the BLAS is checked as form "blas"
	r, err := newRunner(ctx, dev, lib)
	if err != nil {
		return rep, fmt.Errorf("kernels: selftest setup: %w", err)
	}
	defer r.close()
	r.only = opts.Only
	r.progress = opts.Progress
	r.start = start
	seed := opts.Seed
	next := func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed }

	if opts.Quick && opts.Identity {
		return rep, errors.New("kernels: selftest: Quick (correctness only) and Identity (bit identity only) exclude each other")
	}
	if !opts.Identity {
		if err := r.correctness(&rep, next); err != nil {
			return rep, err
		}
		printChecks(opts.Out, rep.Checks)
	}
	if !opts.Quick {
		pre := opts.Preemptions
		if pre <= 0 {
			pre = 50
		}
		if err := r.identity(&rep, pre, next); err != nil {
			return rep, err
		}
		printIdentity(opts.Out, rep.Identity)
		if opts.Only == "" && !opts.Identity {
			if err := r.measure(&rep, opts, next); err != nil {
				return rep, err
			}
			printPerf(opts.Out, rep)
		}
	}
	for _, c := range rep.Checks {
		if !c.OK {
			rep.Failures++
		}
	}
	for _, id := range rep.Identity {
		if !id.Identical || id.Completed != id.Logical || id.Preemptions < max(1, id.Needed) {
			rep.Failures++
		}
	}
	rep.Elapsed = time.Since(start)
	if rep.Failures > 0 {
		return rep, fmt.Errorf("%w: %d failure(s); see the report", ErrSelfTest, rep.Failures)
	}
	return rep, nil
}

func backendOf(dev gpu.Device) string {
	if dev == nil {
		return "none"
	}
	return dev.Info().Backend
}

// ---- correctness ----------------------------------------------------------

// checkBLAS checks op's whole Plain launch on the device's BLAS (form
// "blas") where the library hands op to it; a product the BLAS refuses is
// reported as a passing check with the refusal in its note, since the
// library then runs its own kernel.
func (r *runner) checkBLAS(rep *Report, op Op, b Buffers, next func() uint64) error {
	if !blasCovers(op) {
		return nil
	}
	blas := r.blasLibrary()
	if err := b.Refill(r.dev, next()); err != nil {
		return err
	}
	l, err := blas.Launch(op, gpu.Plain, b, Control{})
	if err != nil {
		return err
	}
	if !IsBLAS(l) {
		why := blas.BLASRefusal(op)
		rep.Checks = append(rep.Checks, Check{Kernel: op.Kernel(), Shape: op.Shape(), Form: "blas", Output: "-", OK: true,
			Note: fmt.Sprintf("not on the BLAS (%s): %v", blas.BLASName(), why)})
		return nil
	}
	if err := r.launch(r.lo, l); err != nil {
		return fmt.Errorf("kernels: launching %s: %w", l.Name, err)
	}
	if err := r.sync(r.lo); err != nil {
		return fmt.Errorf("kernels: running %s: %w", l.Name, err)
	}
	return r.compare(rep, op, "blas", blas.BLASName(), b)
}

func (r *runner) compare(rep *Report, op Op, form, note string, b Buffers) error {
	ref, err := Reference(op, b)
	if err != nil {
		return err
	}
	for i, t := range b.Outputs() {
		got, _, err := Read(r.dev, t)
		if err != nil {
			return err
		}
		e := RelErr(got, ref[i])
		bound := Tolerance(t.DType)
		if op, ok := op.(Reduce); ok && op.In != F32 {
			bound = 1e-5 // fp32 sums of exact 16-bit inputs
		}
		rep.Checks = append(rep.Checks, Check{Kernel: op.Kernel(), Shape: op.Shape(), Form: form, Output: t.Name,
			RelErr: e, Bound: bound, OK: e <= bound, Note: note})
	}
	return nil
}

func (r *runner) correctness(rep *Report, next func() uint64) error {
	hp := GEMM{M: 96, N: 80, K: 64, In: BF16, Out: BF16, Bias: true, Act: ActReLU}
	hpBufs, err := Alloc(r.dev, hp, next())
	if err != nil {
		return err
	}
	defer hpBufs.Free(r.dev)
	beEW := Elementwise{Name: "add", Elems: 70000, Inputs: 2, In: BF16}
	ln := LayerNorm{Rows: 64, Cols: 512, In: BF16} // HP, padded with a BE GEMM at the end
	ewBufs, err := Alloc(r.dev, beEW, next())
	if err != nil {
		return err
	}
	defer ewBufs.Free(r.dev)

	var ops []Op
	for _, op := range checkOps() {
		if r.selected(op) {
			ops = append(ops, op)
		}
	}
	// Compile every kernel and padded pair the checks launch at once, on
	// every core: one after another they take most of the run.
	pairs := [][2]Op{{ln, hp}}
	for _, op := range ops {
		pairs = append(pairs, [2]Op{hp, op})
	}
	r.progressf("correctness: compiling %d kernels and %d padded pairs", len(ops)+3, len(pairs))
	if err := r.lib.Precompile(append(slices.Clone(ops), hp, beEW, ln)); err != nil {
		return err
	}
	if err := r.lib.PrecompilePairs(pairs); err != nil {
		return err
	}
	for i, op := range ops {
		r.progressf("correctness %d/%d: %s %s", i+1, len(ops), op.Kernel(), op.Shape())
		b, err := Alloc(r.dev, op, next())
		if err != nil {
			return err
		}
		for _, form := range []gpu.Form{gpu.Plain, gpu.Reset, gpu.Resumable, gpu.Padded} {
			if err := b.Refill(r.dev, next()); err != nil {
				return err
			}
			r.dev.Store(r.flag, 0)
			r.dev.Store(r.done, 0)
			if err := r.zero(r.counter, CounterBytes); err != nil {
				return err
			}
			ctl := Control{Flag: r.flag, Counter: r.counter, Done: r.done}
			note := ""
			var l *gpu.Launch
			switch form {
			case gpu.Padded:
				// op as the BE part beside an HP GEMM; few workers so that
				// each takes many logical blocks.
				if err := hpBufs.Refill(r.dev, next()); err != nil {
					return err
				}
				ctl.Workers = 3
				l, err = r.lib.LaunchPadded(hp, hpBufs, Control{}, 0, op, b, ctl)
				note = "BE beside HP " + hp.Kernel()
			default:
				l, err = r.lib.Launch(op, form, b, ctl)
			}
			if err != nil {
				return err
			}
			if err := r.launch(r.lo, l); err != nil {
				return fmt.Errorf("kernels: launching %s: %w", l.Name, err)
			}
			if err := r.sync(r.lo); err != nil {
				return fmt.Errorf("kernels: running %s: %w", l.Name, err)
			}
			if form == gpu.Resumable || form == gpu.Padded {
				cnt, err := r.readI32(r.counter, 2)
				if err != nil {
					return err
				}
				logical := l.Logical
				if form == gpu.Padded {
					logical = l.Pad.Logical
				}
				if d := r.dev.Load(r.done); d != 1 || int(cnt[1]) != logical {
					note += fmt.Sprintf(" done=%d completed=%d/%d", d, cnt[1], logical)
					rep.Checks = append(rep.Checks, Check{Kernel: op.Kernel(), Shape: op.Shape(), Form: form.String(), Output: "done", RelErr: math.Inf(1), Note: note})
				}
			}
			if err := r.compare(rep, op, form.String(), note, b); err != nil {
				return err
			}
			if form == gpu.Padded {
				if err := r.compare(rep, hp, "padded/HP", "HP beside BE "+op.Kernel(), hpBufs); err != nil {
					return err
				}
			}
		}
		// Plain in two slices [0, n/2) and [n/2, n) (sliced launches; a
		// split-K op runs whole).
		if err := b.Refill(r.dev, next()); err != nil {
			return err
		}
		k, _ := spec(op)
		if half := k.logical() / 2; half > 0 && !k.split() {
			for _, sl := range []Control{{Offset: 0, Blocks: half}, {Offset: half}} {
				l, err := r.lib.Launch(op, gpu.Plain, b, sl)
				if err != nil {
					return err
				}
				if err := r.launch(r.lo, l); err != nil {
					return err
				}
			}
			if err := r.sync(r.lo); err != nil {
				return err
			}
			if err := r.compare(rep, op, "plain/sliced", "two slices", b); err != nil {
				return err
			}
		}
		if err := r.checkBLAS(rep, op, b, next); err != nil {
			return err
		}
		// Reset with the flag raised: no block may write anything.
		if err := b.Poison(r.dev); err != nil {
			return err
		}
		r.dev.Store(r.flag, 1)
		l, err := r.lib.Launch(op, gpu.Reset, b, Control{Flag: r.flag})
		if err != nil {
			return err
		}
		if err := r.launch(r.lo, l); err != nil {
			return err
		}
		if err := r.sync(r.lo); err != nil {
			return err
		}
		r.dev.Store(r.flag, 0)
		written := 0
		for _, t := range b.Outputs() {
			got, _, err := Read(r.dev, t)
			if err != nil {
				return err
			}
			for _, v := range got {
				if !math.IsNaN(v) {
					written++
				}
			}
		}
		rep.Checks = append(rep.Checks, Check{Kernel: op.Kernel(), Shape: op.Shape(), Form: "reset/raised", Output: "untouched",
			RelErr: float64(written), Bound: 0, OK: written == 0, Note: "elements written with the flag raised"})
		if err := b.Free(r.dev); err != nil {
			return err
		}
	}
	// An HP layernorm padded with a BE GEMM (wider BE blocks than HP blocks).
	lb, err := Alloc(r.dev, ln, next())
	if err != nil {
		return err
	}
	defer lb.Free(r.dev)
	r.dev.Store(r.done, 0)
	if err := r.zero(r.counter, CounterBytes); err != nil {
		return err
	}
	if err := hpBufs.Refill(r.dev, next()); err != nil {
		return err
	}
	l, err := r.lib.LaunchPadded(ln, lb, Control{}, 0, hp, hpBufs, Control{Flag: r.flag, Counter: r.counter, Done: r.done, Workers: 2})
	if err != nil {
		return err
	}
	if err := r.launch(r.lo, l); err != nil {
		return err
	}
	if err := r.sync(r.lo); err != nil {
		return err
	}
	if err := r.compare(rep, ln, "padded/HP", "HP beside BE "+hp.Kernel(), lb); err != nil {
		return err
	}
	return r.compare(rep, hp, "padded", "BE beside HP "+ln.Kernel(), hpBufs)
}

// ---- preempt and resume: bit identity ----------------------------------------

// The kernels identity preempts beside trainIdentityOps and
// bertIdentityOps: a GEMM, a split-K GEMM (a tile's partials from several
// resumable and padded launches) and an in-place SGD update (a logical
// block run twice would apply its update twice). identityHP is the HP
// GEMM their padded launches run beside.
var (
	identityGEMM  = GEMM{M: 4096, N: 4096, K: 1024, In: BF16, Out: BF16, Bias: true, Act: ActGELU}
	identitySplit = GEMM{M: 200, N: 256, K: 16384, In: BF16, Out: BF16, Bias: true, Act: ActReLU}
	identitySGD   = Elementwise{Name: "sgd", Elems: 1 << 24, Inputs: 3, Outputs: 2, In: BF16}
	identityHP    = GEMM{M: 256, N: 256, K: 256, In: BF16, Out: BF16}
)

// precompileIdentity compiles, in parallel, the selected kernels the
// bit-identity checks run and their padded launches beside identityHP.
func (r *runner) precompileIdentity() error {
	all := slices.Concat(trainIdentityOps(), []Op{trainIdentitySGD}, bertIdentityOps(), []Op{bertIdentityAdam})
	if r.selected(identityGEMM) {
		all = append(all, identityGEMM, identitySplit, identitySGD)
	}
	ops := []Op{identityHP}
	var pairs [][2]Op
	for _, op := range all {
		if r.selected(op) {
			ops = append(ops, op)
			pairs = append(pairs, [2]Op{identityHP, op})
		}
	}
	r.progressf("bit identity: compiling %d kernels and %d padded pairs", len(ops), len(pairs))
	if err := r.lib.Precompile(ops); err != nil {
		return err
	}
	return r.lib.PrecompilePairs(pairs)
}

func (r *runner) identity(rep *Report, minPreempt int, next func() uint64) error {
	if err := r.precompileIdentity(); err != nil {
		return err
	}
	if err := r.trainIdentity(rep, minPreempt, next); err != nil {
		return err
	}
	if err := r.bertIdentity(rep, minPreempt, next); err != nil {
		return err
	}
	gemm := identityGEMM
	if !r.selected(gemm) {
		return nil
	}
	if err := r.identityOne(rep, gemm, nil, 8, minPreempt, next); err != nil {
		return err
	}
	if err := r.identityOne(rep, identitySplit, nil, 8, minPreempt, next); err != nil {
		return err
	}
	sgd := identitySGD
	inplace := func(b Buffers) Buffers {
		c := Buffers{T: slices.Clone(b.T)}
		w, m := c.T[0], c.T[2]
		w.Name, w.Role, w.Host = "w_out", Output, nil
		m.Name, m.Role, m.Host = "m_out", Output, nil
		c.T[3], c.T[4] = w, m
		return c
	}
	return r.identityOne(rep, sgd, inplace, 8, minPreempt, next)
}

// identityOne runs op resumably with few workers (so that each launch has
// many rounds to be preempted in), preempting it at random points, and
// compares the result with an uninterrupted run.
func (r *runner) identityOne(rep *Report, op Op, alias func(Buffers) Buffers, workers, minPreempt int, next func() uint64) error {
	s := next()
	b, err := Alloc(r.dev, op, s)
	if err != nil {
		return err
	}
	defer b.Free(r.dev)
	lb := b
	if alias != nil {
		lb = alias(b)
	}
	hp := identityHP
	hb, err := Alloc(r.dev, hp, next())
	if err != nil {
		return err
	}
	defer hb.Free(r.dev)
	outputs := func() ([][]byte, error) {
		var out [][]byte
		for _, t := range lb.Outputs() {
			_, raw, err := Read(r.dev, t)
			if err != nil {
				return nil, err
			}
			out = append(out, raw)
		}
		return out, nil
	}
	// Uninterrupted run.
	r.dev.Store(r.flag, 0)
	r.dev.Store(r.done, 0)
	if err := r.zero(r.counter, CounterBytes); err != nil {
		return err
	}
	ctl := Control{Flag: r.flag, Counter: r.counter, Done: r.done, Workers: workers}
	l, err := r.lib.Launch(op, gpu.Resumable, lb, ctl)
	if err != nil {
		return err
	}
	full, err := r.timed(l, nil)
	if err != nil {
		return err
	}
	want, err := outputs()
	if err != nil {
		return err
	}
	// preempted runs op from the same inputs with w workers, raising the
	// flag at a random point of each launch — every launch until
	// minPreempt preemptions, then three in four — and relaunching until
	// done; every third launch continues op as the BE part of a padded
	// launch beside hp.
	preempted := func(w int) (Identity, error) {
		if err := b.Refill(r.dev, s); err != nil {
			return Identity{}, err
		}
		r.dev.Store(r.done, 0)
		if err := r.zero(r.counter, CounterBytes); err != nil {
			return Identity{}, err
		}
		ctl.Workers = w
		l, err := r.lib.Launch(op, gpu.Resumable, lb, ctl)
		if err != nil {
			return Identity{}, err
		}
		rng := rand.New(rand.NewPCG(next(), 1))
		id := Identity{Kernel: op.Kernel(), Logical: l.Logical}
		for r.dev.Load(r.done) == 0 {
			if id.Launches > 20000 {
				return Identity{}, fmt.Errorf("kernels: %s made no progress in 20000 resumable launches", op.Kernel())
			}
			r.dev.Store(r.flag, 0)
			// Every third launch continues the BE kernel inside a padded launch.
			ln := l
			if id.Launches%3 == 2 {
				if ln, err = r.lib.LaunchPadded(hp, hb, Control{}, 0, op, lb, ctl); err != nil {
					return Identity{}, err
				}
				id.Padded++
			}
			if err := r.launch(r.lo, ln); err != nil {
				return Identity{}, err
			}
			id.Launches++
			stop := id.Preemptions < minPreempt || rng.IntN(4) != 0
			if stop {
				// Raise the flag somewhere in the first 1/30 of a full run.
				spin(time.Duration(rng.Int64N(int64(full/30) + 1)))
				r.dev.Store(r.flag, 1)
			}
			if err := r.sync(r.lo); err != nil {
				return Identity{}, err
			}
			if r.dev.Load(r.done) == 0 {
				id.Preemptions++
			}
		}
		r.dev.Store(r.flag, 0)
		cnt, err := r.readI32(r.counter, 2)
		if err != nil {
			return Identity{}, err
		}
		id.Completed = int(cnt[1])
		return id, nil
	}
	// A kernel whose launches each get through too many logical blocks to
	// be preempted need times runs again with a quarter of the workers (the
	// logical blocks, and so the output, do not depend on them).
	need := min(minPreempt, l.Logical-1)
	var id Identity
	for w := workers; ; w = max(1, w/4) {
		if id, err = preempted(w); err != nil {
			return err
		}
		if id.Preemptions >= need || w == 1 {
			id.Workers, id.Needed = w, need
			break
		}
	}
	got, err := outputs()
	if err != nil {
		return err
	}
	id.Identical = len(got) == len(want)
	for i := range got {
		id.Identical = id.Identical && bytes.Equal(got[i], want[i])
	}
	rep.Identity = append(rep.Identity, id)
	r.progressf("bit identity: %s after %d preemptions (%d workers): identical %t", id.Kernel, id.Preemptions, id.Workers, id.Identical)
	return nil
}

// ---- measurements -----------------------------------------------------------

func median(v []float64) float64 { return percentile(v, 50) }

// spin busy-waits for d (time.Sleep overshoots short waits by tens of µs).
func spin(d time.Duration) {
	for t0 := time.Now(); time.Since(t0) < d; {
	}
}

// percentile interpolates linearly between closest ranks.
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	x := p / 100 * float64(len(s)-1)
	i := int(x)
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[i] + (x-float64(i))*(s[i+1]-s[i])
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }
