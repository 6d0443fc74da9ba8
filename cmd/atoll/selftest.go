package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"atoll/gpu"
	"atoll/gpu/cuda"
	"atoll/kernels"
)

const selftestHelp = `
Usage: atoll selftest [flags]

On a GPU: checks every kernel of the library in every form (plain, reset,
resumable, padded) against a CPU reference, on fresh random inputs with the
outputs poisoned first; checks that a BE kernel preempted and resumed many
times gives bit-identical output to an uninterrupted run; measures
preemption latency per form (flag raised → last BE block retired, GPU
clock), the cost of the flag check, and GEMM throughput. Prints tables and
exits non-zero if any check failed.

Every kernel and padded pair it checks is compiled first, on every core
(about 40 s with an empty kernel cache on a 16-core host); the whole run
then takes a minute or two, with a line on stderr saying what it checks.
--identity runs the bit-identity part alone, --only limits the checks to
kernels whose names contain one of its comma-separated words (and skips
the measurements).

On a machine with no GPU it says so and exits 0.

Examples:
  atoll selftest
  atoll selftest --quick
  atoll selftest --identity --seed 7
  atoll selftest --quick --only gemm_,conv2d
  atoll selftest --trials 500 --seed 7
`

func init() {
	register(command{name: "selftest", summary: "on a GPU: check every kernel and form, measure preemption", run: runSelftest})
}

func runSelftest(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "selftest", selftestHelp)
	var o kernels.Options
	fs.Uint64Var(&o.Seed, "seed", uint64(time.Now().UnixNano()), "seed of the random inputs (default: fresh each run)")
	fs.BoolVar(&o.Quick, "quick", false, "correctness checks only (no preemption, latency or performance measurements)")
	fs.BoolVar(&o.Identity, "identity", false, "bit-identity checks only: preempted and resumed kernels against uninterrupted runs")
	fs.StringVar(&o.Only, "only", "", "check only kernels whose names contain one of these comma-separated words (e.g. gemm_,bn_); skips the measurements")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	fs.IntVar(&o.LatencyTrials, "trials", 100, "preemption-latency trials per form and block length")
	fs.IntVar(&o.Preemptions, "preemptions", 50, "preemptions each bit-identity check must survive")
	fs.IntVar(&o.GEMMSize, "gemm", 4096, "side of the square bf16 GEMM whose throughput is measured")
	ordinal := fs.Int("device", 0, "GPU ordinal")
	if err := parse(fs, args); err != nil {
		return err
	}
	if o.Quick && o.Identity {
		fmt.Fprintln(e.stderr, "atoll selftest: --quick (correctness only) and --identity (bit identity only) exclude each other; give one")
		fs.Usage()
		return errUsage
	}
	o.Out = e.stdout
	if !*quiet {
		o.Progress = e.stderr
	}
	fmt.Fprintf(e.stdout, "selftest seed %d\n", o.Seed)
	var rep kernels.Report
	err := cuda.Run(*ordinal, func(d *cuda.Device) error {
		var err error
		rep, err = kernels.SelfTest(ctx, d, o)
		return err
	})
	if errors.Is(err, gpu.ErrNoDevice) {
		fmt.Fprintf(e.stdout, "no GPU found, nothing to test: %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s, driver %s: %d checks, %d failures, %.1f s\n", rep.Device, rep.Driver, len(rep.Checks), rep.Failures, rep.Elapsed.Seconds())
	if rep.Failures > 0 {
		return fmt.Errorf("%d checks failed", rep.Failures)
	}
	return nil
}
