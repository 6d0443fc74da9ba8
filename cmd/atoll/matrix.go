package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"atoll/bench"
	"atoll/profiles"
)

const matrixHelp = `
Usage: atoll matrix [flags] MATRIX.yaml

Runs a committed matrix of co-location cells (bench/matrix/*.yaml) under
every policy it names, with one protocol for all:

  1. warm-up: HP's kernels, then a short run of every policy, repeated until
     no padded launch finds its pair kernel uncompiled;
  2. HP's solo latency measured warm several times (the median sets the
     offered rate); a cell whose rate HP alone cannot sustain back to back
     is refused, not measured;
  3. BE alone, then the dedicated baseline several times, interleaved with
     the policies, all on the same arrival sequence; every run long enough
     for the matrix's minRequests HP requests; a run whose host stalled
     long enough to reach its HP p99 (GPU only) runs once more, once.

Each report keeps every request's latency, so p99s and p99 overheads come
with 95 % bootstrap CIs; policies are measured against the dedicated runs
pooled, and each dedicated re-run against the first (the noise floor). Each
cell's directory holds its reports, cell.json and arrivals.txt (what
tools/gpu/torch_cell.py replays in PyTorch). A cell is skipped once its
cell.json exists, so an interrupted matrix resumes: run the same command
again. 'atoll compare DIR' prints the tables.

A cell names hp, be, load (0-1 of HP's solo latency), and optionally
hpBatch, beBatch, arrival (poisson, uniform, lognormal; sigma), seed, and
hpMaxBatch: HP requests waiting served together in passes of up to that
many, as --hp-max-batch does for 'atoll bench' (PyTorch's rows still serve
one at a time). bench/matrix/ci.yaml shows each.

Examples:
  atoll matrix bench/matrix/ci.yaml --out /tmp/m             # simulated, about a minute
  atoll matrix --backend cuda --budget 9m --out results/matrix-h100-2 bench/matrix/gpu.yaml
  atoll compare results/matrix-h100-2
  atoll matrix --gpu H200 --replay results/admission-h200 --out /tmp/sim bench/matrix/gpu-admission.yaml
  atoll fidelity results/admission-h200 /tmp/sim             # the simulator against the GPU, same arrivals

A policy entry "POLICY as NAME" names its reports NAME: a later build can
replay a series whose policy has since changed its defaults under that
series' name ("atoll:admission=true as atoll").
`

func init() {
	register(command{name: "matrix", summary: "run a committed matrix of cells under every policy, with CIs", run: runMatrix})
}

