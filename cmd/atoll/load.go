package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"atoll/bench"
	"atoll/loadgen"
)

const loadHelp = `
Usage: atoll load --model NAME [flags]

Drives a running 'atoll serve' (or any KServe / Open Inference Protocol v2
server) with an open-loop load, like MLPerf LoadGen's server scenario: each
request is sent at its scheduled time whether or not earlier ones have
finished, and its latency is completion − SCHEDULED send time. Prints p50,
p95, p99 and p99.9 latency, throughput, SLO attainment and goodput for
--slo, and errors by kind; --out also writes the report as JSON.

A run is marked INVALID when the generator sent a request more than --late
after its scheduled time or dropped requests at --max-inflight: the offered
load was then not the one asked for. See docs/load.md.

Tensors go as the Open Inference Protocol's binary tensor data extension by
default (--data binary: raw little-endian bytes after a small JSON header,
binary outputs asked for too). --data json sends them as JSON numbers, which
costs milliseconds per large tensor to print here and to parse in the daemon
(a ResNet-50 input is 150,528 numbers): use it only to measure that cost or
for a server without the extension. Each distinct body is encoded once before
the run; the sender splices in the request id and nothing else.

It only talks to the --url it is given (default: this machine).

Examples:
  atoll load --model resnet50 --rate 200 --duration 30s --slo 20ms
  atoll load --model resnet50 --arrival lognormal --sigma 1.5 --rate 100 --slo 20ms --out load.json
  atoll load --model resnet50 --trace arrivals.txt --warmup 0 --slo 20ms
  atoll load --model resnet50 --rate 300 --mix hp=0.8,be=0.2 --priorities hp=1,be=3 --slo 15ms
  atoll load --model resnet50 --rate 250 --duration 20s --data json   # the JSON cost, for comparison
`

func init() {
	register(command{name: "load", summary: "open-loop load generator against a running daemon", run: runLoad})
}

