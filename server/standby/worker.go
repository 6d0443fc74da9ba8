package standby

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"atoll/server"
)

// Worker is one daemon the supervisor serves through.
type Worker struct {
	// Gen numbers the workers in the order they were started, from 1.
	Gen int
	// URL is the base URL Client reaches the worker's HTTP API by.
	URL    string
	Client *http.Client
	// Exited is closed once the worker is gone (its process exited).
	Exited <-chan struct{}
	// Stop asks the worker to shut down gracefully; Kill ends it at once.
	// Both return without waiting for Exited.
	Stop func()
	Kill func()

	// GRPCTarget is the worker's gRPC address for grpc.NewClient
	// ("unix:///…"); empty when it serves no gRPC.
	GRPCTarget string

	prog     progress // what it did lately (stall.go)
	grpcOnce sync.Once
	grpcConn *grpc.ClientConn
	grpcErr  error
}

// StartFunc starts worker gen and returns as soon as it runs (not when it
// is ready: the supervisor polls its readiness).
type StartFunc func(ctx context.Context, gen int) (*Worker, error)

// EnvWorker is set, to the worker's Gen, in the environment of the worker
// processes Exec starts (`atoll serve` tags its log lines with it).
const EnvWorker = "ATOLL_STANDBY_WORKER"

// WorkerConfig is the configuration worker gen serves with: cfg's models,
// jobs, policy and limits, on Unix sockets in dir (gRPC's too when cfg
// serves gRPC); no TLS or restrictions (the supervisor applies those); no device reopen (restarts
// 0: after a device failure the standby serves); the fault drill only in
// the first worker, so that a drill fires once.
func WorkerConfig(cfg server.Config, gen int, dir string) server.Config {
	w := cfg
	w.Listen = "unix:" + socketPath(dir, gen)
	if cfg.GRPCListen != "" {
		w.GRPCListen = "unix:" + grpcSocketPath(dir, gen)
	}
	w.TLSCert, w.TLSKey = "", ""
	w.Restricted = nil
	w.Standby = false
	w.Restarts = 0
	if gen > 1 {
		w.FaultDrill = server.FaultDrill{}
	}
	return w
}

func socketPath(dir string, gen int) string {
	return filepath.Join(dir, "worker-"+strconv.Itoa(gen)+".sock")
}

func grpcSocketPath(dir string, gen int) string {
	return filepath.Join(dir, "worker-"+strconv.Itoa(gen)+".grpc.sock")
}

// grpcTarget is worker gen's gRPC address for grpc.NewClient, or "" when
// cfg serves no gRPC.
func grpcTarget(cfg server.Config, dir string, gen int) string {
	if cfg.GRPCListen == "" {
		return ""
	}
	return "unix://" + grpcSocketPath(dir, gen)
}

// Exec starts workers as processes: exe (the atoll binary) with `serve
// --config` of WorkerConfig written to dir, their output to out. A worker
// dies with the supervisor (Linux: the parent-death signal).
func Exec(exe string, cfg server.Config, dir string, out io.Writer) StartFunc {
	return func(ctx context.Context, gen int) (*Worker, error) {
		wc := WorkerConfig(cfg, gen, dir)
		data, err := wc.Marshal()
		if err != nil {
			return nil, err
		}
		file := filepath.Join(dir, "worker-"+strconv.Itoa(gen)+".yaml")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			return nil, fmt.Errorf("standby: writing worker %d's configuration: %w", gen, err)
		}
		cmd := exec.Command(exe, "serve", "--config", file)
		cmd.Stdout, cmd.Stderr = out, out
		cmd.Env = append(os.Environ(), EnvWorker+"="+strconv.Itoa(gen))
		dieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("standby: starting worker %d (%s serve): %w", gen, exe, err)
		}
		exited := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(exited)
		}()
		signal := func(s os.Signal) func() {
			return func() { _ = cmd.Process.Signal(s) }
		}
		return &Worker{
			Gen: gen, URL: "http://worker-" + strconv.Itoa(gen), Client: UnixClient(socketPath(dir, gen)),
			Exited: exited, Stop: signal(syscall.SIGTERM), Kill: signal(syscall.SIGKILL),
			GRPCTarget: grpcTarget(cfg, dir, gen),
		}, nil
	}
}

// UnixClient is an HTTP client whose every connection goes to the Unix
// socket at path, whatever the URL's host.
func UnixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		// A ResNet-50 request is 602 KB: written 4 KB at a time (the
		// default) it costs 150 socket writes.
		WriteBufferSize: 256 << 10,
		ReadBufferSize:  64 << 10,
	}}
}

// get fetches path from w within timeout; the body is read and closed.
func (w *Worker) get(ctx context.Context, path string, timeout time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.URL+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := w.Client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, body, err
}

// exited reports whether the worker is gone.
func (w *Worker) exited() bool {
	select {
	case <-w.Exited:
		return true
	default:
		return false
	}
}

// awaitReady polls the worker's readiness every 20 ms until it is ready,
// it exits, or timeout passes.
func (w *Worker) awaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if code, _, err := w.get(ctx, "/v2/health/ready", time.Second); err == nil && code == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("standby: worker %d not ready after %v", w.Gen, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.Exited:
			return fmt.Errorf("standby: worker %d exited before it was ready (its log is above)", w.Gen)
		case <-tick.C:
		}
	}
}
