package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"atoll/bench"
	"atoll/policies"
)

const benchHelp = `
Usage: atoll bench [flags]

Runs one policy on one co-location workload and writes a JSON report (the
format 'atoll compare' reads). The report stands on its own: it includes HP
alone on the same arrival sequence and BE alone on the same device, so its
p99 overhead and normalized throughputs need nothing else.

Examples:
  atoll bench --policy atoll --out atoll.json
  atoll bench --policy orion --load 0.3 --duration 10s --out orion.json
  atoll bench --policy reef --arrival trace --trace arrivals.txt --out reef.json
  atoll bench --be none --load 0.9 --duration 30s --hp-max-batch 4 --ci --out hp-batched.json
      # HP alone near capacity, the requests that queue served together in
      # passes of up to 4, with bootstrap CIs of p99
  atoll compare orion.json atoll.json
`

func init() {
	register(command{name: "bench", summary: "run one policy on a workload and write a JSON report", run: runBench})
}

func runBench(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench", benchHelp)
	var w workloadFlags
	w.register(fs)
	policy := fs.String("policy", "atoll", "scheduling policy (see 'atoll policies')")
	out := fs.String("out", "", "write the report here (default: standard output)")
	samples := fs.Bool("ci", false, "keep every request's latency in the report and add block-bootstrap 95% confidence intervals of HP p99 and of its overhead over the dedicated run (as the matrix does; the report grows by about 4 bytes per request)")
	cpuProfile := fs.String("cpuprofile", "", "also write the host's CPU profile of the whole command to this file (read it with 'go tool pprof FILE': where the host time of launches, polls and decisions goes)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if _, err := policies.ByName(*policy); err != nil {
		return err
	}
	if err := w.checkPolicies([]string{*policy}); err != nil {
		return err
	}
	c, err := w.config()
	if err != nil {
		return err
	}
	c.Samples = *samples
	start := time.Now()
	w.progress(e, c, start)
	b, err := bench.Measure(ctx, c)
	if err != nil {
		return err
	}
	r, err := bench.RunPolicy(ctx, c, b, *policy)
	if err != nil {
		return err
	}
	if *out == "" {
		return bench.WriteReport(e.stdout, r)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := bench.WriteReport(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, bench.Describe(r))
	return bench.Table(e.stdout, []*bench.Report{r})
}

// startCPUProfile starts Go's CPU profiler into a new file at path and
// returns what stops it and closes the file.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
