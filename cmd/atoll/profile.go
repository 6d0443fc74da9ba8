package main

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/kernels"
	"atoll/models"
	"atoll/profiler"
	"atoll/profiles"
)

const profileHelp = `
Usage: atoll profile --model NAME [--batch N] [flags]

Runs a zoo model alone on the GPU and writes its per-kernel profile to the
profile store, <store>/<gpu>/<model>-bs<N>.json (or --out), where demo,
bench, matrix and serve find it at once, before the profiles built into
atoll: the store is $ATOLL_PROFILES, else atoll/profiles in the user's cache
directory ('atoll models' lists what it holds). Warm-up passes, then timed
passes with a CUDA event between every two launches; per kernel the
median duration and its spread (p90 - p10), launch shape, registers and
shared memory from the driver, FLOPs and bytes, achieved compute and
memory % of peaks measured on this GPU first, class, SMs needed, and the
duration at 8, 16, 33, 66 and all SMs (what padding needs). See
docs/profiles.md, "Measuring".

GEMMs and convolutions (but depthwise) are timed as they will run: on cuBLASLt when it
is found (tagged "blas" in the profile), on atoll's own kernels with
ATOLL_CUBLASLT=off. Profile and run the same way: a GPU run refuses a
profile that timed kernels on cuBLASLt where it would run them on atoll's
own (slower) kernels, and names the command that makes the right one.

A measured profile is never overwritten without --force. A layer the
kernel library cannot run is bound to an equivalent library kernel (e.g. the
global average pool to an average pool) and named in the profile's notes;
--substitute=false refuses such a model instead, naming the layer.

--backend sim runs the same code on the simulator (no GPU needed): its
durations are the estimated profile's and it is marked "estimated" with a
"simulated" note. It prints the profile's summary and writes nothing unless
given --out (a simulated profile in the store would take the place of a
measured one), and it is never written over a measured profile.

Nsight Compute: --print-ncu-command prints the ncu command that collects
one pass of the model; --ncu FILE imports that CSV over the measured
durations and % columns (each row matched to its kernel by order and name).
--launches FILE records, in the profile --out names (in place, no GPU
needed), the launches each vendor call made in such a CSV of one pass
(tools/gpu/vendor-launches.sh collects it): cuBLASLt's products and the
gathers around them, each with its geometry and share of the call's time,
which the simulator then runs instead of one stand-in launch.

Examples:
  atoll profile --model resnet50 --batch 4             # then: atoll demo --hp resnet50 --hp-batch 4 --backend cuda
  atoll profile --model vgg19 --runs 50 --out /tmp/vgg19.json
  atoll profile --model resnet50 --force
  atoll profile --model resnet50 --print-ncu-command
  atoll profile --model resnet50 --ncu resnet50-bs1.ncu.csv
  atoll profile --model resnet50 --backend sim --out /tmp/r50.json
  atoll profile --model vgg19 --launches vgg19-bs1.csv --out ~/.cache/atoll/profiles/H200/vgg19-bs1.json
`

func init() {
	register(command{name: "profile", summary: "on a GPU: measure a model's per-kernel profile", run: runProfile})
}

