package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestDocumentedDaemonCommandsRun runs the documented `atoll serve`,
// `atoll load` and `atoll jobs` lines and the docs' curl examples that need
// no GPU, from a binary built from this tree, on the simulator: each serve
// line starts as written (on a free port instead of its own) and must
// become ready; `--config atoll.yaml` is the example configuration of
// docs/api.md, written out as the reader would; each load and jobs line
// runs as written against one daemon serving the models and jobs those
// lines name, with --url pointed at it and a load's --duration cut to
// 1 s, its --warmup to 0 and its --timeout to 2 s (a documented 60 s soak stays a soak in the docs;
// here it must start, send and report); each ```sh block that talks to
// localhost:8000 runs in bash against that daemon (one with the docs'
// bearer tokens where the block sends one), every curl failing on an HTTP
// error. net.onnx is a small exported CNN (the ONNX fixtures);
// arrivals.txt a short trace.
func TestDocumentedDaemonCommandsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts daemons on the simulator")
	}
	t.Parallel() // mostly waiting on its own processes
	bin := buildAtoll(t)
	dir := t.TempDir()
	onnx, err := os.ReadFile("../../models/testdata/onnx/legacy/tiny-cnn.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "net.onnx"), onnx, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "arrivals.txt"), []byte("0\n100ms\n200ms\n300ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "atoll.yaml"), []byte(documentedConfig(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "ATOLL_PROFILES="+t.TempDir())
	run := func(d docCommand, args []string) { runDocCommand(t, bin, dir, env, d, args) }
	type server struct {
		d    docCommand
		addr string
		args []string
	}
	var clients []docCommand
	var servers []server
	served, ran := 0, 0
	for _, d := range documentedCommands(t) {
		args := strings.Fields(strings.TrimSuffix(strings.TrimSpace(d.rest), "&"))
		switch {
		case d.cmd != "serve" && d.cmd != "load" && d.cmd != "jobs",
			strings.Contains(d.rest, "--backend cuda"):
			continue
		case strings.Contains(d.rest, "--print-config"):
			run(d, append([]string{"serve"}, args...))
			ran++
		case d.cmd == "serve":
			addr := freeAddr(t)
			args = setFlag(args, "--listen", addr)
			if hasFlag(args, "--config") { // the example config serves gRPC on :8001
				args = setFlag(args, "--grpc-listen", freeAddr(t))
			}
			servers = append(servers, server{d, addr, append([]string{"serve"}, args...)})
		default:
			clients = append(clients, d)
		}
	}
	// The serve lines start one after another, beside the client lines.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, sv := range servers {
			stop := startDaemon(t, bin, dir, append(slices.Clone(env), sv.d.env...), sv.args)
			if err := waitReady(sv.addr, 90*time.Second); err != nil {
				t.Errorf("%s:%d: %q: %v", sv.d.file, sv.d.line, sv.d.text, err)
			} else {
				t.Logf("%s:%d: started and became ready: %s", sv.d.file, sv.d.line, sv.d.text)
				served++
			}
			stop()
		}
	}()
	defer wg.Wait()
	// One daemon for the client lines: every model and job they name.
	addr := freeAddr(t)
	// Queues of 2: the simulator computes outputs on the CPU (0.2-0.3 s a
	// request here), so the documented rates are mostly refused with 503
	// and no backlog outlives a line.
	stop := startDaemon(t, bin, dir, env, []string{"serve", "--listen", addr,
		"--model", "resnet50:1:HP:2", "--model", "mobilenetv2:1:HP:2", "--model", "distilbert:1:HP:2",
		"--job", "vgg19:1", "--job", "resnet50-train:32"})
	defer stop()
	// The docs' bearer tokens: /etc/atoll/ is the scratch directory.
	if err := os.WriteFile(filepath.Join(dir, "admin.token"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	authYAML := "restricted:\n  - groups: [jobs, metrics]\n    token_file: " + filepath.Join(dir, "admin.token") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "auth.yaml"), []byte(authYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	authAddr := freeAddr(t)
	stopAuth := startDaemon(t, bin, dir, env, []string{"serve", "--config", "auth.yaml", "--listen", authAddr, "--model", "distilbert"})
	defer stopAuth()
	for _, a := range []string{addr, authAddr} {
		if err := waitReady(a, 90*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// The shell blocks first: the jobs block's job-1 is its own submission.
	blocks := 0
	for _, b := range documentedShellBlocks(t) {
		target := addr
		if strings.Contains(b.text, "Authorization") {
			target = authAddr
		}
		// set -e without pipefail: a reader's `| head` may close a pipe early.
		script := "set -e\ncurl() { command curl --fail-with-body \"$@\"; }\n" +
			strings.ReplaceAll(strings.ReplaceAll(b.text, "localhost:8000", target), "/etc/atoll/", dir+"/")
		var out bytes.Buffer
		c := exec.Command("bash", "-c", script)
		c.Dir, c.Env, c.Stdout, c.Stderr = dir, env, &out, &out
		if err := c.Run(); err != nil {
			t.Errorf("%s:%d: the shell block failed: %v:\n%s\n--- output:\n%.2000s", b.file, b.line, err, b.text, out.String())
			continue
		}
		t.Logf("%s:%d: shell block ran:\n%.600s", b.file, b.line, out.String())
		blocks++
	}
	for _, d := range clients {
		args := strings.Fields(d.rest)
		args = setFlag(args, "--url", "http://"+addr)
		if d.cmd == "load" {
			if !hasFlag(args, "--trace") {
				args = setFlag(args, "--duration", "1s")
			}
			args = setFlag(args, "--warmup", "0")
			args = setFlag(args, "--timeout", "2s")
		}
		run(d, append([]string{d.cmd}, args...))
		ran++
	}
	wg.Wait()
	t.Logf("%d serve lines started, %d load, jobs and print-config lines and %d shell blocks ran", served, ran, blocks)
	if served < 3 || ran < 5 || blocks < 3 {
		t.Errorf("only %d serve lines, %d client lines and %d shell blocks: the selection is broken", served, ran, blocks)
	}
}

// docBlock is one ```sh code block of the docs: its text and where it starts.
type docBlock struct {
	file string
	line int
	text string
}

// documentedShellBlocks lists the ```sh blocks of README.md and docs/*.md
// that talk to a daemon on localhost:8000 with curl.
func documentedShellBlocks(t *testing.T) []docBlock {
	t.Helper()
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	var out []docBlock
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cur *docBlock
		var text []string
		for i, line := range strings.Split(string(raw), "\n") {
			trimmed := strings.TrimSpace(line)
			switch {
			case cur == nil && (trimmed == "```sh" || trimmed == "```bash"):
				cur, text = &docBlock{file: filepath.Base(f), line: i + 1}, nil
			case cur != nil && trimmed == "```":
				cur.text = strings.Join(text, "\n")
				if strings.Contains(cur.text, "curl ") && strings.Contains(cur.text, "localhost:8000") {
					out = append(out, *cur)
				}
				cur = nil
			case cur != nil:
				text = append(text, line)
			}
		}
	}
	return out
}

// documentedConfig is the example configuration of docs/api.md (the yaml
// block under "## Configuration"), as a reader would save it.
func documentedConfig(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(raw), "\n## Configuration\n")
	if ok {
		_, after, ok = strings.Cut(after, "```yaml\n")
	}
	body, _, ok2 := strings.Cut(after, "\n```")
	if !ok || !ok2 || !strings.Contains(body, "models:") {
		t.Fatal("docs/api.md: no example configuration (a yaml block under ## Configuration)")
	}
	return body + "\n"
}

// setFlag sets flag to value in args (replacing its value, or appending).
func setFlag(args []string, flag, value string) []string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			args[i+1] = value
			return args
		}
		if strings.HasPrefix(a, flag+"=") {
			args[i] = flag + "=" + value
			return args
		}
	}
	return append(args, flag, value)
}

func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startDaemon starts atoll with args in dir and returns a stop that sends
// it SIGTERM and waits (killing it after 20 s).
func startDaemon(t *testing.T, bin, dir string, env, args []string) func() {
	t.Helper()
	var logs bytes.Buffer
	c := exec.Command(bin, args...)
	c.Dir, c.Env, c.Stdout, c.Stderr = dir, env, &logs, &logs
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	stopped := false
	return func() {
		if stopped {
			return
		}
		stopped = true
		_ = c.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("atoll %s: %v\n%s", strings.Join(args, " "), err, logs.String())
			}
		case <-time.After(20 * time.Second):
			_ = c.Process.Kill()
			t.Errorf("atoll %s did not stop within 20 s of SIGTERM\n%s", strings.Join(args, " "), logs.String())
		}
	}
}

// waitReady polls the daemon's readiness until it answers 200.
func waitReady(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/v2/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not ready at %s within %v", addr, limit)
}
