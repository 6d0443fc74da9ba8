package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"atoll/bench"
	"atoll/policies"
)

const demoHelp = `
Usage: atoll demo [flags]

Runs the default co-location workload under every policy and prints one
table. HP: ResNet-50 batch-1 inference, Poisson arrivals at load 0.5. BE: a
ResNet-50 batch-32 training job, closed loop. Each policy's run is measured
against HP alone on the same arrival sequence and BE alone, on the same
(simulated) GPU, with the kernel timings of the committed profiles.

The numbers are what the simulator produced; nothing is tuned toward an
expected ordering. Columns: HP latency percentiles (scheduled arrival →
completion), p99 overhead vs dedicated, BE normalized throughput (BE work per
second shared / alone), system throughput (HP + BE normalized), preemptions
and padded launches. docs/metrics.md defines each.

Examples:
  atoll demo
  atoll demo --load 0.3 --duration 10s
  atoll demo --hp bert-base --be bert-base-train --be-batch 8
  atoll demo --plot cdf.svg
  atoll demo --policies dedicated,priority,atoll
  atoll demo --backend cuda --hp resnet50 --be vgg19 --be-batch 1   # on the GPU, its measured profiles
`

// simulatedNote says how far the simulator's co-location figures were from
// the GPU's on the committed matrices (TestSimulatedNoteMatchesResults
// recomputes its figures from results/).
const simulatedNote = `note: these co-location figures are simulated. With this build's simulator,
replaying GPU series on their own arrivals, nothing in the simulator set from
them: over the whole committed matrix on an H200, each part on profiles measured
on its own machine (results/onmachine2-all-h200, onmachine2-train-h200,
onmachine2-bert-h200: 8 cells under priority, orion, reef and atoll), its HP p99
was within 10 % in 18 of 32 policy runs (median error 7 %), its HP p50 off by a
median 7 % and its BE throughput by a median 3 %, and it ranked the policies as
the GPU did in 8 of 8 cells by HP p99 and 8 of 8 by BE throughput. Per policy,
HP p99 within 10 %: priority 2 of 8 (median error 28 %), orion 7 of 8 (median
error 6 %), reef 1 of 8 (median error 64 %), atoll 8 of 8 (median error 3 %). On
profiles from another H200 (results/matrix-h200-g8-events) it was within 10 % in
13 of 32 (median error 15 %); on four cells no series had run before
(results/heldout4-h200, measured after this simulator was settled) in 9 of 16.
Where it is off: REEF, which saturates on the GPU far more than simulated, and
priority with BE on every SM (HP p99 too low in five of eight cells, by 23-65 %,
too high with ResNet-50 beside VGG-19, +39 %).
docs/fidelity.md has every comparison. Run 'atoll demo --backend cuda' or
'atoll matrix --backend cuda' on a GPU.`

func init() {
	register(command{name: "demo", summary: "run the co-location demo under every policy (simulated GPU)", run: runDemo})
}

func runDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "demo", demoHelp)
	var w workloadFlags
	w.register(fs)
	plotPath := fs.String("plot", "", "also draw the HP latency CDFs to this file (.svg, .png or .pdf)")
	reports := fs.String("reports", "", "also write each policy's JSON report (the format 'atoll compare' reads) into this directory as <policy>.json")
	only := fs.String("policies", strings.Join(policies.Names(), ","), "policies to run, comma-separated, in table order; a policy's parameters follow it (atoll:split=true,reserve=100)")
	if err := parse(fs, args); err != nil {
		return err
	}
	names := policies.SplitList(*only)
	for _, n := range names {
		if _, err := policies.ByName(n); err != nil {
			return err
		}
	}
	if err := w.checkPolicies(names); err != nil {
		return err
	}
	c, err := w.config()
	if err != nil {
		return err
	}
	start := time.Now()
	w.progress(e, c, start)
	rs, err := bench.Suite(ctx, c, names)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, bench.Describe(rs[0]))
	if err := bench.Table(e.stdout, rs); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%d policies in %.1f s wall\n", len(rs), time.Since(start).Seconds())
	if w.backend == "sim" && w.be != "none" {
		fmt.Fprintln(e.stdout, simulatedNote)
	}
	if *reports != "" {
		if err := writeReports(*reports, rs); err != nil {
			return err
		}
	}
	if *plotPath != "" {
		return writePlot(*plotPath, rs)
	}
	return nil
}

// writeReports writes each report to dir/<policy>.json, creating dir.
func writeReports(dir string, rs []*bench.Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--reports: %w", err)
	}
	for _, r := range rs {
		path := filepath.Join(dir, r.Policy+".json")
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("--reports: %w", err)
		}
		err = bench.WriteReport(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("--reports: %s: %w", path, err)
		}
	}
	return nil
}
