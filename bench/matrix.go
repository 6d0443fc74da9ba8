package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"atoll/gpu"
	"atoll/policies"
	"atoll/sched"
)

// CellVersion is the apiVersion of a matrix cell's summary (cell.json).
const CellVersion = "atoll/matrix-cell/v1"

// ErrMatrix reports a malformed matrix file or an unusable matrix
// directory.
var ErrMatrix = errors.New("bench: matrix")

// MatrixSpec is a committed set of co-location cells, each run under the
// same policies on the same arrivals with the same protocol.
type MatrixSpec struct {
	Name string `yaml:"name"`
	// Policies besides dedicated, in run order; "POLICY as NAME" names
	// a run's report NAME instead of after its policy.
	Policies []string `yaml:"policies"`
	// DedicatedRuns (≥ 2) dedicated runs per cell, interleaved with the
	// policies; policies are measured against all of them pooled, and
	// each re-run against the first is the noise floor.
	DedicatedRuns int `yaml:"dedicatedRuns"`
	// MinRequests is the fewest measured HP requests per run: a run lasts
	// max(MinDuration, MinRequests / rate) after its Warmup.
	MinRequests int           `yaml:"minRequests"`
	MinDuration time.Duration `yaml:"minDuration"`
	Warmup      time.Duration `yaml:"warmup"`
	// BEAlone is the length of the BE-alone run (BE's rate is steady; it
	// needs no request count).
	BEAlone time.Duration `yaml:"beAlone"`
	// WarmupRun is the length of each policy's unmeasured run before the
	// cell is measured (kernels, padded pairs, clocks).
	WarmupRun time.Duration `yaml:"warmupRun"`
	// PairWait is how long the warm-up waits for padded pair kernels to
	// compile before freezing the set (default 60 s; backends that compile
	// nothing ignore it).
	PairWait time.Duration `yaml:"pairWait"`
	// SoloRepeats times HP's solo latency is measured (median of each's
	// isolated requests; the cell uses the median of the repeats).
	SoloRepeats int `yaml:"soloRepeats"`
	// MaxUtilization refuses a cell whose offered rate exceeds this share
	// of what HP alone sustains back to back (default 0.9).
	MaxUtilization float64    `yaml:"maxUtilization"`
	Cells          []CellSpec `yaml:"cells"`
}

// CellSpec is one co-location workload of a matrix.
type CellSpec struct {
	Name    string `yaml:"name" json:"name"`
	HP      string `yaml:"hp" json:"hp"`
	HPBatch int    `yaml:"hpBatch" json:"hpBatch"`
	// HPMaxBatch serves the HP requests waiting when the model's stream
	// empties together, in passes of up to this many (the bench flag
	// --hp-max-batch; 0 or 1: one request per pass). PyTorch's rows still
	// serve one request at a time.
	HPMaxBatch int     `yaml:"hpMaxBatch" json:"hpMaxBatch,omitempty"`
	BE         string  `yaml:"be" json:"be"`
	BEBatch    int     `yaml:"beBatch" json:"beBatch"`
	Arrival    string  `yaml:"arrival" json:"arrival"`
	Sigma      float64 `yaml:"sigma" json:"sigma,omitempty"`
	Load       float64 `yaml:"load" json:"load"`
	Seed       uint64  `yaml:"seed" json:"seed"`
	// Torch names the same workload in PyTorch (tools/gpu/torch_cell.py
	// runs it on the cell's arrivals); absent when PyTorch has no such
	// model.
	Torch *TorchSpec `yaml:"torch" json:"torch,omitempty"`
}

// TorchSpec is a cell's PyTorch counterpart.
type TorchSpec struct {
	HP       string `yaml:"hp" json:"hp"`             // torchvision or transformers model
	BE       string `yaml:"be" json:"be"`             // training job: "<model>-train"
	BEBatch  int    `yaml:"beBatch" json:"beBatch"`   // its batch
	GreenSMs int    `yaml:"greenSms" json:"greenSms"` // BE's green context size
}

