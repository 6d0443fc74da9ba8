package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/profiles"
)

func TestReadMatrixRefuses(t *testing.T) {
	base := "name: m\npolicies: [atoll]\ncells:\n  - {name: a, hp: resnet50, be: vgg19, load: 0.5}\n"
	if _, err := ReadMatrix(strings.NewReader(base)); err != nil {
		t.Fatalf("valid matrix refused: %v", err)
	}
	for _, tc := range []struct{ text, want string }{
		{base + "extra: 1\n", "field extra not found"},
		{"name: m\npolicies: [atoll]\ncells: []\n", "no cells"},
		{"name: m\npolicies: [dedicated]\ncells:\n  - {name: a, hp: x, be: y, load: 0.5}\n", "leave it out"},
		{"name: m\npolicies: [nope]\ncells:\n  - {name: a, hp: x, be: y, load: 0.5}\n", "nope"},
		{"name: m\npolicies: [atoll]\ncells:\n  - {name: a, hp: x, be: y, load: 1.5}\n", "load must be in (0, 1)"},
		{"name: m\npolicies: [atoll]\ncells:\n  - {name: a, hp: x, be: y, load: 0.5}\n  - {name: a, hp: x, be: y, load: 0.5}\n", "used twice"},
		{"name: m\npolicies: [atoll]\ncells:\n  - {name: A/b, hp: x, be: y, load: 0.5}\n", "lower-case"},
		{"name: m\npolicies: [atoll]\ndedicatedRuns: 1\ncells:\n  - {name: a, hp: x, be: y, load: 0.5}\n", "noise floor"},
		{"name: m\npolicies: [atoll]\ncells:\n  - {name: a, hp: x, load: 0.5}\n", "no be model"},
		{"name: m\npolicies: [atoll]\ncells:\n  - {name: a, hp: x, be: y, load: 0.5, arrival: trace}\n", "arrival"},
		{"name: m\npolicies: [atoll]\ncells:\n  - {name: a, hp: x, be: y, load: 0.5, hpMaxBatch: -2}\n", "hpMaxBatch -2"},
		{"name: m\npolicies: [atoll]\ncells:\n  - {name: a, hp: x, be: y, load: 0.5, hpMaxBatch: 100000}\n", "hpMaxBatch 100000"},
		{"name: [\n", "bench: matrix"},
		{"name: m\npolicies: [\"atoll as Atoll/x\"]\ncells:\n  - {name: a, hp: x, be: y, load: 0.5}\n", "lower-case"},
		{"name: m\npolicies: [atoll, \"atoll:admission=true as atoll\"]\ncells:\n  - {name: a, hp: x, be: y, load: 0.5}\n", "two entries run as \"atoll\""},
		{"name: m\npolicies: [\"orion as dedicated\"]\ncells:\n  - {name: a, hp: x, be: y, load: 0.5}\n", "leave it out"},
		{"name: m\npolicies: [\"nope as x\"]\ncells:\n  - {name: a, hp: x, be: y, load: 0.5}\n", "nope"},
	} {
		_, err := ReadMatrix(strings.NewReader(tc.text))
		if err == nil || !errors.Is(err, ErrMatrix) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an ErrMatrix naming %q", tc.text, err, tc.want)
		}
	}
}

func simMatrixEnv(t *testing.T, cfgs *int) MatrixEnv {
	return MatrixEnv{Config: func(c CellSpec) (*Config, func(), error) {
		*cfgs++
		hp, err := profiles.Lookup("H100-SXM", c.HP, c.HPBatch, "")
		if err != nil {
			return nil, nil, err
		}
		be, err := profiles.Lookup("H100-SXM", c.BE, c.BEBatch, "")
		if err != nil {
			return nil, nil, err
		}
		return &Config{HP: hp, BE: be, Load: c.Load, Arrival: c.Arrival, Duration: time.Second,
			NewDevice: func() (gpu.Device, error) { return sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1}) }}, nil, nil
	}}
}

