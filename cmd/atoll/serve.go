package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"atoll/gpu/cuda"
	"atoll/server"
	"atoll/server/standby"
)

const serveHelp = `
Usage: atoll serve [--config FILE] [flags]

Runs the inference daemon: owns the GPU (backend cuda) or a simulated GPU
paced to the wall clock (backend sim), and serves the models over the
KServe / Open Inference Protocol v2 REST API (and its gRPC API with
--grpc-listen), with best-effort jobs at /v2/jobs and Prometheus metrics at
/metrics. docs/api.md is the reference.

Configuration comes from the YAML file, then the flags given override it.
SIGINT or SIGTERM shuts down gracefully: requests in flight finish or get
503, jobs are cancelled.

Examples:
  atoll serve --model resnet50 --model bert-base:8 --job resnet50-train
  atoll serve --config atoll.yaml --listen 127.0.0.1:9000
  atoll serve --model resnet50 --grpc-listen :8001   # gRPC beside HTTP
  atoll serve --model resnet50 --devices all --backend cuda   # every GPU: a replica on each
  atoll serve --model resnet50 --job resnet50-train --standby   # a BE fault costs no HP request
  atoll serve --config atoll.yaml --print-config
  curl -s localhost:8000/v2/models/resnet50
`

// newEngine builds the daemon's engine (a variable so tests can replace it;
// nil makes serve fail with errEngineNotBuilt).
var newEngine = func(ctx context.Context, cfg server.Config, log *slog.Logger) (server.Engine, error) {
	available := 1
	if cfg.Backend == "cuda" {
		if inv, err := cuda.Inventory(); err == nil {
			available = len(inv)
		}
	} else if strings.TrimSpace(cfg.Devices) == "all" {
		log.Info(`--devices all on the simulator: one simulated GPU (name devices, e.g. --devices 0,1, for several; --backend cuda for the real GPUs)`)
	}
	return server.NewEngines(ctx, cfg, available)
}

var errEngineNotBuilt = errors.New("the engine is not built: this atoll has the HTTP API but no scheduler engine behind it")

func init() {
	register(command{name: "serve", summary: "run the inference daemon (Open Inference Protocol v2, jobs, /metrics)", run: runServe})
}

// modelFlag collects --model name[:batch[:class[:max_queue]]].
type modelFlag []server.ModelConfig

func (m *modelFlag) String() string { return "" }

func (m *modelFlag) Set(s string) error {
	parts := strings.Split(s, ":")
	if len(parts) > 4 || parts[0] == "" {
		return fmt.Errorf("want name[:batch[:HP|BE[:max_queue]]], got %q", s)
	}
	mc := server.ModelConfig{Name: parts[0]}
	var err error
	if len(parts) > 1 && parts[1] != "" {
		if mc.Batch, err = strconv.Atoi(parts[1]); err != nil {
			return fmt.Errorf("batch %q in %q is not an integer", parts[1], s)
		}
	}
	if len(parts) > 2 {
		mc.DefaultClass = server.Class(strings.ToUpper(parts[2]))
	}
	if len(parts) > 3 {
		if mc.MaxQueue, err = strconv.Atoi(parts[3]); err != nil {
			return fmt.Errorf("max_queue %q in %q is not an integer", parts[3], s)
		}
	}
	*m = append(*m, mc)
	return nil
}

// jobFlag collects --job model[:batch].
type jobFlag []server.JobModelConfig

func (j *jobFlag) String() string { return "" }

func (j *jobFlag) Set(s string) error {
	name, batch, ok := strings.Cut(s, ":")
	jc := server.JobModelConfig{Model: name}
	if name == "" {
		return fmt.Errorf("want model[:batch], got %q", s)
	}
	if ok {
		b, err := strconv.Atoi(batch)
		if err != nil {
			return fmt.Errorf("batch %q in %q is not an integer", batch, s)
		}
		jc.Batch = b
	}
	*j = append(*j, jc)
	return nil
}