var cellName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// ReadMatrix parses and checks a matrix file (YAML, unknown fields
// refused), filling defaults.
func ReadMatrix(r io.Reader) (*MatrixSpec, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMatrix, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var m MatrixSpec
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMatrix, err)
	}
	if m.DedicatedRuns == 0 {
		m.DedicatedRuns = 2
	}
	if m.MinRequests == 0 {
		m.MinRequests = 5000
	}
	if m.Warmup == 0 {
		m.Warmup = 500 * time.Millisecond
	}
	if m.BEAlone == 0 {
		m.BEAlone = 5 * time.Second
	}
	if m.WarmupRun == 0 {
		m.WarmupRun = 2 * time.Second
	}
	if m.SoloRepeats == 0 {
		m.SoloRepeats = 3
	}
	if m.PairWait == 0 {
		m.PairWait = time.Minute
	}
	if m.MaxUtilization == 0 {
		m.MaxUtilization = 0.9
	}
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrMatrix}, a...)...) }
	switch {
	case m.Name == "":
		return nil, bad("name is empty")
	case len(m.Policies) == 0:
		return nil, bad("no policies (list them under policies:, besides dedicated)")
	case m.DedicatedRuns < 2:
		return nil, bad("dedicatedRuns is %d; at least 2 are needed for a noise floor", m.DedicatedRuns)
	case m.MinRequests < 100:
		return nil, bad("minRequests is %d; a p99 needs at least 100", m.MinRequests)
	case m.MaxUtilization <= 0 || m.MaxUtilization > 1:
		return nil, bad("maxUtilization must be in (0, 1], got %v", m.MaxUtilization)
	case m.SoloRepeats < 1:
		return nil, bad("soloRepeats must be positive")
	case len(m.Cells) == 0:
		return nil, bad("no cells")
	}
	names := map[string]bool{}
	for _, e := range m.Policies {
		p, name := PolicyEntry(e)
		if p == "dedicated" || name == "dedicated" {
			return nil, bad("policies: dedicated runs anyway (dedicatedRuns); leave it out")
		}
		if _, err := policies.ByName(p); err != nil {
			return nil, bad("policies: %v", err)
		}
		if name == "" || fileName(name) != name {
			return nil, bad("policies: %q: the name after \" as \" must be lower-case letters, digits, '.', '_' or '-'", e)
		}
		if names[name] {
			return nil, bad("policies: two entries run as %q; give one another name (\"POLICY as NAME\")", name)
		}
		names[name] = true
	}
	seen := map[string]bool{}
	for i := range m.Cells {
		c := &m.Cells[i]
		where := fmt.Sprintf("cell %d (%s)", i+1, c.Name)
		switch {
		case !cellName.MatchString(c.Name):
			return nil, bad("%s: name must be lower-case letters, digits, '.', '_' or '-'", where)
		case seen[c.Name]:
			return nil, bad("%s: name used twice", where)
		case c.HP == "":
			return nil, bad("%s: no hp model", where)
		case c.BE == "":
			return nil, bad("%s: no be model (a cell measures co-location)", where)
		case !(c.Load > 0 && c.Load < 1):
			return nil, bad("%s: load must be in (0, 1), got %v", where, c.Load)
		case c.HPMaxBatch < 0 || len(sched.BatchSizes(c.HPMaxBatch)) > sched.MaxBatched:
			return nil, bad("%s: hpMaxBatch %d: want 1 to %d (0 or 1: one request per pass)", where, c.HPMaxBatch, 1<<sched.MaxBatched)
		}
		seen[c.Name] = true
		if c.HPBatch == 0 {
			c.HPBatch = 1
		}
		if c.BEBatch == 0 {
			c.BEBatch = 1
		}
		if c.Arrival == "" {
			c.Arrival = Poisson
		}
		if c.Arrival != Poisson && c.Arrival != Uniform && c.Arrival != Bursty {
			return nil, bad("%s: arrival %q (want %s, %s or %s)", where, c.Arrival, Poisson, Uniform, Bursty)
		}
		if c.Seed == 0 {
			c.Seed = 1
		}
	}
	return &m, nil
}

