package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"atoll/bench"
)

// TestSimulatedNoteMatchesResults: the figures the simulated demo prints
// are those of the committed GPU and simulated matrix runs.
func TestSimulatedNoteMatchesResults(t *testing.T) {
	// The whole matrix on each part's own machine's profiles.
	var gpuAll, simAll []*bench.MatrixCell
	for _, part := range []string{"all", "train", "bert"} {
		g, err := bench.ReadMatrixDir("../../results/onmachine2-" + part + "-h200")
		if err != nil {
			t.Fatal(err)
		}
		s, err := bench.ReadMatrixDir("../../results/matrix-sim-onmachine2-" + part + "-replay")
		if err != nil {
			t.Fatal(err)
		}
		gpuAll, simAll = append(gpuAll, g...), append(simAll, s...)
	}
	f := bench.FidelitySummary(gpuAll, simAll)
	want := []string{
		fmt.Sprintf("within 10 %% in %d of %d policy runs (median error %.0f %%)", f.Within, f.Runs, f.MedianP99*100),
		fmt.Sprintf("HP p50 off by a median %.0f %% and its BE throughput by a median %.0f %%", f.MedianP50*100, f.MedianBE*100),
		fmt.Sprintf("as the GPU did in %d of %d cells by HP p99 and %d of %d by BE", f.RankP99, f.Cells, f.RankBE, f.Cells),
	}
	seen := 0
	for _, p := range f.Policies {
		want = append(want, fmt.Sprintf("%s %d of %d (median error %.0f %%)", p.Policy, p.Within, p.Runs, p.MedianP99*100))
		seen++
	}
	if seen != 4 {
		t.Errorf("results/onmachine2-*-h200 have %d policies, want priority, orion, reef and atoll", seen)
	}
	// Across machines: the series on the built-in profiles.
	gpu, err := bench.ReadMatrixDir("../../results/matrix-h200-g8-events")
	if err != nil {
		t.Fatal(err)
	}
	sim, err := bench.ReadMatrixDir("../../results/matrix-sim-h200-g8-replay")
	if err != nil {
		t.Fatal(err)
	}
	g8 := bench.FidelitySummary(gpu, sim)
	want = append(want, fmt.Sprintf("it was within 10 %% in %d of %d (median error %.0f %%)", g8.Within, g8.Runs, g8.MedianP99*100))
	note := strings.Join(strings.Fields(simulatedNote), " ")
	for _, w := range want {
		if !strings.Contains(note, w) {
			t.Errorf("the demo's note lacks %q (recomputed from results/); it says:\n%s", w, simulatedNote)
		}
	}
}

// TestResultsDocIsGenerated: every generated block of README.md,
// docs/results.md and docs/fidelity.md (a "<!-- generated: atoll ARGS -->"
// line, then the output, then "<!-- end generated -->") is what its atoll
// command prints from the committed runs under results/ now
// (tools/gendocs.sh, `make docs`, rewrites them).
func TestResultsDocIsGenerated(t *testing.T) {
	const open, end = "<!-- generated: atoll ", "<!-- end generated -->"
	for _, doc := range []string{"README.md", "docs/results.md", "docs/fidelity.md"} {
		data, err := os.ReadFile("../../" + doc)
		if err != nil {
			t.Fatal(err)
		}
		s, blocks := string(data), 0
		for {
			i := strings.Index(s, open)
			if i < 0 {
				break
			}
			nl := strings.Index(s[i:], "\n")
			j := strings.Index(s[i:], end)
			if nl < 0 || j < nl {
				t.Fatalf("%s: a generated block without its end marker", doc)
			}
			marker, block := s[i:i+nl], s[i+nl+1:i+j]
			s = s[i+j+len(end):]
			blocks++
			args := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(marker, open), " -->"))
			for k, a := range args {
				if strings.HasPrefix(a, "results/") {
					args[k] = "../../" + a
				}
			}
			var out, errb bytes.Buffer
			if code := run(context.Background(), &env{stdout: &out, stderr: &errb}, args); code != 0 {
				t.Fatalf("%s: atoll %v: exit %d: %s", doc, args, code, errb.String())
			}
			if got := strings.ReplaceAll(out.String(), "../../", ""); got != block {
				t.Errorf("%s: the block of %q is not what that command prints now; regenerate it (make docs)", doc, marker)
			}
		}
		if blocks == 0 {
			t.Errorf("%s: no generated block", doc)
		}
	}
}

