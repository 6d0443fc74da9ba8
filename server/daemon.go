package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// RunOption adjusts Run.
type RunOption func(*runOptions)

type runOptions struct {
	logger   *slog.Logger
	listener net.Listener
	grpcLn   net.Listener
	gpus     GPUSource
	version  string
	started  func(addr net.Addr)
}

// WithLogger sets the daemon's logger (default: slog.Default()).
func WithLogger(l *slog.Logger) RunOption { return func(o *runOptions) { o.logger = l } }

// WithListener serves on l instead of listening on cfg.Listen. Run closes it.
func WithListener(l net.Listener) RunOption { return func(o *runOptions) { o.listener = l } }

// WithGRPCListener serves the gRPC API on l (whatever cfg.GRPCListen
// says). Run closes it.
func WithGRPCListener(l net.Listener) RunOption { return func(o *runOptions) { o.grpcLn = l } }

// WithGPUSource adds GPU utilization, memory and power series to /metrics.
func WithGPUSource(s GPUSource) RunOption { return func(o *runOptions) { o.gpus = s } }

// WithVersion sets the version GET /v2 reports.
func WithVersion(v string) RunOption { return func(o *runOptions) { o.version = v } }

// WithStarted calls f with the listening address once the daemon serves.
func WithStarted(f func(addr net.Addr)) RunOption { return func(o *runOptions) { o.started = f } }

// Run serves the API over eng until ctx ends, then shuts down gracefully:
// the handler refuses new work (503, not ready), the HTTP server stops
// accepting and waits up to cfg.ShutdownTimeout for in-flight requests,
// then eng.Close (bounded by the same timeout again) finishes or fails
// everything still in flight so that every waiting handler answers, and
// Run returns after those answers are written. Run owns eng from the call
// on: it always closes it. With cfg.GRPCListen (or WithGRPCListener) the
// gRPC API serves beside HTTP over the same handler and drains with it:
// GracefulStop within the first timeout, Stop once the answers are out.
func Run(ctx context.Context, cfg Config, eng Engine, opts ...RunOption) (err error) {
	o := runOptions{logger: slog.Default(), version: "dev"}
	for _, f := range opts {
		f(&o)
	}
	log := o.logger
	closeEngine := func() error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		return eng.Close(cctx)
	}
	if err := cfg.Validate(); err != nil {
		return errors.Join(err, closeEngine())
	}
	restricted, err := cfg.Restrictions()
	if err != nil {
		return errors.Join(err, closeEngine())
	}
	var tlsCfg *tls.Config
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return errors.Join(fmt.Errorf("%w: tls_cert/tls_key: %v", ErrConfig, err), closeEngine())
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln := o.listener
	if ln == nil {
		ln, err = listen(cfg.Listen)
		if err != nil {
			return errors.Join(fmt.Errorf("server: listen on %s: %w (is another daemon running? pick another --listen)", cfg.Listen, err), closeEngine())
		}
	}
	gln := o.grpcLn
	if gln == nil && cfg.GRPCListen != "" {
		gln, err = listen(cfg.GRPCListen)
		if err != nil {
			ln.Close()
			return errors.Join(fmt.Errorf("server: listen on %s: %w (is another daemon running? pick another --grpc-listen)", cfg.GRPCListen, err), closeEngine())
		}
	}

	reg := prometheus.NewRegistry()
	metrics := NewMetrics(eng, o.gpus)
	if err := metrics.Register(reg); err != nil {
		ln.Close()
		if gln != nil {
			gln.Close()
		}
		return errors.Join(fmt.Errorf("server: registering metrics: %w", err), closeEngine())
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h := NewHandler(eng, Options{
		Version:        o.version,
		Priority:       cfg.Priority,
		BodyLimit:      cfg.BodyLimit,
		RequestTimeout: cfg.RequestTimeout,
		Metrics:        metrics,
		MetricsHandler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}),
		Logger:         log,
		Restricted:     restricted,
		MaxInflight:    cfg.InflightLimit(),
	})
	srv := HTTPServer(cfg, h, log)

	serveErr := make(chan error, 1)
	if tlsCfg != nil {
		srv.TLSConfig = tlsCfg
		go func() { serveErr <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { serveErr <- srv.Serve(ln) }()
	}
	log.Info("serving", "addr", ln.Addr().String(), "tls", tlsCfg != nil, "backend", cfg.Backend, "policy", cfg.Policy, "models", len(eng.Models()))
	if w := streamsWarning(cfg); w != "" {
		log.Warn(w)
	}
	if d := cfg.FaultDrill; d.BELaunch > 0 {
		log.Warn("fault drill: BE kernel launch number "+fmt.Sprint(d.BELaunch)+" will fault on purpose (fault_drill in the configuration; remove it outside drills)", "kind", d.Kind)
	}
	if !isLoopback(ln.Addr()) {
		switch open := openGroups(restricted); {
		case len(open) > 0:
			log.Warn("the API is open beyond this host and "+strings.Join(open, ", ")+" have no authentication: anyone who reaches the port can use them; listen on 127.0.0.1 (--listen 127.0.0.1:8000), restrict them (restricted: in the config, docs/api.md), or put a proxy in front that guards them", "addr", ln.Addr().String())
		case tlsCfg == nil:
			log.Warn("the API's tokens travel unencrypted beyond this host: give tls_cert and tls_key, or put a TLS proxy in front", "addr", ln.Addr().String())
		}
	}
	// gRPC, when asked for, serves beside HTTP over the same handler state
	// (drain flag, in-flight count, metrics); gs stays nil otherwise.
	var gs *grpc.Server
	var grpcErr chan error
	if gln != nil {
		var extra []grpc.ServerOption
		if tlsCfg != nil {
			extra = append(extra, grpc.Creds(credentials.NewTLS(tlsCfg)))
		}
		gs = NewGRPCServer(h, extra...)
		grpcErr = make(chan error, 1)
		go func() { grpcErr <- gs.Serve(gln) }()
		log.Info("serving gRPC", "addr", gln.Addr().String())
	}
	if o.started != nil {
		o.started(ln.Addr())
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		// The listener failed under us: drain as on shutdown, report it.
		h.Drain()
		cerr := closeEngine()
		h.Wait()
		srv.Close()
		if gs != nil {
			gs.Stop()
			<-grpcErr
		}
		return errors.Join(fmt.Errorf("server: serving: %w", err), cerr)
	case err := <-grpcErr:
		h.Drain()
		cerr := closeEngine()
		h.Wait()
		srv.Close()
		<-serveErr
		gs.Stop()
		return errors.Join(fmt.Errorf("server: serving gRPC: %w", err), cerr)
	}

	log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	h.Drain()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	var grpcStopped chan struct{}
	if gs != nil {
		grpcStopped = make(chan struct{})
		go func() { gs.GracefulStop(); close(grpcStopped) }()
	}
	shutErr := srv.Shutdown(sctx)
	if gs != nil {
		select {
		case <-grpcStopped:
		case <-sctx.Done():
			shutErr = errors.Join(shutErr, fmt.Errorf("gRPC calls still in flight: %w", sctx.Err()))
		}
	}
	cancel()
	if shutErr != nil {
		log.Warn("in-flight requests outlived the shutdown timeout; the engine fails them now", "err", shutErr)
	}
	cerr := closeEngine()
	if cerr != nil {
		log.Error("engine close", "err", cerr)
	}
	// Handlers blocked in the engine answer once Close has failed their
	// requests; wait for those answers before dropping the connections.
	waited := make(chan struct{})
	go func() { h.Wait(); close(waited) }()
	select {
	case <-waited:
		// A handler's return precedes its response on the wire (net/http
		// flushes after it): let the connections go idle before closing.
		ictx, icancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = srv.Shutdown(ictx) // the listeners are closed already: only the wait matters
		icancel()
	case <-time.After(cfg.ShutdownTimeout):
		log.Error("handlers still running after the engine closed; dropping their connections")
	}
	srv.Close()
	<-serveErr // http.ErrServerClosed
	if gs != nil {
		// A gRPC handler's return precedes its status on the wire:
		// GracefulStop returns once those are out. Stop drops what is left.
		select {
		case <-grpcStopped:
		case <-time.After(cfg.ShutdownTimeout):
			log.Error("gRPC calls still running after the engine closed; dropping their connections")
		}
		gs.Stop()
		<-grpcStopped
		<-grpcErr // nil after GracefulStop
	}
	log.Info("stopped")
	if cerr != nil {
		return fmt.Errorf("server: closing the engine: %w", cerr)
	}
	return nil
}