// CellResult is a cell's summary, written as cell.json beside its
// reports once every run of the cell is done.
type CellResult struct {
	APIVersion string   `json:"apiVersion"`
	Cell       CellSpec `json:"cell"`
	Backend    string   `json:"backend"`
	Device     string   `json:"device"`
	Driver     string   `json:"driver,omitempty"`
	Command    string   `json:"command"`
	// Refused says why the cell was not measured (its rate is more than
	// HP alone sustains); empty for a measured cell.
	Refused string `json:"refused,omitempty"`
	// SoloUs are the solo-latency repeats, SoloMedianUs their median (the
	// load's unit); SustainedPerSec is HP alone back to back.
	SoloUs       []float64 `json:"soloUs"`
	SoloMedianUs float64   `json:"soloMedianUs"`
	// SoloSpansUs is each HP kernel's median device span in the last solo
	// run, in the profile's order (what attribution measures delay
	// against): completion less the later of its submission and the
	// previous completion. Kernels that complete together (a graph's chunk,
	// one event) give the span to the first of them and 0 to the others.
	SoloSpansUs     []float64 `json:"soloSpansUs,omitempty"`
	SustainedPerSec float64   `json:"sustainedPerSec"`
	RatePerSec      float64   `json:"ratePerSec"`
	WindowSec       float64   `json:"windowSec"`
	WarmupSec       float64   `json:"warmupSec"`
	// Runs are the report files in the order they ran.
	Runs []string `json:"runs"`
	// WarmupUnpadded counts padded decisions that found their pair kernel
	// not compiled, per warm-up round: the first round asks for the pairs,
	// the second runs with the set frozen for the measured runs.
	WarmupUnpadded []int `json:"warmupUnpadded,omitempty"`
	// Pairs says how many pair compiles finished before the set froze.
	Pairs string `json:"pairs,omitempty"`
	// HostJitter is how late 2,000 sleeps of 100 µs woke up just before
	// the cell measured (µs): a stalling host shows here first.
	HostJitter *Latency `json:"hostJitterUs,omitempty"`
	// Rerun lists the runs whose host stalled long enough to reach their
	// HP p99 (stallSuspect) and that were therefore run once more on the
	// same arrivals: the report is the second run's; each entry keeps the
	// first run's stalls.
	Rerun []RerunRecord `json:"rerun,omitempty"`
	// Replayed is the matrix directory whose rate, window and arrivals
	// the cell replayed (MatrixEnv.Replay); empty when it drew its own.
	Replayed string  `json:"replayed,omitempty"`
	WallSec  float64 `json:"wallSec"`
}

// RerunRecord is a run repeated for its host stalls (CellResult.Rerun).
type RerunRecord struct {
	Run     string  `json:"run"`
	Stalls  int     `json:"stalls"`
	StallMs float64 `json:"stallMs"`
	Touched float64 `json:"touched"` // share of its HP requests the stalls may have delayed
}

// MatrixEnv is what RunMatrix needs from its caller.
type MatrixEnv struct {
	// Config resolves a cell into a run configuration (profiles, device,
	// binder); done, when not nil, releases what it opened.
	Config func(c CellSpec) (cfg *Config, done func(), err error)
	// Budget, when positive, stops the matrix before a cell whose
	// estimated time would exceed what is left of it.
	Budget   time.Duration
	Progress func(msg string)
	Command  string
	// Replay, when set, is an earlier matrix directory (a GPU series)
	// whose cells this run replays: each cell takes that series' offered
	// rate, measured window and arrival times (its cell.json and
	// arrivals.txt) instead of deriving them from its own solo latency,
	// so that a simulated run sees exactly the requests the GPU saw
	// (atoll fidelity). The cell must be the same (hp, be, batches, load,
	// arrival process, seed).
	Replay string
}

// ErrBudget: the matrix stopped before its end to stay within its budget;
// running the same command again continues it.
var ErrBudget = errors.New("bench: matrix stopped at its time budget")