// TestRunMatrixResumesAndRefuses: a budget stops the matrix between
// cells, a second call finishes it without re-running the first cell, a
// cell HP alone cannot sustain is refused, and the measured cells' reports
// carry samples, CIs and causes that add up.
func TestRunMatrixResumesAndRefuses(t *testing.T) {
	spec := `name: t
policies: [priority, atoll]
minRequests: 150
warmup: 20ms
beAlone: 200ms
warmupRun: 50ms
soloRepeats: 2
cells:
  - {name: mobilenet, hp: mobilenetv2, be: vgg19, load: 0.5}
  - {name: overload, hp: resnet50, be: vgg19, load: 0.95}
  - {name: bert, hp: distilbert, be: resnet152, load: 0.4, arrival: lognormal, sigma: 1.2}
`
	m, err := ReadMatrix(strings.NewReader(spec))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n := 0
	env := simMatrixEnv(t, &n)
	env.Budget = time.Nanosecond
	if err := RunMatrix(context.Background(), m, env, dir); !errors.Is(err, ErrBudget) {
		t.Fatalf("a 1 ns budget: %v, want ErrBudget", err)
	}
	env.Budget = 0
	if err := RunMatrix(context.Background(), m, env, dir); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "mobilenet", "cell.json"))
	if err != nil {
		t.Fatal(err)
	}
	n = 0
	if err := RunMatrix(context.Background(), m, env, dir); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(filepath.Join(dir, "mobilenet", "cell.json")); n != 0 || !st2.ModTime().Equal(st.ModTime()) {
		t.Fatalf("a finished matrix ran again (%d cells configured)", n)
	}
	cells, err := ReadMatrixDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 3 {
		t.Fatalf("%d cells read back", len(cells))
	}
	for _, mc := range cells {
		if mc.Result.Cell.Name == "overload" {
			if mc.Result.Refused == "" || len(mc.Reports) != 0 {
				t.Errorf("load 0.95 with maxUtilization 0.9 was measured: %+v", mc.Result)
			}
			continue
		}
		if mc.Result.Refused != "" {
			t.Fatalf("%s refused: %s", mc.Result.Cell.Name, mc.Result.Refused)
		}
		var names []string
		for _, r := range mc.Reports {
			names = append(names, r.Policy)
			if r.HPCompleted < 150 {
				t.Errorf("%s/%s: %d requests, want ≥ 150", mc.Result.Cell.Name, r.Policy, r.HPCompleted)
			}
			s, err := DecodeSamples(r.HPSamples)
			if err != nil || len(s) != r.HPCompleted {
				t.Fatalf("%s: %d samples (%v) for %d requests", r.Policy, len(s), err, r.HPCompleted)
			}
			if r.P99CI == nil || !r.P99CI.Contains(r.HP.P99) && r.HP.P99 > 0 && (r.P99CI.Lo > r.HP.P99*1.01 || r.P99CI.Hi < r.HP.P99*0.99) {
				t.Errorf("%s: p99 %.0f outside its CI %+v", r.Policy, r.HP.P99, r.P99CI)
			}
			var causes float64
			for _, c := range r.Causes {
				causes += c.MeanUs
			}
			if got := r.SoloKernelsUs + causes; got < r.HP.Mean-1 || got > r.HP.Mean+1 {
				t.Errorf("%s: solo %.1f + mean causes %.1f = %.1f µs, mean latency %.1f", r.Policy, r.SoloKernelsUs, causes, got, r.HP.Mean)
			}
			if strings.HasPrefix(r.Policy, "dedicated") && (r.P99OverheadCI == nil || !r.P99OverheadCI.Contains(0)) {
				t.Errorf("%s: the simulator repeats itself, but the re-run's overhead CI %+v excludes 0", r.Policy, r.P99OverheadCI)
			}
		}
		if got := strings.Join(names, ","); got != "dedicated-1,priority,dedicated-2,atoll" {
			t.Errorf("run order %s", got)
		}
		if _, err := os.Stat(filepath.Join(dir, mc.Result.Cell.Name, "arrivals.txt")); err != nil {
			t.Error(err)
		}
	}
	var out bytes.Buffer
	if err := MatrixTables(&out, cells); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### bert", "Refused", "| atoll |", "co-run", "[95 % CI]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("tables lack %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := PlotMatrix(&out, cells, "svg"); err != nil || out.Len() == 0 {
		t.Errorf("plot: %v (%d bytes)", err, out.Len())
	}
}

