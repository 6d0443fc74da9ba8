package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"atoll/gpu"
	"atoll/gpu/cuda"
	"atoll/gpu/sim"
	"atoll/kernels"
	"atoll/models"
	"atoll/policies"
	"atoll/profiler"
	"atoll/profiles"
)

const corunHelp = `
Usage: atoll corun --hp MODEL --be MODEL [--be-batch N] [flags]

Measures how much an HP model's kernels slow down while each kernel of a BE
model runs beside them, the way atoll runs the two: BE kernels in an SM
partition (a green context of --partition SMs; default the partition atoll
gives BE for this HP model), HP on every SM at the greatest stream
priority. For each distinct BE launch shape, the kernel is queued back to
back in the partition and, once it runs, --passes HP passes are timed with
a CUDA event between every two HP launches; the HP model alone is timed
the same way every 16 BE kernels. The report gives, per BE kernel, the HP
pass's slowdown (median time beside it / median alone) and each HP
kernel's; its summary, the mean over the BE step (each kernel weighted by
its profiled time) and the share of the step whose slowdown stays within
2, 5, 10 and 25 %. With --be-depth N the BE queue is refilled as launches
complete, each followed by an event, and the report also gives the BE
kernel's own slowdown beside HP.

The profiles of both models must exist (atoll profile). On --backend sim
the same code runs on the simulator with the profiles' costs: its report
is the simulator's prediction of the same figures, and --compare FILE
(a report of the GPU) prints the two side by side.

See docs/physics.md, "Co-run slowdown".

Examples:
  atoll corun --hp resnet50 --be resnet50-train --be-batch 32 --out corun.json
  atoll corun --hp bert-base --be bert-base-train --be-batch 8 --kernels 0-40
  atoll corun --backend sim --gpu H200 --hp resnet50 --be resnet50-train --be-batch 32 \
      --compare results/corun-h200/resnet50.json.gz
`

func init() {
	register(command{name: "corun", summary: "on a GPU: measure HP kernels' slowdown beside each BE kernel", run: runCoRun})
}