func runServe(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "serve", serveHelp)
	def := server.DefaultConfig()
	var (
		configFile  = fs.String("config", "", "YAML config `file` (flags override it)")
		printConfig = fs.Bool("print-config", false, "print the effective config as YAML and exit")
		listen      = fs.String("listen", def.Listen, "HTTP listen `address`")
		grpcListen  = fs.String("grpc-listen", def.GRPCListen, "gRPC listen `address` (inference.GRPCInferenceService); empty: no gRPC")
		backend     = fs.String("backend", def.Backend, "sim (simulated GPU) or cuda (the GPUs of --devices)")
		gpuSpec     = fs.String("gpu", def.GPU, "simulated GPU `spec` (backend sim)")
		policy      = fs.String("policy", def.Policy, "scheduling `policy` (atoll policies)")
		levels      = fs.Int("priority-levels", def.Priority.Levels, "number of request priority levels (1 is the highest)")
		hpMax       = fs.Int("hp-max", def.Priority.HPMax, "priorities 1..`N` are HP, the rest BE")
		bodyLimit   = fs.Int64("body-limit", def.BodyLimit, "largest request body, in `bytes` (the whole body: JSON part and binary tensor data)")
		reqTimeout  = fs.Duration("request-timeout", def.RequestTimeout, "bound on one inference request")
		shutTimeout = fs.Duration("shutdown-timeout", def.ShutdownTimeout, "bound on each drain phase at shutdown")
		logLevel    = fs.String("log-level", def.Log.Level, "debug, info, warn or error")
		logFormat   = fs.String("log-format", def.Log.Format, "text or json")
		devices     = fs.String("devices", def.Devices, "GPUs to serve on: `0`, a list 0,1,3 or all (each gets a scheduler and a replica of every model)")
		standbyOn   = fs.Bool("standby", def.Standby, "serve through two worker processes, one a warm standby that takes over when the other's device fails (a BE kernel fault): no HP request lost")
		models      modelFlag
		jobs        jobFlag
	)
	fs.Var(&jobs, "job", "let BE jobs run `model[:batch]` (repeatable; replaces the config's jobs)")
	fs.Var(&models, "model", "serve `name[:batch[:HP|BE[:max_queue]]]` (repeatable; replaces the config's models)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "atoll serve: unexpected arguments %q\n", fs.Args())
		return errUsage
	}

	cfg := def
	if *configFile != "" {
		f, err := os.Open(*configFile)
		if err != nil {
			return fmt.Errorf("%w (give --config an existing YAML file)", err)
		}
		cfg, err = server.ParseConfig(f, *configFile)
		f.Close()
		if err != nil {
			return err
		}
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "listen":
			cfg.Listen = *listen
		case "grpc-listen":
			cfg.GRPCListen = *grpcListen
		case "backend":
			cfg.Backend = *backend
		case "gpu":
			cfg.GPU = *gpuSpec
		case "policy":
			cfg.Policy = *policy
		case "priority-levels":
			cfg.Priority.Levels = *levels
		case "hp-max":
			cfg.Priority.HPMax = *hpMax
		case "body-limit":
			cfg.BodyLimit = *bodyLimit
		case "request-timeout":
			cfg.RequestTimeout = *reqTimeout
		case "shutdown-timeout":
			cfg.ShutdownTimeout = *shutTimeout
		case "log-level":
			cfg.Log.Level = *logLevel
		case "log-format":
			cfg.Log.Format = *logFormat
		case "devices":
			cfg.Devices = *devices
		case "standby":
			cfg.Standby = *standbyOn
		case "model":
			cfg.Models = models
		case "job":
			cfg.Jobs = jobs
		}
	})
	if err := cfg.Validate(); err != nil {
		return err
	}
	if *printConfig {
		out, err := cfg.Marshal()
		if err != nil {
			return err
		}
		_, err = e.stdout.Write(out)
		return err
	}

	log, err := cfg.Log.NewLogger(e.stderr)
	if err != nil {
		return err
	}
	if gen := os.Getenv(standby.EnvWorker); gen != "" {
		log = log.With("worker", gen)
	}
	if cfg.Standby {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--standby runs this binary as its workers, and cannot find it: %w", err)
		}
		return standby.Serve(ctx, cfg, standby.ServeOptions{Exe: exe, Logger: log, Output: e.stderr})
	}
	if newEngine == nil {
		return errEngineNotBuilt
	}
	eng, err := newEngine(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("starting the engine: %w", err)
	}
	opts := []server.RunOption{server.WithLogger(log), server.WithVersion(version)}
	if src, ok := nvmlSource(); ok {
		opts = append(opts, server.WithGPUSource(src))
	} else {
		log.Info("no NVML: /metrics has no GPU utilization, memory or power series")
	}
	return server.Run(ctx, cfg, eng, opts...)
}

// nvmlSource adapts cuda.Inventory to server.GPUSource when NVML answers.
func nvmlSource() (server.GPUSource, bool) {
	if _, err := cuda.Inventory(); err != nil {
		return nil, false
	}
	return server.GPUSourceFunc(func() ([]server.GPUSample, error) {
		inv, err := cuda.Inventory()
		if err != nil {
			return nil, err
		}
		out := make([]server.GPUSample, len(inv))
		for i, d := range inv {
			out[i] = server.GPUSample{
				Index: d.Index, Name: d.Name, UUID: d.UUID,
				UtilGPU:    float64(d.UtilGPU),
				MemoryUsed: d.MemoryUsed, MemoryTotal: d.MemoryTotal,
				PowerDraw: d.PowerDraw, PowerLimit: d.PowerLimit,
			}
		}
		return out, nil
	}), true
}