// RunMatrix runs every cell of m not yet done in dir (dir/<cell>/), cell
// by cell; a cell is done once its cell.json exists, so an interrupted
// matrix resumes where it stopped.
func RunMatrix(ctx context.Context, m *MatrixSpec, env MatrixEnv, dir string) error {
	start := time.Now()
	for _, cell := range m.Cells {
		cdir := filepath.Join(dir, cell.Name)
		if _, err := os.Stat(filepath.Join(cdir, "cell.json")); err == nil {
			env.progress("cell %s: done already", cell.Name)
			continue
		}
		cfg, done, err := env.Config(cell)
		if err != nil {
			return fmt.Errorf("cell %s: %w", cell.Name, err)
		}
		if env.Budget > 0 {
			if est := m.estimate(cfg, cell); time.Since(start)+est > env.Budget {
				if done != nil {
					done()
				}
				return fmt.Errorf("%w: cell %s needs about %v, %v left (run the same command again to continue)", ErrBudget, cell.Name, est.Round(time.Second), (env.Budget - time.Since(start)).Round(time.Second))
			}
		}
		err = m.runCell(ctx, cell, cfg, env, cdir)
		if done != nil {
			done()
		}
		if err != nil {
			return fmt.Errorf("cell %s: %w", cell.Name, err)
		}
	}
	return nil
}

func (e MatrixEnv) progress(f string, a ...any) {
	if e.Progress != nil {
		e.Progress(fmt.Sprintf(f, a...))
	}
}

// window is a measured run's length for rate: MinRequests requests, at
// least MinDuration.
func (m *MatrixSpec) window(rate float64) time.Duration {
	w := time.Duration(float64(m.MinRequests) / rate * 1.02 * float64(time.Second))
	return max(w, m.MinDuration)
}

// estimate is the device time a cell takes, from its profile's solo time.
func (m *MatrixSpec) estimate(c *Config, cell CellSpec) time.Duration {
	rate := cell.Load / c.HP.Total().Seconds()
	runs := time.Duration(m.DedicatedRuns+len(m.Policies)) * (m.window(rate) + m.Warmup)
	warm := 2*time.Duration(len(m.Policies))*m.WarmupRun + m.PairWait
	return runs + warm + m.BEAlone + 10*time.Second
}