// TestDocsNameExistingFiles: every repository file that docs/architecture.md,
// docs/results.md, docs/fidelity.md and README.md name (a path with a
// directory and an extension) exists, so the walk-throughs stay true when
// code moves.
func TestDocsNameExistingFiles(t *testing.T) {
	path := regexp.MustCompile(`\b(?:[a-z0-9_.-]+/)+[a-zA-Z0-9_.-]+\.(?:go|cu|yaml|sh|py|md|png|txt)\b`)
	for _, doc := range []string{"docs/architecture.md", "docs/results.md", "docs/fidelity.md", "README.md"} {
		data, err := os.ReadFile("../../" + doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range path.FindAllString(string(data), -1) {
			name := strings.TrimPrefix(p, "../") // docs/ link to the root with ../
			if _, err := os.Stat("../../" + name); err != nil {
				if _, err2 := os.Stat("../../docs/" + name); err2 != nil {
					t.Errorf("%s names %s, which does not exist", doc, p)
				}
			}
		}
	}
}

// TestMatrixCIFile: the committed small matrix runs on the simulator end to
// end through the CLI (a built binary: bench's tests run the matrix under
// -race), and 'atoll compare' reads its directory back.
func TestMatrixCIFile(t *testing.T) {
	bin, dir := buildAtoll(t), t.TempDir()
	out, err := exec.Command(bin, "matrix", "--quiet", "--out", dir, "../../bench/matrix/ci.yaml").Output()
	if err != nil {
		t.Fatalf("atoll matrix: %v: %s", err, stderrOf(err))
	}
	for _, want := range []string{"### resnet50-train", "### bert-vgg19-bursty", "| atoll |", "Delay by cause", "by the batch of their pass"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("matrix output lacks %q", want)
		}
	}
	out, err = exec.Command(bin, "compare", dir).Output()
	if err != nil || !strings.Contains(string(out), "dedicated re-run") {
		t.Errorf("atoll compare DIR: %v: %s", err, stderrOf(err))
	}
}