func runCoRun(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "corun", corunHelp)
	hp := fs.String("hp", "", "HP model (zoo name)")
	hpBatch := fs.Int("hp-batch", 1, "HP batch size")
	be := fs.String("be", "", "BE model (zoo name)")
	beBatch := fs.Int("be-batch", 1, "BE batch size")
	backend := fs.String("backend", "cuda", "cuda (the GPU) or sim (the simulator's prediction)")
	simGPU := fs.String("gpu", gpu.H100SXM.Name, "--backend sim: the simulated GPU (its profiles are used)")
	ordinal := fs.Int("device", 0, "GPU ordinal")
	part := fs.Int("partition", 0, "SMs of BE's partition (0: atoll's default for the HP model, the SMs less policies.ReserveSMs; the device's SM count: no partition, BE on every SM at the least priority)")
	hpRest := fs.Bool("hp-rest", false, "run HP on the SMs the partition leaves, not every SM: the two share no SM, only memory, L2 and the front end")
	graph := fs.Bool("hp-graph", false, "submit each HP pass as one graph (a CUDA graph) with an event after every kernel, as the scheduler submits a request")
	passEvents := fs.Bool("hp-pass-events", false, "record one HP event a pass instead of one after every kernel: events take GPU time that BE does not slow, so with many short HP kernels they dilute the slowdown (a request's graph records a few); per-kernel HP slowdowns are then not measured")
	hpGap := fs.Duration("hp-gap", 0, "send each HP pass alone, this long (e.g. 300us) after the one before completed, timed from a start event on the idle HP stream: HP then meets a GPU BE has had to itself, as a request does under priority; needs --be-depth, implies --hp-pass-events")
	beGraphs := fs.Bool("be-graphs", false, "with --be-depth: queue every BE kernel in graphs of launches lasting about 50 µs (one launch where a kernel is longer), as atoll submits BE chunks, so that it runs as it does in a graph; its own slowdown is then against its time launched alone")
	depth := fs.Int("be-depth", 0, "keep at most this many BE launches queued, the next launched as one completes (as atoll's bounded BE queue does; a kernel too short for them to hold 200 µs is queued in graphs of launches lasting 50 µs, so that the host's refills do not set its pace); 0 queues the whole run at once")
	passes := fs.Int("passes", profiler.DefaultCoRunPasses, "HP passes timed beside each BE kernel")
	which := fs.String("kernels", "", "BE kernel indices to measure, e.g. 0-40,52 (default: all)")
	out := fs.String("out", "", "write the report (JSON) here")
	compare := fs.String("compare", "", "a report to compare with (e.g. the GPU's, when this one is simulated)")
	corun := measuredCoRun // what the model was fitted to
	fs.Var(&corun, "sim-corun", "--backend sim: the simulator's co-run interference: measured (fitted to this measurement on the simulated GPU: an H200's on an H200, an H100's on others; docs/simulator.md), off, or DEVICE,SM[,MEMORY]")
	notice := measuredNotice
	fs.Var(&notice, "sim-notice", "--backend sim: "+simNoticeHelp+" (with --be-depth BE's refills wait for it)")
	hostCost := defaultSimLaunchCost
	fs.Var(&hostCost, "sim-launch-cost", "--backend sim: "+strings.TrimPrefix(simLaunchCostHelp, "simulator: ")+" (with --be-depth it bounds how fast the host refills BE, as on the GPU)")
	kernelGap := measuredTurn
	fs.Var(&kernelGap, "sim-kernel-gap", "--backend sim: "+strings.TrimPrefix(simKernelGapHelp, "simulator: "))
	var graphKeep offFlag
	fs.Var(&graphKeep, "sim-graph-yield", "--backend sim: "+strings.TrimPrefix(simGraphYieldHelp, "simulator: "))
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "atoll corun: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	if *hp == "" || *be == "" {
		fmt.Fprintln(e.stderr, "atoll corun: --hp and --be are required")
		fs.Usage()
		return errUsage
	}
	if *passes < 1 {
		return fmt.Errorf("--passes %d: need at least 1", *passes)
	}
	var kernelList []int
	if *which != "" {
		var err error
		if kernelList, err = parseIndexList(*which); err != nil {
			return fmt.Errorf("--kernels %q: %w", *which, err)
		}
	}
	var cmp *profiler.CoRunReport
	if *compare != "" {
		var err error
		if cmp, err = readCoRun(*compare); err != nil {
			return err
		}
	}
	for _, m := range []string{*hp, *be} {
		if _, err := models.Get(m); err != nil {
			return err
		}
	}
	opt := profiler.CoRunOptions{HPRest: *hpRest, BEDepth: *depth, HPGraph: *graph, HPPassEvents: *passEvents, HPGap: *hpGap, BEGraphs: *beGraphs, Passes: *passes, Kernels: kernelList, Seed: 1, Command: "atoll corun " + quoteArgs(args)}
	if !*quiet {
		bar := profiler.NewBar(e.stderr, isTerminal(e.stderr))
		defer bar.Done()
		opt.Progress = bar.Update
	}
	measure := func(dev gpu.Device) error {
		spec, err := gpu.LookupSpec(dev.Info().Name)
		if err != nil {
			return err
		}
		if opt.HP, err = profileFor(spec, *hp, *hpBatch); err != nil {
			return err
		}
		if opt.BE, err = profileFor(spec, *be, *beBatch); err != nil {
			return err
		}
		opt.PartitionSMs = *part
		if opt.PartitionSMs == 0 {
			opt.PartitionSMs = gpu.PartitionFloor(spec, spec.SMs-policies.ReserveSMs(spec, []*profiles.Profile{opt.HP}))
		}
		start := time.Now()
		rep, err := profiler.CoRun(ctx, dev, kernels.New(dev), opt)
		if err != nil {
			return err
		}
		if *out != "" {
			if err := writeCoRun(*out, rep); err != nil {
				return err
			}
		}
		printCoRun(e.stdout, rep, *out, time.Since(start))
		if cmp != nil {
			compareCoRun(e.stdout, rep, cmp, *compare)
		}
		return nil
	}
	var sc sim.Config
	if *backend == "sim" {
		spec, err := gpu.LookupSpec(*simGPU)
		if err != nil {
			return err
		}
		// The simulator as bench, demo and matrix run it (every measured
		// host and GPU cost: events, the profile gap, launches), so that
		// what this measures of it is what the scheduler's runs meet; the
		// flags set the rest. With a BLAS, as the GPU whose profiles time
		// it has cuBLASLt.
		sc = sim.Defaults(spec, 1)
		sc.NoticeLatency, sc.BLAS = notice.value(spec.Name), true
		sc.CoRunDevice, sc.CoRunSM, sc.CoRunMemory = corun.values(spec.Name)
		sc.KernelGap, sc.GraphYield = kernelGap.value(spec.Name), !bool(graphKeep)
		hostCost.apply(&sc)
	}
	return runOn(*backend, sc, *simGPU, *ordinal,
		"--backend sim runs the same measurement on the simulator (its prediction)", measure)
}