// runCell measures one cell: warm-up, solo latency, the sustain check, BE
// alone, then the dedicated runs interleaved with the policies, all on the
// same arrivals; reports go to dir.
func (m *MatrixSpec) runCell(ctx context.Context, cell CellSpec, c *Config, env MatrixEnv, dir string) error {
	t0 := time.Now()
	c.Samples = true
	c.Warmup = m.Warmup
	c.Seed, c.Arrival, c.Sigma, c.Load = cell.Seed, cell.Arrival, cell.Sigma, cell.Load
	res := &CellResult{APIVersion: CellVersion, Cell: cell, Command: env.Command, WarmupSec: m.Warmup.Seconds()}
	say := func(f string, a ...any) { env.progress("cell %s: "+f, append([]any{cell.Name}, a...)...) }

	// A first solo pass warms HP's kernels and the clocks; it is not kept.
	say("warming up")
	solo0, info0, err := soloLatency(ctx, c)
	if err != nil {
		return fmt.Errorf("solo latency: %w", err)
	}
	rate0 := cell.Load / solo0.Seconds()
	if err := m.warmPolicies(ctx, c, rate0, res); err != nil {
		return err
	}
	if info0.Backend != "sim" { // simulated time does not wait for the host
		hj := HostJitter(2000, 100*time.Microsecond)
		res.HostJitter = &hj
		say("host wake-up lateness p99 %.0f µs, max %.0f µs", hj.P99, hj.Max)
	}
	say("solo latency ×%d", m.SoloRepeats)
	var solos []float64
	var info gpu.Info
	for range m.SoloRepeats {
		s, in, err := soloLatency(ctx, c)
		if err != nil {
			return fmt.Errorf("solo latency: %w", err)
		}
		solos = append(solos, float64(s)/1e3)
		info = in
		res.Backend, res.Device, res.Driver = info.Backend, info.Name, info.Driver
	}
	res.SoloUs = solos
	// Attribution measures each kernel against its warm solo span.
	c.KernelSolo = c.lastSpans
	for _, d := range c.lastSpans {
		res.SoloSpansUs = append(res.SoloSpansUs, round3(float64(d)/1e3))
	}
	sorted := slices.Clone(solos)
	slices.Sort(sorted)
	res.SoloMedianUs = sorted[len(sorted)/2]
	solo := time.Duration(res.SoloMedianUs * 1e3)
	res.RatePerSec = cell.Load / solo.Seconds()
	if res.SustainedPerSec, err = sustained(ctx, c); err != nil {
		return fmt.Errorf("sustained rate: %w", err)
	}
	var arr []time.Duration
	var win time.Duration
	if env.Replay != "" {
		var rate float64
		if arr, rate, win, err = replayed(env.Replay, cell); err != nil {
			return err
		}
		res.RatePerSec, res.Replayed = rate, env.Replay
		say("replaying %s: %.1f req/s, %d arrivals", env.Replay, rate, len(arr))
	}
	if os.MkdirAll(dir, 0o755) != nil {
		return fmt.Errorf("cannot create %s", dir)
	}
	if res.RatePerSec > m.MaxUtilization*res.SustainedPerSec {
		res.Refused = fmt.Sprintf("offered %.0f req/s (load %.2f of a %.0f µs solo latency) but HP alone sustains %.0f req/s back to back; more than %.0f %% of that would measure a queue that runs away, not interference",
			res.RatePerSec, cell.Load, res.SoloMedianUs, res.SustainedPerSec, m.MaxUtilization*100)
		say("refused: %s", res.Refused)
		res.WallSec = time.Since(t0).Seconds()
		return writeJSON(filepath.Join(dir, "cell.json"), res)
	}
	if env.Replay == "" {
		win = m.window(res.RatePerSec)
		if arr, err = Arrivals(cell.Arrival, res.RatePerSec, m.Warmup+win, cell.Seed, cell.Sigma); err != nil {
			return err
		}
	}
	c.Duration = win
	res.WindowSec = win.Seconds()
	if err := writeArrivals(filepath.Join(dir, "arrivals.txt"), arr); err != nil {
		return err
	}
	b := &Baseline{Solo: solo, Rate: res.RatePerSec, Arrivals: arr}
	b.Info = info

	say("BE alone (%v)", m.BEAlone)
	bc := *c
	bc.Duration = m.BEAlone
	if b.BEAlone, err = bc.run(ctx, "streams", nil, true); err != nil {
		return fmt.Errorf("BE-alone run: %w", err)
	}

	// Order: dedicated, a share of the policies, dedicated, the next
	// share, ... (dedicated runs spread evenly among the policies).
	type slot struct{ policy, file string }
	var order []slot
	per := (len(m.Policies) + m.DedicatedRuns - 1) / m.DedicatedRuns
	pi := 0
	for d := 1; d <= m.DedicatedRuns; d++ {
		order = append(order, slot{"dedicated", fmt.Sprintf("dedicated-%d", d)})
		for n := 0; n < per && pi < len(m.Policies); n++ {
			p, name := PolicyEntry(m.Policies[pi])
			order = append(order, slot{p, name})
			pi++
		}
	}
	for ; pi < len(m.Policies); pi++ {
		p, name := PolicyEntry(m.Policies[pi])
		order = append(order, slot{p, name})
	}
	traces := map[string]*sched.Trace{}
	walls := map[string]float64{}
	for i, s := range order {
		say("run %d/%d: %s (%.1f s)", i+1, len(order), s.file, (m.Warmup + win).Seconds())
		t := time.Now()
		tr, err := c.run(ctx, s.policy, arr, s.policy != "dedicated")
		if err != nil {
			return fmt.Errorf("%s: %w", s.file, err)
		}
		if touched := stallTouchedTrace(tr, res.RatePerSec); touched >= stallSuspect {
			// The host, not the policy, would set this run's p99: once
			// more on the same arrivals (a second stall is kept and
			// flagged in the tables).
			res.Rerun = append(res.Rerun, RerunRecord{Run: s.file, Stalls: tr.HostStalls.Count,
				StallMs: round3(tr.HostStalls.Total.Seconds() * 1e3), Touched: round3(touched)})
			say("run %d/%d: %s: the host stalled %d times (%.1f ms): once more", i+1, len(order), s.file, tr.HostStalls.Count, tr.HostStalls.Total.Seconds()*1e3)
			t = time.Now()
			if tr, err = c.run(ctx, s.policy, arr, s.policy != "dedicated"); err != nil {
				return fmt.Errorf("%s (run again for host stalls): %w", s.file, err)
			}
		}
		traces[s.file], walls[s.file] = tr, time.Since(t).Seconds()
		res.Runs = append(res.Runs, s.file+".json")
	}
	// Policies against every dedicated run pooled; each dedicated re-run
	// against the first.
	pooled := &sched.Trace{}
	for d := 1; d <= m.DedicatedRuns; d++ {
		pooled.Requests = append(pooled.Requests, traces[fmt.Sprintf("dedicated-%d", d)].Requests...)
	}
	for _, s := range order {
		bb := *b
		bb.Dedicated = pooled
		if s.policy == "dedicated" {
			if s.file == "dedicated-1" {
				bb.Dedicated = traces["dedicated-2"]
			} else {
				bb.Dedicated = traces["dedicated-1"]
			}
		}
		r := c.report(&bb, s.policy, traces[s.file])
		r.Policy = s.file
		r.WallSec = walls[s.file]
		r.Workload.Cell = cell.Name
		if err := writeJSON(filepath.Join(dir, s.file+".json"), r); err != nil {
			return err
		}
	}
	res.WallSec = time.Since(t0).Seconds()
	say("done in %.0f s", res.WallSec)
	return writeJSON(filepath.Join(dir, "cell.json"), res)
}

