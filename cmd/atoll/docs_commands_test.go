package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// docCommand is one atoll command line in a code block of README.md or
// docs/*.md: the command, the rest of the line without its comment, and
// where it stands.
type docCommand struct {
	file string // base name
	line int
	text string   // the line as written, trimmed
	env  []string // VAR=value assignments before the command
	cmd  string   // e.g. "bench"
	rest string   // the arguments, comment removed
}

// documentedCommands lists every atoll command line of the docs' code blocks.
func documentedCommands(t *testing.T) []docCommand {
	t.Helper()
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	lineRE := regexp.MustCompile(`^\s*(?:\$ )?((?:[A-Z][A-Z0-9_]*=\S+ +)*)(?:\./)?(?:bin/|/tmp/)?atoll ([a-z][a-z-]*)(.*)$`)
	var out []docCommand
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		inCode, n := false, 0
		for sc.Scan() {
			n++
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
				continue
			}
			if !inCode {
				continue
			}
			m := lineRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			rest := m[3]
			if i := strings.Index(rest, "#"); i >= 0 {
				rest = rest[:i]
			}
			out = append(out, docCommand{file: filepath.Base(f), line: n, text: strings.TrimSpace(line), env: strings.Fields(m[1]), cmd: m[2], rest: rest})
		}
		fh.Close()
	}
	if len(out) < 20 {
		t.Fatalf("only %d documented command lines found: the extraction is broken", len(out))
	}
	return out
}

// TestDocumentedCommandsExist: every atoll command line in a code block of
// README.md or docs/*.md names a command this atoll has and only flags
// that command (or its subcommand) defines, so a renamed or removed flag
// cannot linger in the docs.
func TestDocumentedCommandsExist(t *testing.T) {
	flagRE := regexp.MustCompile(`(?:^|\s)--?([a-z][a-z0-9-]*)`)
	helps := map[string]string{}
	help := func(args ...string) (string, bool) {
		key := strings.Join(args, " ")
		if h, ok := helps[key]; ok {
			return h, h != ""
		}
		var out, errb bytes.Buffer
		rc := run(context.Background(), &env{stdout: &out, stderr: &errb}, append(args, "--help"))
		h := out.String() + errb.String()
		if rc != 0 {
			h = ""
		}
		helps[key] = h
		return h, h != ""
	}
	cmds := documentedCommands(t)
	for _, d := range cmds {
		text, ok := help(d.cmd)
		if !ok {
			t.Errorf("%s:%d: %q: atoll has no command %q", d.file, d.line, d.text, d.cmd)
			continue
		}
		if fields := strings.Fields(d.rest); len(fields) > 0 && !strings.HasPrefix(fields[0], "-") {
			if sub, ok := help(d.cmd, fields[0]); ok {
				text += sub
			}
		}
		for _, fm := range flagRE.FindAllStringSubmatch(d.rest, -1) {
			if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(fm[1]) + `(\s|$)`).MatchString(text) {
				t.Errorf("%s:%d: %q: atoll %s has no flag -%s", d.file, d.line, d.text, d.cmd, fm[1])
			}
		}
	}
	t.Logf("%d documented command lines checked", len(cmds))
}

// placeholders are the arguments the reader fills in, and what
// TestDocumentedCommandsRun puts there: the committed GPU matrix and the
// simulator's run of it. (net.onnx is not one: the scratch directory holds
// a small exported CNN under that name.)
var placeholders = map[string]string{
	"DIR":     "results/matrix-h100-g8",
	"GPU-DIR": "results/matrix-h100-g8",
	"SIM-DIR": "results/matrix-sim-g8",
}

// filled is args with each placeholder replaced.
func filled(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if v, ok := placeholders[a]; ok {
			out[i] = v
		}
	}
	return out
}

// notRunHere says why a documented command line is not executed by
// TestDocumentedCommandsRun ("" runs it): it needs a GPU or a daemon (the
// daemon test drives those).
func notRunHere(d docCommand) string {
	args := " " + d.rest + " "
	switch {
	case strings.Contains(args, "--backend cuda"), d.cmd == "selftest",
		d.cmd == "probe" && !strings.Contains(args, "--backend sim"),
		d.cmd == "profile" && !strings.Contains(args, "--backend sim") && !strings.Contains(args, "--print-ncu-command"),
		d.cmd == "corun" && !strings.Contains(args, "--backend sim"):
		return "needs a GPU"
	case d.cmd == "serve", d.cmd == "load", d.cmd == "jobs":
		return "runs against a daemon: TestDocumentedDaemonCommandsRun"
	}
	return ""
}

// TestDocumentedCommandsRun: every documented command line that needs no
// GPU and no daemon runs as written on the simulator (placeholders filled
// in) and exits 0, in a scratch directory holding the repository's bench/
// and profiles/ and copies of results/ and docs/ (some write there: the
// matrix line resumes the committed simulator run); /tmp/ paths go to the
// test's own.
// The commands run as a user runs them, from a binary built from this tree
// (`go build`, without the race detector: under it the demo alone took a
// minute of CI; the packages it runs are race-tested by their own tests).
func TestDocumentedCommandsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the documented commands on the simulator")
	}
	t.Parallel() // mostly waiting on its own processes
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := buildAtoll(t)
	cmds := documentedCommands(t)
	dir, tmp := t.TempDir(), t.TempDir()
	for _, p := range []string{"bench", "profiles"} {
		if err := os.Symlink(filepath.Join(repo, p), filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"docs", "results"} {
		if err := os.CopyFS(filepath.Join(dir, p), os.DirFS(filepath.Join(repo, p))); err != nil {
			t.Fatal(err)
		}
	}
	onnx, err := os.ReadFile(filepath.Join(repo, "models/testdata/onnx/legacy/tiny-cnn.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "net.onnx"), onnx, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "ATOLL_PROFILES="+t.TempDir()) // an empty profile store: what a fresh clone has
	ran := 0
	for _, d := range cmds {
		if why := notRunHere(d); why != "" {
			t.Logf("%s:%d: not run here (%s): %s", d.file, d.line, why, d.text)
			continue
		}
		args := append([]string{d.cmd}, filled(strings.Fields(strings.ReplaceAll(d.rest, "/tmp/", tmp+"/")))...)
		runDocCommand(t, bin, dir, env, d, args)
		ran++
	}
	if ran < 8 {
		t.Errorf("only %d documented commands ran: the selection is broken", ran)
	}
}

// runDocCommand runs bin with args in dir, under env plus the line's own
// VAR=value prefixes, and fails the test with its output when it exits
// non-zero.
func runDocCommand(t *testing.T, bin, dir string, env []string, d docCommand, args []string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := exec.Command(bin, args...)
	c.Dir, c.Env, c.Stdout, c.Stderr = dir, append(slices.Clone(env), d.env...), &out, &errb
	start := time.Now()
	if err := c.Run(); err != nil {
		t.Errorf("%s:%d: %q: %v:\n%s%s", d.file, d.line, d.text, err, out.String(), errb.String())
		return
	}
	t.Logf("%s:%d: ran in %v: %s", d.file, d.line, time.Since(start).Round(time.Millisecond), d.text)
}

// buildAtoll builds this tree's atoll, without the race detector, and
// returns its path: what a user runs. The tests that run it share one
// build (TestMain removes it).
func buildAtoll(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "atoll-bin-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "atoll")
		if out, err := exec.Command("go", "build", "-o", built.path, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

var built struct {
	once      sync.Once
	dir, path string
	err       error
}

func removeBuiltAtoll() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}