// openGroups lists the API groups no restriction guards.
func openGroups(rs []Restriction) []string {
	var open []string
	for _, g := range APIGroups {
		guarded := false
		for _, r := range rs {
			guarded = guarded || slices.Contains(r.Groups, g)
		}
		if !guarded {
			open = append(open, g)
		}
	}
	return open
}

// listen listens on a Config.Listen address: host:port (TCP) or unix:PATH
// (a Unix socket, replacing a stale socket file at PATH).
func listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(path)
		}
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

// isLoopback reports whether a listener's address is reachable only from
// this host (a loopback TCP address or a Unix socket).
func isLoopback(a net.Addr) bool {
	if _, ok := a.(*net.UnixAddr); ok {
		return true
	}
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// HTTPServer is the http.Server the daemon's API runs on: header, body,
// write and idle timeouts for cfg (the write timeout outlasts
// request_timeout), a 64 KiB header bound, errors logged at warn. A proxy
// in front of daemons (server/standby) serves with the same.
func HTTPServer(cfg Config, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      cfg.RequestTimeout + 10*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// streamsWarnAt is the scheduler's client count from which the daemon
// warns on the GPU: each client has a stream of its own, and once work has
// been launched on 16 or more streams of a context every kernel there runs
// slower (gpu/cuda TestGPUStreamChurn; 12 streams, with the device's own
// two, left them as they were).
const streamsWarnAt = 14

// streamsWarning is what the daemon logs when cfg gives the scheduler so
// many clients that their streams slow every kernel on the GPU ("" when
// not): two clients per served model (HP requests, BE-class requests) and
// one per job model.
func streamsWarning(cfg Config) string {
	n := 2*len(cfg.Models) + len(cfg.Jobs)
	if cfg.Backend != "cuda" || n < streamsWarnAt {
		return ""
	}
	return fmt.Sprintf("%d models and %d job models give the scheduler %d streams: once work has run on 16 or more streams the GPU runs every kernel slower (cuBLASLt products 7 %%, atoll's own kernels 3-4 %% on an H200; docs/cuda.md, \"Streams are kept for reuse\"); serve fewer models or job models per daemon",
		len(cfg.Models), len(cfg.Jobs), n)
}