// warmPolicies runs every policy briefly twice: the first round asks the
// backend for every padded pair its policy picks (compiled in the
// background), then the backend waits up to PairWait for them and freezes
// the set, so that every measured run pads with the same pairs and no
// compile competes with it; the second round runs with the frozen set.
func (m *MatrixSpec) warmPolicies(ctx context.Context, c *Config, rate float64, res *CellResult) error {
	wc := *c
	wc.Duration, wc.Warmup = m.WarmupRun, 0
	arr, err := Arrivals(c.Arrival, rate, m.WarmupRun, c.Seed+1000, c.Sigma)
	if err != nil {
		return err
	}
	if c.Pairs != nil {
		c.Pairs(ctx, false)
	}
	for round := 0; round < 2; round++ {
		unpadded := 0
		for _, e := range m.Policies {
			p, _ := PolicyEntry(e)
			tr, err := wc.run(ctx, p, arr, true)
			if err != nil {
				return fmt.Errorf("warm-up run of %s: %w", p, err)
			}
			unpadded += tr.UnpaddedLaunches
		}
		res.WarmupUnpadded = append(res.WarmupUnpadded, unpadded)
		if round == 0 && c.Pairs != nil {
			wctx, cancel := context.WithTimeout(ctx, m.PairWait)
			res.Pairs = c.Pairs(wctx, true)
			cancel()
		}
	}
	return ctx.Err()
}

// sustained is HP alone back to back: requests arriving together, served
// one after another; completed requests per second.
func sustained(ctx context.Context, c *Config) (float64, error) {
	n := max(50, int(0.5/c.HP.Total().Seconds()))
	arr := make([]time.Duration, n)
	cc := *c
	cc.Warmup = 0
	cc.Duration = time.Millisecond
	tr, err := cc.run(ctx, "dedicated", arr, false)
	if err != nil {
		return 0, err
	}
	if len(tr.Requests) < 2 {
		return 0, fmt.Errorf("%d requests completed", len(tr.Requests))
	}
	first, last := tr.Requests[0].End, tr.Requests[0].End
	for _, r := range tr.Requests {
		first, last = min(first, r.End), max(last, r.End)
	}
	return float64(len(tr.Requests)-1) / (last - first).Seconds(), nil
}