// stderrOf is what a failed command wrote to stderr.
func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// TestFidelitySeveralSeries: pairs of series make one table whose summary
// counts the runs of both; a cell in two pairs, an odd count of
// directories and a simulated series given as the GPU's are refused.
func TestFidelitySeveralSeries(t *testing.T) {
	const (
		trainGPU, trainSim = "../../results/onmachine-train-h200", "../../results/matrix-sim-onmachine-train-replay"
		bertGPU, bertSim   = "../../results/onmachine-bert-h200", "../../results/matrix-sim-onmachine-bert-replay"
	)
	fid := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(context.Background(), &env{stdout: &out, stderr: &errb}, append([]string{"fidelity"}, args...))
		return out.String(), errb.String(), code
	}
	runs := func(out string) int {
		var within, n int
		if _, err := fmt.Sscanf(out[strings.Index(out, "HP p99 within"):], "HP p99 within 10 %% (or inside the GPU run's CI): %d of %d", &within, &n); err != nil {
			t.Fatalf("no summary line: %v\n%s", err, out)
		}
		return n
	}
	a, _, code := fid(trainGPU, trainSim)
	b, _, code2 := fid(bertGPU, bertSim)
	both, errs, code3 := fid(trainGPU, trainSim, bertGPU, bertSim)
	if code != 0 || code2 != 0 || code3 != 0 {
		t.Fatalf("exit %d, %d, %d: %s", code, code2, code3, errs)
	}
	if runs(both) != runs(a)+runs(b) {
		t.Errorf("two series together compare %d runs, apart %d and %d", runs(both), runs(a), runs(b))
	}
	for _, c := range []string{"| resnet50-train | atoll |", "| bert-train | atoll |"} {
		if !strings.Contains(both, c) {
			t.Errorf("the table of both series lacks %q", c)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{trainGPU, trainSim, trainGPU, trainSim}, "cell distilbert-train-bursty is in both"},
		{[]string{trainGPU, trainSim, bertGPU}, "Usage: atoll fidelity"},
		{[]string{trainSim, trainSim}, "holds simulated reports"},
		{[]string{"--repeats", trainGPU, trainSim}, "want two or more GPU-DIR SIM-DIR pairs"},
		{[]string{"--repeats", trainGPU, trainSim, bertGPU, bertSim}, "holds other cells than"},
		{[]string{"--repeats", trainGPU, trainSim, trainSim, trainSim}, "holds simulated reports"},
	} {
		if _, errs, code := fid(tc.args...); code == 0 || !strings.Contains(errs, tc.want) {
			t.Errorf("atoll fidelity %v: exit %d, stderr %q; want it refused with %q", tc.args, code, errs, tc.want)
		}
	}
	// Repeats of the same cells: the same series twice agrees with itself.
	out, errs, code := fid("--repeats", trainGPU, trainSim, trainGPU, trainSim)
	if code != 0 || !strings.Contains(out, "| atoll |") || !strings.Contains(out, "GPU series 2..2 within 10 % of series 1") {
		t.Fatalf("atoll fidelity --repeats: exit %d, %s\n%s", code, errs, out)
	}
	if m := regexp.MustCompile(`\| all \| \d+ of (\d+) \| \d+ of \d+ \| (\d+) of (\d+) \|`).FindStringSubmatch(out); m == nil || m[2] != m[3] {
		t.Errorf("a series repeated against itself: want every GPU run within 10 %% of the first; got %v\n%s", m, out)
	}
}

// TestReplaysAreCurrent: a committed replay of a GPU series is what this
// build's simulator gives for it, so that docs/fidelity.md, the README and
// the demo's note (generated from the replays) speak for the simulator as
// it is. One replay stands for all (the one-cell results/matrix-sim-
// context-replay/cp: ResNet-50 beside its training step under priority,
// which moves with every co-run, host and graph figure); a change to the
// simulator that moves it asks for tools/replays.sh.
func TestReplaysAreCurrent(t *testing.T) {
	t.Parallel() // 4 s, 45 s with -race: beside the package's other tests
	const committed = "../../results/matrix-sim-context-replay/cp"
	out := t.TempDir()
	args := []string{"matrix", "--gpu", "H200", "--quiet", "--replay", "../../results/context-h200/cp/m", "--out", out, committed + "/cell.yaml"}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), &env{stdout: &stdout, stderr: &stderr}, args); code != 0 {
		t.Fatalf("atoll %v: exit %d: %s", args, code, stderr.String())
	}
	now, err := bench.ReadMatrixDir(out)
	if err != nil {
		t.Fatal(err)
	}
	was, err := bench.ReadMatrixDir(committed)
	if err != nil {
		t.Fatal(err)
	}
	if len(now) != 1 || len(was) != 1 || len(now[0].Reports) != len(was[0].Reports) || len(now[0].Reports) == 0 {
		t.Fatalf("replayed %d cells, committed %d: want one each with the same runs", len(now), len(was))
	}
	for i, r := range now[0].Reports {
		w := was[0].Reports[i]
		be := func(r *bench.Report) float64 {
			if r.BENormalized == nil {
				return 0
			}
			return *r.BENormalized
		}
		if r.Policy != w.Policy || r.HP.P50 != w.HP.P50 || r.HP.P99 != w.HP.P99 || be(r) != be(w) {
			t.Errorf("%s: HP p50 %.1f, p99 %.1f µs, BE %.3f replayed; committed %s: %.1f, %.1f, %.3f: the committed replays are stale (tools/replays.sh, then tools/gendocs.sh)",
				r.Policy, r.HP.P50, r.HP.P99, be(r), w.Policy, w.HP.P50, w.HP.P99, be(w))
		}
	}
}