func runProfile(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "profile", profileHelp)
	model := fs.String("model", "", "zoo model to profile (see 'atoll models')")
	batch := fs.Int("batch", 1, "batch size")
	backend := fs.String("backend", "cuda", "cuda (the GPU) or sim (the simulator; for tests)")
	simGPU := fs.String("gpu", gpu.H100SXM.Name, "--backend sim: the simulated GPU")
	ordinal := fs.Int("device", 0, "GPU ordinal")
	out := fs.String("out", "", "write the profile here (default: the profile store, <store>/<gpu>/<model>-bs<N>.json; see above)")
	force := fs.Bool("force", false, "overwrite a measured profile")
	var o profiler.MeasureOptions
	fs.IntVar(&o.Warmup, "warmup", profiler.DefaultWarmup, "warm-up passes")
	fs.IntVar(&o.Runs, "runs", profiler.DefaultRuns, "timed passes")
	fs.BoolVar(&o.NoScaling, "no-scaling", false, "skip the duration-against-SM-share measurement (and the partition one)")
	fs.BoolVar(&o.NoPartition, "no-partition", false, "skip timing each kernel on SM partitions (green contexts): smsNeeded then comes from each kernel's grid, vendor kernels included")
	fs.BoolVar(&o.GraphPasses, "graph-passes", true, "also time each kernel inside a graph of the whole pass with no events between kernels, as the scheduler submits an HP request (graphUs; the simulator runs a graph's kernels that long); =false skips it")
	fs.BoolVar(&o.WarmPass, "warm-pass", false, "time each pass right after an untimed run of it, so kernels find L2 as the model's previous pass left it (as a model running alone back to back does); by default a GEMM before each pass leaves L2 cold")
	fs.IntVar(&o.ScalingRuns, "scaling-runs", profiler.DefaultScalingRuns, "timed launches per SM share")
	fs.BoolVar(&o.Substitute, "substitute", true, "bind layers the kernel library lacks to an equivalent kernel (recorded in the notes); false refuses such models")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the weights and inputs")
	ncu := fs.String("ncu", "", "import this Nsight Compute CSV over the durations and % columns")
	printNCU := fs.Bool("print-ncu-command", false, "print the ncu command that collects the CSV for --ncu, and exit")
	ncuPass := fs.Bool("ncu-pass", false, "run exactly one forward pass and nothing else (what ncu should profile); writes nothing")
	launches := fs.String("launches", "", "record the vendor calls' launches of this Nsight Compute CSV of one pass in the profile --out names, in place (no GPU needed)")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "atoll profile: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	if *model == "" {
		fmt.Fprintln(e.stderr, "atoll profile: --model is required")
		fs.Usage()
		return errUsage
	}
	m, err := models.Get(*model)
	if err != nil {
		return err
	}
	if *batch < 1 || *batch > 1<<20 {
		return fmt.Errorf("--batch %d: must be in 1..%d", *batch, 1<<20)
	}
	if o.Runs < 1 {
		return fmt.Errorf("--runs %d: need at least 1 timed pass", o.Runs)
	}
	if *launches != "" {
		return recordLaunches(e, *launches, *out, m.Name(), *batch)
	}
	if *printNCU {
		fmt.Fprintln(e.stdout, profiler.NCUCommand(selfName(), m.Name(), *batch, o.Substitute))
		return nil
	}
	if *ncu != "" {
		f, err := os.Open(*ncu)
		if err != nil {
			return err
		}
		o.NCU, err = profiler.ParseNCU(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", *ncu, err)
		}
		o.NCUFile = *ncu
	}
	if *out != "" && !*ncuPass {
		// Refuse before spending a minute on the GPU.
		if err := mayWrite(*out, *force, *backend == "sim"); err != nil {
			return err
		}
	}
	o.Command = "atoll profile " + quoteArgs(args)
	o.Ordinal = *ordinal
	if !*quiet && !*ncuPass {
		bar := profiler.NewBar(e.stderr, isTerminal(e.stderr))
		defer bar.Done()
		o.Progress = bar.Update
	}
	measure := func(dev gpu.Device) error {
		lib := kernels.New(dev)
		if *ncuPass {
			return profiler.RunPasses(ctx, dev, lib, m.Name(), *batch, 1, o.Substitute, o.Seed)
		}
		info := dev.Info()
		spec, err := gpu.LookupSpec(info.Name)
		if err != nil {
			return err
		}
		path := *out
		simulated := info.Backend == "sim"
		if path == "" && !simulated { // a simulated profile stays out of the store
			if path = profiles.StorePath(spec.Name, m.Name(), *batch); path == "" {
				return fmt.Errorf("no profile store (no user cache directory): set %s to a directory, or pass --out", profiles.StoreEnv)
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return fmt.Errorf("profile store: %w", err)
			}
		}
		if path != "" {
			if err := mayWrite(path, *force, simulated); err != nil {
				return err
			}
		}
		start := time.Now()
		p, err := profiler.Measure(ctx, dev, lib, m.Name(), *batch, o)
		if err != nil {
			return err
		}
		if path != "" {
			if err := writeProfile(path, p); err != nil {
				return err
			}
		}
		return summary(e.stdout, p, path, time.Since(start))
	}
	return runOn(*backend, sim.Config{}, *simGPU, *ordinal,
		"atoll profile measures on a real GPU; --backend sim --out FILE runs the same code on the simulator (its durations are the estimated profile's)", measure)
}

