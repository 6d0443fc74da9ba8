package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"atoll/bench"
	"atoll/gpu"
	gpubackend "atoll/gpu/backend"
	"atoll/gpu/cuda"
	"atoll/gpu/sim"
	"atoll/kernels"
	"atoll/policies"
)

const probeHelp = `
Usage: atoll probe [flags]

Re-measures the design brief's §2 physics table with atoll's own kernels,
driven through atoll's scheduler. HP: one "inference" of --hp-kernels
back-to-back bf16 GEMMs (132 blocks x 256 threads, each aimed at
--hp-kernel-us alone), one request every --gap. BE: a saturating closed
loop of bf16 GEMMs whose logical blocks (128x128 output tiles) last about
each of --blocks µs; the GEMM's K is searched until the kernel's measured
time alone is waves x block length. Every (block length, mechanism) cell
is one scheduler run. Prints the table and writes the raw numbers as JSON.

--backend cuda measures the kernels with CUDA events and runs on the GPU;
--backend sim estimates them with the profiler's roofline and runs on the
simulated GPU; --replay FILE runs the setup (shapes and profiles) of an
earlier result instead of calibrating, e.g. the GPU's measured profiles on
the simulator.

Mechanisms: dedicated, streams, priority, reef (reset + padding),
reef-nopad, atoll (resumable + padding + admission), atoll-ptb (resumable
only).

Examples:
  atoll probe --backend sim --out probe-sim.json
  atoll probe --backend cuda --out probe-gpu.json
  atoll probe --backend sim --replay probe-gpu.json --out probe-sim-replay.json
  atoll probe --backend sim --blocks 200 --policies dedicated,priority,atoll
`

func init() {
	register(command{name: "probe", summary: "measure HP latency beside BE work under each preemption mechanism (docs/physics.md)", run: runProbe})
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("--blocks: %q is not a number of µs", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func runProbe(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "probe", probeHelp)
	c := bench.DefaultProbeConfig()
	backend := fs.String("backend", "sim", "device: sim (simulated GPU, estimated profiles) or cuda (the real GPU, measured profiles)")
	gpuName := fs.String("gpu", "H100-SXM", "GPU the simulator simulates (sim backend): "+strings.Join(gpu.Specs(), ", "))
	blocks := fs.String("blocks", "2000,200,20", "BE logical-block lengths to aim at, µs, comma-separated")
	pols := fs.String("policies", strings.Join(bench.ProbePolicies, ","), "mechanisms, comma-separated")
	fs.IntVar(&c.Requests, "requests", c.Requests, "measured HP requests per cell")
	fs.IntVar(&c.Warmup, "warmup-requests", c.Warmup, "HP requests run first and discarded per cell")
	fs.DurationVar(&c.Gap, "gap", c.Gap, "HP arrival spacing (uniform arrivals)")
	fs.IntVar(&c.HPKernels, "hp-kernels", c.HPKernels, "kernels per HP request")
	fs.Float64Var(&c.HPKernelUs, "hp-kernel-us", c.HPKernelUs, "aimed duration of one HP kernel alone, µs")
	fs.IntVar(&c.BEKernels, "be-kernels", c.BEKernels, "kernels per BE iteration")
	fs.IntVar(&c.BEWaves, "be-waves", 0, "BE grid in waves of resident blocks (0: about 1 ms of kernel, 2..32 waves)")
	fs.IntVar(&c.Reps, "reps", c.Reps, "timed runs per kernel when measuring (median)")
	fs.DurationVar(&c.Drain, "drain", 30*time.Second, "longest a cell may take to serve its requests after the last arrival")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the buffers' contents and the simulator")
	fs.DurationVar(&c.SpinWait, "spin-wait", 0, "cuda backend: cap each scheduler wait at this (0: the device's own Wait, which spins while work is in flight; the cap was a workaround before gpu/cuda did)")
	replay := fs.String("replay", "", "run the setup (shapes and profiles) of this earlier probe result instead of calibrating")
	out := fs.String("out", "", "write the JSON result here (default: probe-<backend>.json)")
	ordinal := fs.Int("device", 0, "GPU ordinal (cuda backend)")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := parse(fs, args); err != nil {
		return err
	}
	var err error
	if c.BlockUs, err = parseFloats(*blocks); err != nil {
		return err
	}
	c.Policies = nil
	for _, p := range policies.SplitList(*pols) {
		if p = strings.TrimSpace(p); p != "" {
			c.Policies = append(c.Policies, p)
		}
	}
	if *replay != "" {
		f, err := os.Open(*replay)
		if err != nil {
			return err
		}
		r, err := bench.ReadProbe(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", *replay, err)
		}
		c.Setup = r.Setup
		c.BlockUs = nil
		for _, b := range r.Setup.BE {
			c.BlockUs = append(c.BlockUs, b.TargetBlockUs)
		}
	}
	if err := c.Validate(); err != nil {
		return err
	}
	c.Command = "atoll " + strings.Join(append([]string{"probe"}, args...), " ")
	start := time.Now()
	if !*quiet {
		c.Progress = func(msg string) { fmt.Fprintf(e.stderr, "  %6.1fs  %s\n", time.Since(start).Seconds(), msg) }
	}
	if *out == "" {
		*out = "probe-" + *backend + ".json"
	}
	var res *bench.ProbeResult
	switch *backend {
	case "sim":
		spec, err := gpu.LookupSpec(*gpuName)
		if err != nil {
			return err
		}
		dev, err := gpubackend.Open(gpubackend.Config{Backend: "sim", Sim: sim.Config{Spec: spec, Seed: c.Seed}})
		if err != nil {
			return err
		}
		defer dev.Close()
		res, err = probeOn(ctx, dev, bench.EstimateTimer{Spec: spec}, c, false)
		if err != nil {
			return err
		}
	case "cuda":
		err := cuda.Run(*ordinal, func(d *cuda.Device) error {
			var err error
			lib := kernels.New(d)
			pool := bench.NewBufferPool(d, true, c.Seed)
			defer pool.Close()
			res, err = probeWith(ctx, lib, pool, bench.DeviceTimer{Lib: lib, Pool: pool, Reps: c.Reps}, c)
			return err
		})
		if errors.Is(err, gpu.ErrNoDevice) {
			return fmt.Errorf("no GPU found, so --backend cuda cannot run (%w); run 'atoll probe --backend sim' for the simulated GPU", err)
		}
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("--backend %q: want sim or cuda", *backend)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := bench.WriteProbe(f, res); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, bench.DescribeProbe(res))
	if err := bench.ProbeTable(e.stdout, res); err != nil {
		return err
	}
	if err := bench.ProbeSummary(e.stdout, res); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "raw numbers: %s (%.1f s)\n", *out, time.Since(start).Seconds())
	return nil
}

// probeOn runs the probe on the simulator (estimated kernels unless c
// replays a setup).
func probeOn(ctx context.Context, dev gpu.Device, t bench.KernelTimer, c bench.ProbeConfig, fill bool) (*bench.ProbeResult, error) {
	lib := kernels.New(dev)
	pool := bench.NewBufferPool(dev, fill, c.Seed)
	defer pool.Close()
	return probeWith(ctx, lib, pool, t, c)
}

func probeWith(ctx context.Context, lib *kernels.Library, pool *bench.BufferPool, t bench.KernelTimer, c bench.ProbeConfig) (*bench.ProbeResult, error) {
	setup := c.Setup
	if setup == nil {
		var err error
		if setup, err = bench.Calibrate(ctx, lib.Device().Info().Spec, t, c); err != nil {
			return nil, err
		}
	}
	return bench.RunProbe(ctx, lib, pool, setup, c)
}