func TestReadMatrixDirErrors(t *testing.T) {
	if _, err := ReadMatrixDir(t.TempDir()); !errors.Is(err, ErrMatrix) {
		t.Errorf("empty dir: %v", err)
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "c"), 0o755)
	os.WriteFile(filepath.Join(dir, "c", "cell.json"), []byte(`{"apiVersion":"other"}`), 0o644)
	if _, err := ReadMatrixDir(dir); err == nil || !strings.Contains(err.Error(), "apiVersion") {
		t.Errorf("wrong version: %v", err)
	}
	// A PyTorch result with a field this build does not know, or
	// truncated: refused, naming the file.
	os.WriteFile(filepath.Join(dir, "c", "cell.json"), []byte(`{"apiVersion":"`+CellVersion+`","cell":{"name":"c"},"runs":[]}`), 0o644)
	for _, body := range []string{`{"apiVersion":"` + TorchVersion + `","setup":"alone","extra":1}`, `{"apiVersion":`} {
		os.WriteFile(filepath.Join(dir, "c", "torch-alone.json"), []byte(body), 0o644)
		if _, err := ReadMatrixDir(dir); err == nil || !strings.Contains(err.Error(), "torch-alone.json") {
			t.Errorf("bad PyTorch result %q: %v", body, err)
		}
	}
}

func TestHostJitter(t *testing.T) {
	l := HostJitter(50, 50*time.Microsecond)
	if l.Count != 50 || l.P99 < 0 || l.Max < l.P50 {
		t.Errorf("HostJitter: %+v", l)
	}
}

// TestTorchGreenFirstNormalizes: the green setup runs before alone (so its
// own beAloneStepsPerSec is 0) and is normalized by the alone setup's.
func TestTorchGreenFirstNormalizes(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "c"), 0o755)
	os.WriteFile(filepath.Join(dir, "c", "cell.json"), []byte(`{"apiVersion":"`+CellVersion+`","cell":{"name":"c"},"runs":[]}`), 0o644)
	os.WriteFile(filepath.Join(dir, "c", "torch-alone.json"), []byte(`{"apiVersion":"`+TorchVersion+`","setup":"alone","beAloneStepsPerSec":90}`), 0o644)
	os.WriteFile(filepath.Join(dir, "c", "torch-green.json"), []byte(`{"apiVersion":"`+TorchVersion+`","setup":"green","beStepsPerSec":60}`), 0o644)
	cells, err := ReadMatrixDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range cells[0].Torch {
		if tr.BEAloneSteps != 90 {
			t.Errorf("setup %s: BE alone %v, want the alone setup's 90", tr.Setup, tr.BEAloneSteps)
		}
	}
}