// PolicyEntry splits an entry of a matrix's policies: "POLICY as NAME"
// runs POLICY and names its report NAME (to set a run beside an earlier
// series' run of that name whose policy has since changed defaults);
// otherwise the report is named after the policy (fileName).
func PolicyEntry(e string) (policy, name string) {
	if p, n, ok := strings.Cut(e, " as "); ok {
		return strings.TrimSpace(p), strings.TrimSpace(n)
	}
	return e, fileName(e)
}

// fileName is a policy name ("atoll:hp-window=16") as a file name
// ("atoll-hp-window-16").
func fileName(policy string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '-'
	}, strings.ToLower(policy))
}

func writeArrivals(path string, arr []time.Duration) error {
	var b strings.Builder
	b.WriteString("# HP arrival times in microseconds from the run's start (atoll matrix)\n")
	for _, a := range arr {
		fmt.Fprintf(&b, "%.3f\n", float64(a)/1e3)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// MatrixCell is one cell read back from a matrix directory: its summary,
// its reports in run order, and any PyTorch results beside them.
type MatrixCell struct {
	Result  CellResult
	Reports []*Report
	Torch   []*TorchResult
}

// TorchResult is one PyTorch setup's run of a cell's workload
// (tools/gpu/torch_cell.py writes torch-<setup>.json).
type TorchResult struct {
	APIVersion    string  `json:"apiVersion"`
	Setup         string  `json:"setup"` // alone, priority, green
	Device        string  `json:"device"`
	Torch         string  `json:"torch"`
	HPModel       string  `json:"hpModel"`
	BEModel       string  `json:"beModel,omitempty"`
	GreenSMs      int     `json:"greenSms,omitempty"`
	Graphs        bool    `json:"cudaGraphs"`
	SoloUs        float64 `json:"soloUs"`
	RatePerSec    float64 `json:"ratePerSec"`
	Requests      int     `json:"requests"`
	HPP50Us       float64 `json:"hpP50Us"`
	HPP99Us       float64 `json:"hpP99Us"`
	HPSamples     string  `json:"hpSamples"`
	BEStepsPerSec float64 `json:"beStepsPerSec"`
	BEAloneSteps  float64 `json:"beAloneStepsPerSec"`
	Note          string  `json:"note,omitempty"`
}

// TorchVersion is the apiVersion torch_cell.py writes.
const TorchVersion = "atoll/torch-cell/v1"

// ReadMatrixDir reads every finished cell under dir, in name order.
func ReadMatrixDir(dir string) ([]*MatrixCell, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*", "cell.json"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no finished cell (*/cell.json) under %s", ErrMatrix, dir)
	}
	sort.Strings(paths)
	var out []*MatrixCell
	for _, p := range paths {
		mc := &MatrixCell{}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(data, &mc.Result); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrMatrix, p, err)
		}
		if mc.Result.APIVersion != CellVersion {
			return nil, fmt.Errorf("%w: %s: apiVersion %q is not %q", ErrMatrix, p, mc.Result.APIVersion, CellVersion)
		}
		cdir := filepath.Dir(p)
		for _, name := range mc.Result.Runs {
			// A run's report may be stored compressed beside its name
			// (name.gz): ReadReport takes either.
			f, err := os.Open(filepath.Join(cdir, name))
			if errors.Is(err, fs.ErrNotExist) {
				f, err = os.Open(filepath.Join(cdir, name+".gz"))
			}
			if err != nil {
				return nil, fmt.Errorf("%w: cell %s: %v", ErrMatrix, mc.Result.Cell.Name, err)
			}
			r, err := ReadReport(f)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", filepath.Join(cdir, name), err)
			}
			mc.Reports = append(mc.Reports, r)
		}
		tps, _ := filepath.Glob(filepath.Join(cdir, "torch-*.json"))
		sort.Strings(tps)
		for _, tp := range tps {
			data, err := os.ReadFile(tp)
			if err != nil {
				return nil, err
			}
			var tr TorchResult
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&tr); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrMatrix, tp, err)
			}
			if tr.APIVersion != TorchVersion {
				return nil, fmt.Errorf("%w: %s: apiVersion %q is not %q", ErrMatrix, tp, tr.APIVersion, TorchVersion)
			}
			mc.Torch = append(mc.Torch, &tr)
		}
		// BE alone is measured in the alone setup; a setup run before it
		// (green runs first) normalizes by that figure.
		alone := 0.0
		for _, t := range mc.Torch {
			if t.Setup == "alone" {
				alone = t.BEAloneSteps
			}
		}
		for _, t := range mc.Torch {
			if t.BEAloneSteps == 0 {
				t.BEAloneSteps = alone
			}
		}
		out = append(out, mc)
	}
	return out, nil
}