// runOn runs measure on the simulator (cfg with simGPU's spec) or on CUDA
// device ordinal; a missing GPU is reported with hint.
func runOn(backend string, cfg sim.Config, simGPU string, ordinal int, hint string, measure func(gpu.Device) error) error {
	switch backend {
	case "sim":
		spec, err := gpu.LookupSpec(simGPU)
		if err != nil {
			return err
		}
		cfg.Spec = spec
		dev, err := sim.New(cfg)
		if err != nil {
			return err
		}
		defer dev.Close()
		return measure(dev)
	case "cuda":
		err := cuda.Run(ordinal, func(d *cuda.Device) error { return measure(d) })
		if errors.Is(err, gpu.ErrNoDevice) {
			return fmt.Errorf("no GPU found: %w\nhint: %s", err, hint)
		}
		return err
	default:
		return fmt.Errorf("--backend %q: want cuda or sim", backend)
	}
}

// parseIndexList reads "0-40,52".
func parseIndexList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(f), "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%q is not an index or a range a-b", f)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("%q is not a range a-b with a <= b", f)
			}
		}
		for i := a; i <= b; i++ {
			if !slices.Contains(out, i) {
				out = append(out, i)
			}
		}
	}
	return out, nil
}

func readCoRun(path string) (*profiler.CoRunReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := profiler.ReadCoRun(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

func writeCoRun(path string, r *profiler.CoRunReport) error {
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := profiler.WriteCoRun(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// printCoRun prints the summary and the BE kernels that slow HP most.
func printCoRun(w io.Writer, r *profiler.CoRunReport, path string, took time.Duration) {
	where := "every SM"
	if r.HPRest {
		where = "the other SMs"
	}
	depth := "all queued at once"
	if r.BEDepth > 0 {
		depth = fmt.Sprintf("at most %d queued", r.BEDepth)
	}
	if r.BEGraphs {
		depth += ", in graphs"
	}
	if r.HPGraph {
		where += ", graphs"
	}
	if r.HPPassEvents {
		where += ", one event a pass"
	}
	if r.HPGapUs > 0 {
		where += fmt.Sprintf(", each pass alone %.0f µs after the last", r.HPGapUs)
	}
	in := fmt.Sprintf("in a %d-SM partition", r.PartitionSMs)
	if spec, err := gpu.LookupSpec(r.GPU); err == nil && r.PartitionSMs >= spec.SMs {
		in = "on every SM at the least priority (no partition)"
	}
	fmt.Fprintf(w, "%s bs%d (on %s) beside each kernel of %s bs%d (%s) %s, %s (%s), %d passes each, %.1f s\n",
		r.HP.Model, r.HP.Batch, where, r.BE.Model, r.BE.Batch, depth, in, r.GPU, r.Backend, r.Passes, took.Seconds())
	if r.Backend == "sim" {
		fmt.Fprintln(w, "simulated: the simulator's prediction, not a measurement")
	}
	fmt.Fprintf(w, "HP pass alone: %.1f µs, the median of %d baselines (spread %.1f %%)\n", medianOf(r.HPRequestUs), len(r.HPRequestUs), 100*r.Summary.BaselineSpread)
	s := r.Summary
	fmt.Fprintf(w, "HP slowdown over the BE step (time-weighted mean): %.3f\n", s.MeanHPSlowdown)
	var parts []string
	for _, b := range profiler.CoRunBounds {
		parts = append(parts, fmt.Sprintf("≤ %+.0f %%: %.0f %%", 100*(b-1), 100*s.ShareWithin[fmt.Sprintf("%.2f", b)]))
	}
	fmt.Fprintf(w, "share of the BE step's time with HP slowdown %s", strings.Join(parts, ", "))
	if s.Unmeasured > 0 {
		fmt.Fprintf(w, "; unmeasured %.1f %%", 100*s.Unmeasured)
	}
	fmt.Fprintln(w)
	if s.BEWeighed > 0 {
		fmt.Fprintf(w, "BE slowdown beside HP (time-weighted mean over the %.0f %% of the step whose queue holds 200 µs or more): %.3f\n", 100*s.BEWeighed, s.MeanBESlowdown)
	}
	ks := slices.Clone(r.Kernels)
	ks = slices.DeleteFunc(ks, func(k profiler.CoRunBE) bool { return k.SameAs >= 0 || k.Passes == 0 })
	sort.SliceStable(ks, func(i, j int) bool { return ks[i].HPSlowdown > ks[j].HPSlowdown })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "BE kernel\tprofile µs\talone µs\tmem %\tcompute %\tHP slowdown\tBE slowdown\t")
	for _, k := range ks[:min(12, len(ks))] {
		be := "–"
		if k.BESlowdown > 0 {
			be = fmt.Sprintf("%.3f", k.BESlowdown)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.0f\t%.0f\t%.3f\t%s\t\n", k.Name, k.ProfileUs, k.AloneUs, k.MemoryPct, k.ComputePct, k.HPSlowdown, be)
	}
	tw.Flush()
	if path != "" {
		fmt.Fprintf(w, "report: %s\n", path)
	}
}

// compareCoRun prints how far r's per-kernel HP slowdowns are from ref's
// (same models and partition).
func compareCoRun(out io.Writer, r, ref *profiler.CoRunReport, refPath string) {
	if r.HP != ref.HP || r.BE != ref.BE || r.PartitionSMs != ref.PartitionSMs || r.HPRest != ref.HPRest || r.BEDepth != ref.BEDepth || r.HPGraph != ref.HPGraph || r.HPPassEvents != ref.HPPassEvents || r.HPGapUs != ref.HPGapUs || r.BEGraphs != ref.BEGraphs {
		fmt.Fprintf(out, "--compare %s: another measurement (%s bs%d beside %s bs%d, %d SMs): not compared\n",
			refPath, ref.HP.Model, ref.HP.Batch, ref.BE.Model, ref.BE.Batch, ref.PartitionSMs)
		return
	}
	byIndex := map[int]profiler.CoRunBE{}
	for _, k := range ref.Kernels {
		byIndex[k.Index] = k
	}
	var errs []float64
	n := 0
	w, here, there := 0.0, 0.0, 0.0 // step-time-weighted means over the kernels in both
	for _, k := range r.Kernels {
		o, ok := byIndex[k.Index]
		if !ok || k.Passes == 0 || o.Passes == 0 {
			continue
		}
		n++
		errs = append(errs, math.Abs(k.HPSlowdown-o.HPSlowdown))
		w += k.ProfileUs
		here += k.ProfileUs * k.HPSlowdown
		there += k.ProfileUs * o.HPSlowdown
	}
	sort.Float64s(errs)
	fmt.Fprintf(out, "against %s (%s, %s): %d kernels in both", refPath, ref.GPU, ref.Backend, n)
	if n > 0 && w > 0 {
		fmt.Fprintf(out, "; over them, mean HP slowdown %.3f here, %.3f there; per-kernel slowdown off by %.1f points (median), %.1f (90th percentile)",
			here/w, there/w, 100*errs[len(errs)/2], 100*errs[min(len(errs)-1, len(errs)*9/10)])
	}
	fmt.Fprintln(out)
	if bins := coRunByDuration(r, byIndex); bins != "" {
		fmt.Fprintf(out, "by the BE kernel's profiled time (share of the step; mean HP slowdown here, there): %s\n", bins)
	}
}

// coRunDurationBins are the bounds, in µs of a BE kernel's profiled time,
// of coRunByDuration's bins.
var coRunDurationBins = []float64{10, 50}

// coRunByDuration is the step-time-weighted mean HP slowdown of r and ref
// (by BE kernel index) over the BE kernels in each bin of profiled time:
// a mean over the whole step can hide errors of opposite sign in short and
// long kernels, which a scheduler's queue weighs differently.
func coRunByDuration(r *profiler.CoRunReport, ref map[int]profiler.CoRunBE) string {
	type bin struct{ w, here, there float64 }
	bins := make([]bin, len(coRunDurationBins)+1)
	total := 0.0
	for _, k := range r.Kernels {
		o, ok := ref[k.Index]
		if !ok || k.Passes == 0 || o.Passes == 0 {
			continue
		}
		i := 0 // a bound belongs to the bin above it
		for i < len(coRunDurationBins) && k.ProfileUs >= coRunDurationBins[i] {
			i++
		}
		bins[i].w += k.ProfileUs
		bins[i].here += k.ProfileUs * k.HPSlowdown
		bins[i].there += k.ProfileUs * o.HPSlowdown
		total += k.ProfileUs
	}
	var parts []string
	for i, b := range bins {
		if b.w == 0 {
			continue
		}
		var name string
		switch {
		case i == 0:
			name = fmt.Sprintf("< %.0f µs", coRunDurationBins[0])
		case i == len(coRunDurationBins):
			name = fmt.Sprintf("≥ %.0f µs", coRunDurationBins[i-1])
		default:
			name = fmt.Sprintf("%.0f–%.0f µs", coRunDurationBins[i-1], coRunDurationBins[i])
		}
		parts = append(parts, fmt.Sprintf("%s (%.0f %%) %.3f, %.3f", name, 100*b.w/total, b.here/b.w, b.there/b.w))
	}
	return strings.Join(parts, "; ")
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2
}