// A matrix directory whose run reports are stored gzipped (name.gz beside
// the name cell.json lists) reads as the plain one.
func TestReadMatrixDirGzipped(t *testing.T) {
	src := "../results/matrix-sim-h100-embed"
	want, err := ReadMatrixDir(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cells, _ := filepath.Glob(filepath.Join(src, "*", "cell.json"))
	for _, c := range cells {
		cdir := filepath.Dir(c)
		out := filepath.Join(dir, filepath.Base(cdir))
		if err := os.MkdirAll(out, 0o755); err != nil {
			t.Fatal(err)
		}
		entries, _ := os.ReadDir(cdir)
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(cdir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			name := e.Name()
			if name != "cell.json" && strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, "torch-") {
				var buf bytes.Buffer
				zw := gzip.NewWriter(&buf)
				zw.Write(data)
				zw.Close()
				data, name = buf.Bytes(), name+".gz"
			}
			if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := ReadMatrixDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d cells gzipped, %d plain", len(got), len(want))
	}
	for i := range got {
		if len(got[i].Reports) != len(want[i].Reports) || got[i].Reports[0].HP != want[i].Reports[0].HP || got[i].Reports[0].HPSamples != want[i].Reports[0].HPSamples {
			t.Errorf("cell %s: gzipped reports differ from the plain ones", want[i].Result.Cell.Name)
		}
	}
}

// stallingSim is a simulator whose host stalls 40 times for 5 ms in every
// run (TakeHostStalls: nothing before the run, then the stalls).
type stallingSim struct {
	gpu.Device
	takes int
}

func (s *stallingSim) TakeHostStalls() gpu.HostStalls {
	var h gpu.HostStalls
	if s.takes++; s.takes > 1 {
		for range 40 {
			h.Add(5 * time.Millisecond)
		}
	}
	return h
}

// A measured run whose host stalls reach its HP p99 runs once more on the
// same arrivals, and only once: cell.json lists each with the first run's
// stalls, and the table says so.
func TestRunMatrixRerunsStalledRuns(t *testing.T) {
	spec := `name: t
policies: [atoll]
minRequests: 150
warmup: 20ms
beAlone: 200ms
warmupRun: 50ms
soloRepeats: 2
cells:
  - {name: mobilenet, hp: mobilenetv2, be: vgg19, load: 0.5}
`
	m, err := ReadMatrix(strings.NewReader(spec))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	env := simMatrixEnv(t, &n)
	inner := env.Config
	env.Config = func(c CellSpec) (*Config, func(), error) {
		cfg, done, err := inner(c)
		if err == nil {
			cfg.NewDevice = func() (gpu.Device, error) {
				d, err := sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1})
				return &stallingSim{Device: d}, err
			}
		}
		return cfg, done, err
	}
	dir := t.TempDir()
	if err := RunMatrix(context.Background(), m, env, dir); err != nil {
		t.Fatal(err)
	}
	cells, err := ReadMatrixDir(dir)
	if err != nil || len(cells) != 1 {
		t.Fatalf("%d cells read back: %v", len(cells), err)
	}
	mc := cells[0]
	var rerun []string
	for _, r := range mc.Result.Rerun {
		rerun = append(rerun, r.Run)
		if r.Stalls != 40 || r.StallMs != 200 || r.Touched < stallSuspect {
			t.Errorf("%s: rerun record %+v, want 40 stalls of 200 ms in all", r.Run, r)
		}
	}
	if want := []string{"dedicated-1", "atoll", "dedicated-2"}; !slices.Equal(rerun, want) {
		t.Errorf("runs run again: %v, want %v (each measured run once)", rerun, want)
	}
	if len(mc.Reports) != 3 {
		t.Errorf("%d reports, want one per measured run", len(mc.Reports))
	}
	var b strings.Builder
	if err := MatrixTables(&b, cells); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Run again for the host's stalls, the first time: dedicated-1 (40 stalls, 200.0 ms)") {
		t.Errorf("the table does not say which runs ran again:\n%s", b.String())
	}
}