// replayed reads cell's offered rate, measured window and arrivals from
// an earlier matrix directory (MatrixEnv.Replay).
func replayed(dir string, cell CellSpec) (arr []time.Duration, rate float64, win time.Duration, err error) {
	cdir := filepath.Join(dir, cell.Name)
	data, err := os.ReadFile(filepath.Join(cdir, "cell.json"))
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%w: replay: cell %s: %v (run the matrix being replayed first, or drop --replay)", ErrMatrix, cell.Name, err)
	}
	var res CellResult
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, 0, 0, fmt.Errorf("%w: replay: %s: %v", ErrMatrix, filepath.Join(cdir, "cell.json"), err)
	}
	if res.Refused != "" {
		return nil, 0, 0, fmt.Errorf("%w: replay: cell %s was refused in %s (%s): nothing to replay", ErrMatrix, cell.Name, dir, res.Refused)
	}
	if a, b := res.Cell, cell; a.HP != b.HP || a.BE != b.BE || a.Load != b.Load || a.Arrival != b.Arrival || a.Seed != b.Seed ||
		a.Sigma != b.Sigma || max(a.HPBatch, 1) != max(b.HPBatch, 1) || max(a.BEBatch, 1) != max(b.BEBatch, 1) || a.HPMaxBatch != b.HPMaxBatch {
		return nil, 0, 0, fmt.Errorf("%w: replay: cell %s differs from the one in %s (%+v there, %+v here)", ErrMatrix, cell.Name, dir, a, b)
	}
	var r io.Reader
	f, err := os.Open(filepath.Join(cdir, "arrivals.txt"))
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.Open(filepath.Join(cdir, "arrivals.txt.gz"))
	}
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%w: replay: cell %s: %v", ErrMatrix, cell.Name, err)
	}
	defer f.Close()
	if r = f; strings.HasSuffix(f.Name(), ".gz") {
		if r, err = gzip.NewReader(f); err != nil {
			return nil, 0, 0, fmt.Errorf("%w: replay: %s: %v", ErrMatrix, f.Name(), err)
		}
	}
	if arr, err = ReadTrace(r); err != nil {
		return nil, 0, 0, fmt.Errorf("replay: %s: %w", filepath.Join(cdir, "arrivals.txt"), err)
	}
	if !(res.RatePerSec > 0) || !(res.WindowSec > 0) {
		return nil, 0, 0, fmt.Errorf("%w: replay: %s has no rate or window", ErrMatrix, filepath.Join(cdir, "cell.json"))
	}
	return arr, res.RatePerSec, time.Duration(res.WindowSec * float64(time.Second)), nil
}

// HostJitter measures how late the host wakes the measuring goroutine:
// n sleeps of d, each one's oversleep (µs). A busy or stalling host (other
// tenants, CPU throttling) delays the scheduler's loop the same way and
// shows up as `host` delay even in dedicated runs; cells record this
// before they measure.
func HostJitter(n int, d time.Duration) Latency {
	late := make([]time.Duration, n)
	for i := range late {
		t := time.Now()
		time.Sleep(d)
		late[i] = max(time.Since(t)-d, 0)
	}
	return Summarize(late)
}
