package standby

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"atoll/server"
)

// ServeOptions are Serve's.
type ServeOptions struct {
	// Exe is the atoll binary the workers run (`serve --config`).
	Exe string
	// Logger receives the supervisor's lines; Output the workers' (their
	// lines carry worker=N).
	Logger *slog.Logger
	Output io.Writer
	// Start, when set, starts workers instead of Exe (tests).
	Start StartFunc
	// Listener, when set, is served instead of listening on cfg.Listen;
	// GRPCListener likewise for cfg.GRPCListen (it serves gRPC).
	Listener     net.Listener
	GRPCListener net.Listener
	// Started is called with the address once the API is served.
	Started func(net.Addr)
}

// Serve runs cfg's daemon in standby form until ctx ends: the HTTP API on
// cfg.Listen (TLS and restrictions as configured), a serving worker and a
// warm standby behind it. It returns an error when the first worker fails
// to start. On shutdown the API stops taking requests and waits up to
// cfg.ShutdownTimeout for those in flight, then the workers shut down as a
// daemon does (SIGTERM).
func Serve(ctx context.Context, cfg server.Config, opt ServeOptions) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	restricted, err := cfg.Restrictions()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "atoll-standby-")
	if err != nil {
		return fmt.Errorf("standby: a directory for the workers' sockets: %w", err)
	}
	defer os.RemoveAll(dir)
	start := opt.Start
	if start == nil {
		out := opt.Output
		if out == nil {
			out = os.Stderr
		}
		start = Exec(opt.Exe, cfg, dir, out)
	}
	sup := New(Options{
		Start: start, Logger: log, BodyLimit: cfg.BodyLimit,
		RequestTimeout: cfg.RequestTimeout, MaxInflight: cfg.InflightLimit(),
	})
	h, err := server.Guard(restricted, sup)
	if err != nil {
		return err
	}
	gguard, err := server.GuardGRPC(restricted)
	if err != nil {
		return err
	}
	ln := opt.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return fmt.Errorf("standby: listen on %s: %w (is another daemon running? pick another --listen)", cfg.Listen, err)
		}
	}
	srv := server.HTTPServer(cfg, h, log)
	gln := opt.GRPCListener
	if gln == nil && cfg.GRPCListen != "" {
		if gln, err = net.Listen("tcp", cfg.GRPCListen); err != nil {
			ln.Close()
			return fmt.Errorf("standby: listen on %s: %w (is another daemon running? pick another --grpc-listen)", cfg.GRPCListen, err)
		}
	}
	var gopts []grpc.ServerOption
	serveErr := make(chan error, 2)
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			ln.Close()
			if gln != nil {
				gln.Close()
			}
			return fmt.Errorf("%w: tls_cert/tls_key: %v", server.ErrConfig, err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(srv.TLSConfig)))
		go func() { serveErr <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { serveErr <- srv.Serve(ln) }()
	}
	var gs *grpc.Server
	if gln != nil {
		gs = sup.grpcServer(gguard, gopts...)
		go func() {
			if err := gs.Serve(gln); err != nil {
				serveErr <- err
			}
		}()
		log.Info("standby: serving gRPC through workers", "addr", gln.Addr().String())
	}
	log.Info("standby: serving through workers", "addr", ln.Addr().String(), "tls", cfg.TLSCert != "", "backend", cfg.Backend, "policy", cfg.Policy)
	if opt.Started != nil {
		opt.Started(ln.Addr())
	}
	stop := func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		if gs != nil {
			stopped := make(chan struct{})
			go func() { gs.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-sctx.Done():
				gs.Stop()
			}
		}
		err := srv.Shutdown(sctx)
		// Each worker drains in two phases of shutdown_timeout.
		sup.Close(2*cfg.ShutdownTimeout + 5*time.Second)
		srv.Close()
		<-serveErr
		return err
	}
	if err := sup.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return stop() // shut down while the first worker started
		}
		return errors.Join(fmt.Errorf("standby: the first worker: %w", err), stop())
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
		if err := stop(); err != nil {
			log.Warn("requests still in flight at the shutdown timeout were cut", "err", err)
		}
		log.Info("stopped")
		return nil
	case err := <-serveErr:
		if gs != nil {
			gs.Stop()
		}
		srv.Close()
		sup.Close(2*cfg.ShutdownTimeout + 5*time.Second)
		return fmt.Errorf("standby: serving: %w", err)
	}
}