func runMatrix(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "matrix", matrixHelp)
	out := fs.String("out", "", "directory of the results (one sub-directory per cell); required")
	backend := fs.String("backend", "sim", "device: sim or cuda")
	gpuName := fs.String("gpu", "", "simulator: GPU to simulate and whose profiles to use (default H100-SXM); on cuda the GPU found")
	budget := fs.Duration("budget", 0, "stop before a cell that would not finish within this wall time (0: no limit); the next call resumes")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	profileFirst := fs.Bool("profile", false, "--backend cuda: first profile every model the matrix runs on this GPU, each in a process of its own (atoll profile --force --no-partition, into the profile store: set "+profiles.StoreEnv+"=OUT/profiles to keep them with the results), so that the runs and a simulated replay use this machine's kernel times")
	profileParts := fs.Bool("profile-partitions", false, "with --profile: also time each kernel on SM partitions (a vendor kernel's smsNeeded then comes from them, and the simulator stands it in as one wave of that many SMs)")
	replay := fs.String("replay", "", "an earlier matrix directory (a GPU series) whose cells to replay: each cell takes that series' offered rate and arrival times instead of its own solo latency's, so the simulator sees the requests the GPU saw (atoll fidelity compares the two)")
	var sf simFlags
	sf.register(fs)
	order := fs.String("launch-order", "hp-first", launchOrderHelp)
	graphs := fs.Bool("hp-graphs", true, hpGraphsHelp)
	beGraphs := fs.Bool("be-graphs", true, beGraphsHelp)
	hpEvents := fs.Bool("hp-kernel-events", false, hpKernelEventsHelp)
	spans := fs.Bool("hp-kernel-spans", false, hpKernelSpansHelp)
	var files []string
	for rest := args; ; {
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		files, rest = append(files, fs.Arg(0)), fs.Args()[1:] // flags may follow the file
	}
	if len(files) != 1 || *out == "" {
		fs.Usage()
		return errUsage
	}
	f, err := os.Open(files[0])
	if err != nil {
		return err
	}
	spec, err := bench.ReadMatrix(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", files[0], err)
	}
	if *replay != "" {
		if st, err := os.Stat(*replay); err != nil || !st.IsDir() {
			return fmt.Errorf("--replay %s: not a matrix directory (run the matrix being replayed first, or drop --replay)", *replay)
		}
	}
	if *profileParts && !*profileFirst {
		return fmt.Errorf("--profile-partitions goes with --profile (the profiles it measures first)")
	}
	if *profileFirst {
		if *backend != "cuda" {
			return fmt.Errorf("--profile measures on the GPU (--backend cuda); a simulated matrix uses the profiles it finds")
		}
		for _, mb := range matrixModels(spec) {
			fmt.Fprintf(e.stderr, "atoll matrix: profiling %s bs%d on this GPU\n", mb.model, mb.batch)
			pargs := []string{"profile", "--model", mb.model, "--batch", strconv.Itoa(mb.batch), "--force", "--quiet"}
			if !*profileParts {
				pargs = append(pargs, "--no-partition")
			}
			if err := profileApart(ctx, e, pargs); err != nil {
				return fmt.Errorf("--profile: %s bs%d: %w", mb.model, mb.batch, err)
			}
		}
	}
	start := time.Now()
	env := bench.MatrixEnv{
		Budget:  *budget,
		Replay:  *replay,
		Command: "atoll matrix " + strings.Join(args, " "),
		Progress: func(msg string) {
			if !*quiet {
				fmt.Fprintf(e.stderr, "  %6.1fs  %s\n", time.Since(start).Seconds(), msg)
			}
		},
	}
	var sess cudaSession
	defer sess.close()
	env.Config = func(c bench.CellSpec) (*bench.Config, func(), error) {
		w := workloadFlags{gpuName: *gpuName, hp: c.HP, hpBatch: c.HPBatch, maxBatch: max(c.HPMaxBatch, 1), be: c.BE, beBatch: c.BEBatch,
			arrival: c.Arrival, sigma: c.Sigma, load: c.Load, seed: c.Seed, backend: *backend,
			duration: time.Second, warmup: 0, simFlags: sf, order: *order, graphs: *graphs, beGraphs: *beGraphs, hpEvents: *hpEvents, spans: *spans}
		if err := w.checkPolicies(spec.Policies); err != nil {
			return nil, nil, err
		}
		cfg, err := w.config()
		if err != nil {
			return nil, nil, err
		}
		cfg.Parallel = 1
		if *backend == "cuda" {
			cfg.NewDevice, cfg.Binder, cfg.Pairs = sess.device, sess.binder, sess.pairs
		}
		return cfg, nil, nil
	}
	err = bench.RunMatrix(ctx, spec, env, *out)
	if errors.Is(err, bench.ErrBudget) {
		fmt.Fprintf(e.stderr, "atoll matrix: %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	cells, err := bench.ReadMatrixDir(*out)
	if err != nil {
		return err
	}
	return bench.MatrixTables(e.stdout, cells)
}

// profileApart runs atoll with args (a profile command) in a process of its
// own, as 'atoll profile' measures: a model profiled after others in one
// process came out up to 12 % slower than in a fresh one (ResNet-50's graph
// pass 407.7 and 417.1 against 373.4 and 376.3 µs on H200s,
// results/profile-apart-h200), while the matrix's runs served it at the
// fresh process's speed.
func profileApart(ctx context.Context, e *env, args []string) error {
	// The name atoll was started by, where it finds the binary (as in the
	// test scripts, where the binary is a test's), else the binary itself.
	self := os.Args[0]
	if _, err := exec.LookPath(self); err != nil {
		if self, err = os.Executable(); err != nil {
			return fmt.Errorf("finding atoll's own binary to profile apart: %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stdout, cmd.Stderr = e.stderr, e.stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w (its output is above)", strings.Join(args, " "), err)
	}
	return nil
}

// modelBatch is one profile a matrix needs.
type modelBatch struct {
	model string
	batch int
}

// matrixModels lists the profiles spec's cells run, HP and BE, each once,
// in the order the cells name them.
func matrixModels(spec *bench.MatrixSpec) []modelBatch {
	var out []modelBatch
	seen := map[modelBatch]bool{}
	for _, c := range spec.Cells {
		for _, mb := range []modelBatch{{c.HP, max(c.HPBatch, 1)}, {c.BE, max(c.BEBatch, 1)}} {
			if !seen[mb] {
				seen[mb] = true
				out = append(out, mb)
			}
		}
	}
	return out
}