func runLoad(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "load", loadHelp)
	rawURL := fs.String("url", "http://127.0.0.1:8000", "base URL of the daemon (atoll serve listens on :8000 by default)")
	model := fs.String("model", "", "model to load (required; see GET /v2/models)")
	arrival := fs.String("arrival", bench.Poisson, "arrival process: "+strings.Join(bench.ArrivalNames, ", ")+" (trace needs --trace)")
	rate := fs.Float64("rate", 50, "offered requests per second")
	sigma := fs.Float64("sigma", 1, "shape of the lognormal arrival process (burstiness)")
	trace := fs.String("trace", "", "file of send times, one per line (\"1.5ms\" or microseconds); replaces --rate and --duration")
	duration := fs.Duration("duration", 30*time.Second, "length of the run, warm-up included (at most "+loadgen.MaxDuration.String()+")")
	warmup := fs.Duration("warmup", time.Second, "requests scheduled before this are sent but not measured")
	seed := fs.Uint64("seed", 1, "seed of the arrival process, the class mix and the input values")
	slo := fs.Duration("slo", 0, "latency bound for SLO attainment and goodput, e.g. 20ms (0: none)")
	maxInFlight := fs.Int("max-inflight", 256, fmt.Sprintf("most requests outstanding at once; a request due beyond it is dropped and counted (at most %d)", loadgen.MaxInFlightCap))
	timeout := fs.Duration("timeout", 10*time.Second, "per-request timeout")
	late := fs.Duration("late", 2*time.Millisecond, "a send later than this after its scheduled time invalidates the run")
	priority := fs.Int("priority", 0, "\"priority\" parameter of every request (1 is highest; 0: the model's default)")
	mix := fs.String("mix", "", "class mix, e.g. hp=0.8,be=0.2 (excludes --priority)")
	priorities := fs.String("priorities", "", "priority level of each --mix class, e.g. hp=1,be=2 (default hp=1, be=2)")
	batch := fs.Int("batch", 1, "size of each input's variable (-1) dimension")
	data := fs.String("data", string(loadgen.DataBinary), "tensor data format: binary (the binary tensor data extension; inputs and outputs as raw bytes) or json (JSON numbers: milliseconds per large tensor on both ends)")
	out := fs.String("out", "", "also write the report as JSON here")
	records := fs.String("records", "", "also write every request's record here, one JSON object per line (scheduledNs, sentNs, doneNs from the run's start; kind: ok or the error)")
	quiet := fs.Bool("quiet", false, "no progress line on stderr")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only; see 'atoll load --help')", fs.Arg(0))
	}
	if *model == "" {
		return fmt.Errorf("%w: --model is required (list the served models with GET /v2/models)", loadgen.ErrModel)
	}
	if err := loadgen.CheckModel(*model); err != nil {
		return err
	}
	u, err := loadgen.CheckURL(*rawURL)
	if err != nil {
		return err
	}
	if *duration <= 0 || *duration > loadgen.MaxDuration {
		return fmt.Errorf("%w: --duration %v must be in (0, %v]", loadgen.ErrConfig, *duration, loadgen.MaxDuration)
	}
	if *maxInFlight < 1 || *maxInFlight > loadgen.MaxInFlightCap {
		return fmt.Errorf("%w: --max-inflight must be in [1, %d], got %d", loadgen.ErrConfig, loadgen.MaxInFlightCap, *maxInFlight)
	}

	format, err := loadgen.ParseDataFormat(*data)
	if err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	cfg := loadgen.Config{
		Model: *model, Warmup: *warmup, Batch: *batch, Seed: *seed, Data: format,
		MaxInFlight: *maxInFlight, SLO: *slo, LateThreshold: *late,
	}
	if *late <= 0 {
		return fmt.Errorf("%w: --late must be positive, got %v", loadgen.ErrConfig, *late)
	}
	switch {
	case *mix != "" && *priority != 0:
		return fmt.Errorf("%w: give either --priority or --mix (with --priorities), not both", loadgen.ErrConfig)
	case *mix != "":
		if cfg.Classes, err = loadgen.ParseMix(*mix, *priorities); err != nil {
			return err
		}
	case *priorities != "":
		return fmt.Errorf("%w: --priorities sets the levels of --mix classes; without --mix use --priority", loadgen.ErrConfig)
	case *priority < 0:
		return fmt.Errorf("%w: --priority must be 0 (model default) or a level from 1 (highest), got %d", loadgen.ErrConfig, *priority)
	case *priority > 0:
		cfg.Classes = []loadgen.Class{{Name: "all", Priority: *priority, Weight: 1}}
	}

	if *trace != "" || *arrival == bench.Trace {
		if *trace == "" {
			return fmt.Errorf("%w: --arrival trace needs --trace FILE", bench.ErrArrivals)
		}
		*arrival = bench.Trace
		f, err := os.Open(*trace)
		if err != nil {
			return fmt.Errorf("%w: %v", bench.ErrArrivals, err)
		}
		cfg.Schedule, err = bench.ReadTrace(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", *trace, err)
		}
		last := cfg.Schedule[len(cfg.Schedule)-1]
		if last > loadgen.MaxDuration {
			return fmt.Errorf("%w: trace %s lasts %v, over the cap of %v", loadgen.ErrConfig, *trace, last, loadgen.MaxDuration)
		}
		cfg.Span = last + time.Millisecond
	} else {
		if cfg.Schedule, err = bench.Arrivals(*arrival, *rate, *duration, *seed, *sigma); err != nil {
			return err
		}
		cfg.Span = *duration
	}
	if *warmup < 0 || *warmup >= cfg.Span {
		return fmt.Errorf("%w: --warmup %v must be shorter than the run (%v); lower it (0 measures everything)", loadgen.ErrConfig, *warmup, cfg.Span.Round(time.Millisecond))
	}

	c, err := loadgen.NewClient(u.String(), loadgen.ClientOptions{MaxInFlight: *maxInFlight, Timeout: *timeout})
	if err != nil {
		return err
	}
	defer c.Close()
	if !*quiet {
		where := ""
		if !loadgen.IsLoopback(u) {
			where = " (not this machine: --url given)"
		}
		fmt.Fprintf(e.stderr, "atoll load: %d requests (%s, %.1f/s offered, %s tensor data) to %s%s model %s over %v ...\n",
			len(cfg.Schedule), *arrival, bench.Rate(cfg.Schedule, cfg.Span), format, u, where, *model, cfg.Span.Round(time.Millisecond))
	}
	res, err := loadgen.Run(ctx, c, cfg)
	if err != nil {
		return err
	}
	rep := loadgen.Summarize(res)
	rep.Arrival = *arrival
	if err := loadgen.Table(e.stdout, rep); err != nil {
		return err
	}
	if *out != "" {
		if err := writeLoadReport(*out, rep); err != nil {
			return err
		}
	}
	if *records != "" {
		if err := writeRecords(*records, res.Records); err != nil {
			return err
		}
	}
	if res.Interrupted {
		return errors.New("interrupted: the report above covers the requests sent before the signal")
	}
	return nil
}

func writeLoadReport(path string, rep *loadgen.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := loadgen.WriteJSON(f, rep); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeRecords writes one JSON line per request record.
func writeRecords(path string, recs []loadgen.Record) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