// recordLaunches is atoll profile --launches: csvPath's vendor launches
// recorded in the profile at path, which must be of model at batch.
func recordLaunches(e *env, csvPath, path, model string, batch int) error {
	if path == "" {
		return fmt.Errorf("--launches needs --out naming the profile to record them in (e.g. the store's, 'atoll models' lists them)")
	}
	p, err := profiles.Load(path)
	if err != nil {
		return err
	}
	if p.Model != model || p.Batch != batch {
		return fmt.Errorf("%s is the profile of %s bs%d, not of --model %s --batch %d", path, p.Model, p.Batch, model, batch)
	}
	f, err := os.Open(csvPath)
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(csvPath, ".gz") {
		if r, err = gzip.NewReader(f); err != nil {
			return fmt.Errorf("%s: %w", csvPath, err)
		}
	}
	ls, err := profiler.ParseNCU(r)
	if err != nil {
		return fmt.Errorf("%s: %w", csvPath, err)
	}
	if err := profiler.ApplyLaunches(p, ls, filepath.Base(csvPath)); err != nil {
		return err
	}
	if err := writeProfile(path, p); err != nil {
		return err
	}
	calls, n := 0, 0
	for _, k := range p.Kernels {
		if len(k.Launches) > 0 {
			calls++
			n += len(k.Launches)
		}
	}
	fmt.Fprintf(e.stdout, "%s: %d vendor calls, %d launches recorded from %s\n", path, calls, n, csvPath)
	return nil
}

// mayWrite refuses to replace a measured (or imported) profile unless
// forced, and never lets a simulated one replace it.
func mayWrite(path string, force, simulated bool) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	old, err := profiles.Load(path)
	if err != nil {
		if force && !simulated {
			return nil
		}
		return fmt.Errorf("%s exists and is not a profile this build reads (%v): move it away, or --force to replace it", path, err)
	}
	wasSim := old.Notes["simulated"] != ""
	switch {
	case simulated && wasSim:
		return nil // a simulation replaces a simulation
	case simulated:
		return fmt.Errorf("%s is a %s profile of %s: a simulated profile is never written over it (choose another --out)", path, old.Source, old.GPU)
	case old.Source == profiles.SourceEstimated:
		return nil // measurements replace estimates
	case !force:
		return fmt.Errorf("%s is already a %s profile (%s): --force to replace it", path, old.Source, firstLine(old.Device))
	}
	return nil
}

// writeProfile replaces the profile at path through a temporary file,
// gzipped when path ends in .gz (as results/ keeps them: gzip -9n).
func writeProfile(path string, p *profiles.Profile) error {
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".profile-*.json")
	if err != nil {
		return err
	}
	var w io.Writer = tmp
	var z *gzip.Writer
	if strings.HasSuffix(path, ".gz") {
		z, _ = gzip.NewWriterLevel(tmp, gzip.BestCompression) // a valid level
		w = z
	}
	err = profiles.Write(w, p)
	if err == nil && z != nil {
		err = z.Close()
	}
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// summary prints what was written: kernels, total, the five longest
// kernels and the class counts.
func summary(w io.Writer, p *profiles.Profile, path string, took time.Duration) error {
	var total, graph float64
	classes := map[string]int{}
	idx := make([]int, len(p.Kernels))
	for i, k := range p.Kernels {
		total += k.DurationUs
		graph += k.GraphUs
		classes[k.Class]++
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return p.Kernels[idx[a]].DurationUs > p.Kernels[idx[b]].DurationUs })
	if path == "" {
		fmt.Fprintf(w, "simulated %s (source %s: the simulator's durations are the estimated profile's) in %.1f s; not written: a simulated profile stays out of the profile store, where it would take the place of a measured one (--out FILE keeps it)\n", p.GPU, p.Source, took.Seconds())
	} else {
		fmt.Fprintf(w, "wrote %s (%s, source %s) in %.1f s\n", path, p.GPU, p.Source, took.Seconds())
	}
	fmt.Fprintf(w, "%s bs%d: %d kernels, %.1f us of kernel time", p.Model, p.Batch, len(p.Kernels), total)
	if graph > 0 {
		fmt.Fprintf(w, " kernel by kernel, %.1f us inside one graph (as an HP request runs them)", graph)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "classes: compute %d, memory %d, unknown %d\n", classes[profiles.ClassCompute], classes[profiles.ClassMemory], classes[profiles.ClassUnknown])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "top kernels\tkernel\tus\tspread\tcompute%\tmemory%\tclass\tSMs needed")
	for _, i := range idx[:min(5, len(idx))] {
		k := p.Kernels[i]
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%d\n", k.Name, k.Kernel, k.DurationUs, k.SpreadUs, k.ComputePct, k.MemoryPct, k.Class, k.SMsNeeded)
	}
	return tw.Flush()
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// selfName is how to run this binary again: its path as invoked, or
// "atoll" when that is not an atoll binary (tests).
func selfName() string {
	if len(os.Args) > 0 && filepath.Base(os.Args[0]) == "atoll" {
		return os.Args[0]
	}
	return "atoll"
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if s == "" {
		return "no device facts"
	}
	return s
}