// TestRunMatrixReplays: a matrix run with Replay takes the earlier
// directory's rate, window and arrivals (gzipped or not) whatever its own
// solo latency says, names a "POLICY as NAME" run's report NAME, and
// refuses a replay of a different cell or a missing one.
func TestRunMatrixReplays(t *testing.T) {
	spec := `name: t
policies: [priority]
minRequests: 150
warmup: 20ms
beAlone: 100ms
warmupRun: 30ms
soloRepeats: 1
cells:
  - {name: c, hp: mobilenetv2, be: vgg19, load: 0.4}
`
	m, err := ReadMatrix(strings.NewReader(spec))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	first := filepath.Join(t.TempDir(), "first")
	if err := RunMatrix(context.Background(), m, simMatrixEnv(t, &n), first); err != nil {
		t.Fatal(err)
	}
	// Doctor the first series: another rate and fewer, gzipped arrivals,
	// as a GPU series of the same cell would have.
	cdir := filepath.Join(first, "c")
	data, err := os.ReadFile(filepath.Join(cdir, "cell.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res CellResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	res.RatePerSec *= 0.9
	if err := writeJSON(filepath.Join(cdir, "cell.json"), res); err != nil {
		t.Fatal(err)
	}
	arr, err := Arrivals(Poisson, res.RatePerSec, time.Duration(res.WindowSec*float64(time.Second))+m.Warmup, 7, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeArrivals(filepath.Join(cdir, "arrivals.txt"), arr); err != nil {
		t.Fatal(err)
	}
	gz(t, filepath.Join(cdir, "arrivals.txt"))

	m2, err := ReadMatrix(strings.NewReader(strings.Replace(spec, "[priority]", `["orion as priority"]`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	env := simMatrixEnv(t, &n)
	env.Replay = first
	second := filepath.Join(t.TempDir(), "second")
	if err := RunMatrix(context.Background(), m2, env, second); err != nil {
		t.Fatal(err)
	}
	cells, err := ReadMatrixDir(second)
	if err != nil {
		t.Fatal(err)
	}
	got := cells[0].Result
	hp, err := profiles.Lookup("H100-SXM", "mobilenetv2", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, d := range got.SoloSpansUs {
		sum += d
	}
	if len(got.SoloSpansUs) != len(hp.Kernels) || !(sum > 0 && sum <= got.SoloMedianUs) {
		t.Errorf("soloSpansUs: %d spans summing to %.1f µs, want one per HP kernel (%d) summing to at most the solo latency %.1f",
			len(got.SoloSpansUs), sum, len(hp.Kernels), got.SoloMedianUs)
	}
	if got.RatePerSec != res.RatePerSec || got.WindowSec != res.WindowSec || got.Replayed != first {
		t.Errorf("replayed cell: rate %v window %v replayed %q, want %v, %v, %q", got.RatePerSec, got.WindowSec, got.Replayed, res.RatePerSec, res.WindowSec, first)
	}
	f, err := os.Open(filepath.Join(second, "c", "arrivals.txt"))
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadTrace(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back, arr) {
		t.Errorf("the replay wrote %d arrivals, not the %d replayed (first %v, want %v)", len(back), len(arr), back[0], arr[0])
	}
	if !slices.Contains(got.Runs, "priority.json") {
		t.Errorf("runs %v: the \"orion as priority\" report is not priority.json", got.Runs)
	}
	for _, r := range cells[0].Reports {
		if r.Policy == "priority" && r.BENormalized != nil && *r.BENormalized >= 0.6 {
			t.Errorf("\"orion as priority\": BE normalized %.2f, as strict priority would give; Orion holds BE back", *r.BENormalized)
		}
	}

	for _, tc := range []struct{ spec, replay, want string }{
		{strings.Replace(spec, "load: 0.4", "load: 0.3", 1), first, "differs"},
		{spec, filepath.Join(t.TempDir(), "none"), "run the matrix being replayed first"},
	} {
		m3, err := ReadMatrix(strings.NewReader(tc.spec))
		if err != nil {
			t.Fatal(err)
		}
		env.Replay = tc.replay
		err = RunMatrix(context.Background(), m3, env, filepath.Join(t.TempDir(), "x"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("replay of %s: %v, want an error naming %q", tc.replay, err, tc.want)
		}
	}
}

func gz(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".gz", b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}
