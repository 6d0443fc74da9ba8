package profiler

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"atoll/profiles"
)

// ErrNCU wraps every error of ParseNCU and ApplyNCU: a malformed Nsight
// Compute CSV, or one whose launches are not the model's.
var ErrNCU = errors.New("profiler: Nsight Compute CSV")

// The Nsight Compute metrics atoll reads (ncu --metrics).
const (
	MetricDuration  = "gpu__time_duration.sum"
	MetricSMPct     = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
	MetricMemoryPct = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
	MetricGrid      = "launch__grid_size"
	MetricBlock     = "launch__block_size"
	MetricRegisters = "launch__registers_per_thread"
	MetricSharedMem = "launch__shared_mem_per_block"
)

// NCUMetrics are the metrics NCUCommand collects, in its order.
var NCUMetrics = []string{MetricDuration, MetricSMPct, MetricMemoryPct, MetricGrid, MetricBlock, MetricRegisters, MetricSharedMem}

// maxNCUBytes bounds what ParseNCU reads.
const maxNCUBytes = 256 << 20

// NCULaunch is one kernel launch of an Nsight Compute CSV (ncu --csv
// --metrics ...: one row per launch and metric). Metrics the CSV lacks for
// the launch are absent from Has.
type NCULaunch struct {
	ID     int    // the "ID" column
	Line   int    // line of its first row
	Kernel string // the "Kernel Name" column as ncu wrote it
	// Values in atoll's units: µs, %, blocks, threads, registers, bytes.
	DurationUs, SMPct, MemoryPct float64
	Grid, Block, Registers       int
	SharedMem                    int
	Has                          map[string]bool // metric name -> present
}

// Func is the launch's function name: Kernel without a leading return type
// ("void ") or trailing parameter list ("(...)").
func (l NCULaunch) Func() string {
	s := strings.TrimSpace(l.Kernel)
	s = strings.TrimPrefix(s, "void ")
	if i := strings.IndexByte(s, '('); i > 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// ParseNCU reads an Nsight Compute CSV: rows of "ID", "Kernel Name",
// "Metric Name", "Metric Unit", "Metric Value" (other columns are
// ignored), one per launch and metric, launches in increasing ID. Lines
// before the header and ncu's "==PROF==" lines are skipped. Values may
// carry thousands separators; durations may be in ns, us, ms or s
// (--print-units base gives ns); sizes in byte, Kbyte or Mbyte. Errors
// (wrapping ErrNCU) name the line.
func ParseNCU(r io.Reader) ([]NCULaunch, error) {
	lr := &io.LimitedReader{R: r, N: maxNCUBytes + 1}
	cr := csv.NewReader(lr)
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true
	var (
		col    map[string]int
		width  int // fields of the header
		out    []NCULaunch
		byID   = map[int]int{}
		header = []string{"ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"}
	)
	for {
		rec, err := cr.Read()
		if lr.N <= 0 {
			return nil, fmt.Errorf("%w: larger than %d MiB", ErrNCU, maxNCUBytes>>20)
		}
		if err == io.EOF {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNCU, err)
		}
		if len(rec) == 1 && strings.HasPrefix(strings.TrimSpace(rec[0]), "==") {
			continue // ==PROF==, ==WARNING== lines
		}
		if col == nil {
			c := map[string]int{}
			for i, f := range rec {
				c[strings.TrimSpace(strings.TrimPrefix(f, "\ufeff"))] = i
			}
			ok := true
			for _, h := range header {
				if _, found := c[h]; !found {
					ok = false
				}
			}
			if ok {
				col, width = c, len(rec)
			}
			continue
		}
		if len(rec) != width {
			return nil, fmt.Errorf("%w: line %d: %d fields, the header has %d", ErrNCU, line, len(rec), width)
		}
		get := func(h string) string { return strings.TrimSpace(rec[col[h]]) }
		id, err := strconv.Atoi(get("ID"))
		if err != nil || id < 0 {
			return nil, fmt.Errorf("%w: line %d: ID %q is not a launch number", ErrNCU, line, get("ID"))
		}
		name := get("Kernel Name")
		if name == "" {
			return nil, fmt.Errorf("%w: line %d: launch %d has no kernel name", ErrNCU, line, id)
		}
		idx, seen := byID[id]
		if !seen {
			if n := len(out); n > 0 && id < out[n-1].ID {
				return nil, fmt.Errorf("%w: line %d: launch ID %d after %d: rows must be in launch order", ErrNCU, line, id, out[n-1].ID)
			}
			out = append(out, NCULaunch{ID: id, Line: line, Kernel: name, Has: map[string]bool{}})
			idx = len(out) - 1
			byID[id] = idx
		}
		l := &out[idx]
		if l.Kernel != name {
			return nil, fmt.Errorf("%w: line %d: launch %d is %q here and %q on line %d", ErrNCU, line, id, name, l.Kernel, l.Line)
		}
		metric := get("Metric Name")
		if err := l.set(metric, get("Metric Unit"), get("Metric Value")); err != nil {
			return nil, fmt.Errorf("%w: line %d: launch %d (%s) %s: %w", ErrNCU, line, id, name, metric, err)
		}
	}
	if col == nil {
		return nil, fmt.Errorf("%w: no header with %s columns (collect with: ncu --csv --metrics ...; see atoll profile --print-ncu-command)", ErrNCU, strings.Join(quoteAll(header), ", "))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no launches after the header", ErrNCU)
	}
	return out, nil
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strconv.Quote(v)
	}
	return out
}

// set stores one metric value in atoll's units.
func (l *NCULaunch) set(metric, unit, value string) error {
	parse := func() (float64, error) {
		v, err := strconv.ParseFloat(strings.ReplaceAll(value, ",", ""), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return 0, fmt.Errorf("value %q is not a non-negative number", value)
		}
		return v, nil
	}
	count := func() (int, error) {
		v, err := parse()
		if err != nil {
			return 0, err
		}
		if v != math.Trunc(v) || v > math.MaxInt32 {
			return 0, fmt.Errorf("value %q is not a count", value)
		}
		if u := strings.ToLower(unit); u != "" && !strings.Contains(u, "block") && !strings.Contains(u, "thread") && !strings.Contains(u, "register") && !strings.Contains(u, "byte") {
			return 0, fmt.Errorf("unit %q is not a count", unit)
		}
		return int(v), nil
	}
	if l.Has[metric] {
		return fmt.Errorf("given twice")
	}
	switch metric {
	case MetricDuration:
		v, err := parse()
		if err != nil {
			return err
		}
		scale, ok := map[string]float64{"nsecond": 1e-3, "ns": 1e-3, "usecond": 1, "us": 1, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}[strings.ToLower(unit)]
		if !ok {
			return fmt.Errorf("unit %q is not a time (want nsecond, usecond, msecond or second)", unit)
		}
		l.DurationUs = v * scale
		if !(l.DurationUs > 0) {
			return fmt.Errorf("duration must be > 0, got %q %s", value, unit)
		}
	case MetricSMPct, MetricMemoryPct:
		v, err := parse()
		if err != nil {
			return err
		}
		if unit != "%" {
			return fmt.Errorf("unit %q is not %%", unit)
		}
		if v > 100.5 { // ncu's sustained peaks can be exceeded by rounding, never by much
			return fmt.Errorf("%v%% is over 100%%", v)
		}
		if metric == MetricSMPct {
			l.SMPct = min(v, 100)
		} else {
			l.MemoryPct = min(v, 100)
		}
	case MetricGrid, MetricBlock, MetricRegisters:
		v, err := count()
		if err != nil {
			return err
		}
		switch metric {
		case MetricGrid:
			l.Grid = v
		case MetricBlock:
			l.Block = v
		default:
			l.Registers = v
		}
	case MetricSharedMem:
		v, err := parse()
		if err != nil {
			return err
		}
		scale, ok := map[string]float64{"byte": 1, "byte/block": 1, "kbyte": 1e3, "kbyte/block": 1e3, "kibyte": 1024, "kibyte/block": 1024, "mbyte": 1e6, "mbyte/block": 1e6}[strings.ToLower(unit)]
		if !ok {
			return fmt.Errorf("unit %q is not a size in bytes", unit)
		}
		l.SharedMem = int(math.Round(v * scale))
	default:
		return nil // other metrics are ignored
	}
	l.Has[metric] = true
	return nil
}

// at is where l stands in the CSV named file ("" if unnamed), for errors.
func (l NCULaunch) at(file string) string {
	s := fmt.Sprintf("line %d: launch ID %d (%q)", l.Line, l.ID, l.Kernel)
	if file != "" {
		s = file + ": " + s
	}
	return s
}

// NCUExpect is what the model launches for one kernel of a profile: the
// CUDA function and the launch's total blocks and threads per block.
type NCUExpect struct {
	Func          string
	Blocks, Block int
}

// ApplyNCU fills p's durations and compute/memory percentages from
// Nsight Compute launches (ParseNCU), matching launch j to kernel j mod
// len(p.Kernels) by order AND by function name, grid and block: the CSV
// must hold one or more whole passes of the model, and the first launch
// that differs is an error naming its line, ID and name. With several
// passes each kernel gets the median over them (spreadUs: p90 − p10;
// 0 for one pass). computePct becomes sm__throughput, memoryPct
// gpu__compute_memory_throughput (both % of ncu's sustained peaks), the
// class is recomputed, Source becomes "ncu" and the notes say so (file
// names the CSV in them). Registers and shared memory are not taken from
// the CSV (the driver's are recorded already). p is changed only on
// success.
func ApplyNCU(p *profiles.Profile, launches []NCULaunch, want []NCUExpect, file string) error {
	n := len(p.Kernels)
	if n == 0 || len(want) != n {
		return fmt.Errorf("%w: the profile has %d kernels and %d expected launches", ErrNCU, n, len(want))
	}
	if len(launches) == 0 {
		return fmt.Errorf("%w: no launches", ErrNCU)
	}
	for j, l := range launches {
		i := j % n
		k, w := &p.Kernels[i], want[i]
		where := l.at(file)
		if l.Func() != w.Func {
			return fmt.Errorf("%w: %s is row %d of the CSV, which should be kernels[%d] (%q) of %s bs%d, function %q: the CSV is not of this model and batch (or holds other launches; collect it with the command --print-ncu-command prints)",
				ErrNCU, where, j, i, k.Name, p.Model, p.Batch, w.Func)
		}
		if !l.Has[MetricDuration] {
			return fmt.Errorf("%w: %s has no %s", ErrNCU, where, MetricDuration)
		}
		if l.Has[MetricGrid] && l.Grid != w.Blocks {
			return fmt.Errorf("%w: %s launches %d blocks; kernels[%d] (%q) launches %d", ErrNCU, where, l.Grid, i, k.Name, w.Blocks)
		}
		if l.Has[MetricBlock] && l.Block != w.Block {
			return fmt.Errorf("%w: %s has %d threads per block; kernels[%d] (%q) has %d", ErrNCU, where, l.Block, i, k.Name, w.Block)
		}
		for _, m := range []string{MetricSMPct, MetricMemoryPct} {
			if launches[0].Has[m] != l.Has[m] {
				return fmt.Errorf("%w: %s: %s is given for some launches and not others", ErrNCU, where, m)
			}
		}
	}
	if len(launches)%n != 0 {
		return fmt.Errorf("%w: %d launches are not whole passes of %s bs%d (%d kernels each): launch ID %d (%q, line %d) starts an incomplete pass",
			ErrNCU, len(launches), p.Model, p.Batch, n, launches[len(launches)/n*n].ID, launches[len(launches)/n*n].Kernel, launches[len(launches)/n*n].Line)
	}
	passes := len(launches) / n
	ks := make([]profiles.Kernel, n)
	copy(ks, p.Kernels)
	for i := range ks {
		var d, sm, mem []float64
		for r := range passes {
			l := launches[r*n+i]
			d = append(d, l.DurationUs)
			sm = append(sm, l.SMPct)
			mem = append(mem, l.MemoryPct)
		}
		k := &ks[i]
		k.DurationUs = max(round(percentile(d, 50), 1e3), 0.001)
		k.SpreadUs = round(percentile(d, 90)-percentile(d, 10), 1e3)
		if launches[0].Has[MetricSMPct] {
			k.ComputePct = round(percentile(sm, 50), 100)
		}
		if launches[0].Has[MetricMemoryPct] {
			k.MemoryPct = round(percentile(mem, 50), 100)
		}
		k.Class = Classify(k.ComputePct, k.MemoryPct)
	}
	p.Kernels = ks
	p.Source = profiles.SourceNcu
	if p.Notes == nil {
		p.Notes = map[string]string{}
	}
	p.Notes["ncu"] = fmt.Sprintf("durationUs (%s), computePct (%s) and memoryPct (%s) imported from Nsight Compute CSV %s: %d pass(es), median over passes; "+
		"each launch matched to its kernel by order and by function, grid and block. ncu serialises kernels, and by default locks clocks to base and flushes caches before each, "+
		"so its durations are usually longer than the event-timed ones; scaling, registers and shared memory are still the event/driver measurement's",
		MetricDuration, MetricSMPct, MetricMemoryPct, file, passes)
	p.Notes["durationUs"] = fmt.Sprintf("median of %d Nsight Compute pass(es)", passes)
	p.Notes["spreadUs"] = "p90 - p10 over the Nsight Compute passes (0 for one pass)"
	p.Notes["percent"] = "computePct = ncu sm__throughput (% of the SMs' sustained peak), memoryPct = ncu gpu__compute_memory_throughput (% of the memory system's sustained peak)"
	return nil
}

// NCUCommand is the command line that collects the CSV ApplyNCU reads for
// a model: ncu around `atoll profile --ncu-pass`, which runs exactly one
// forward pass (no peaks, warm-ups, blockers or scaling), so the CSV holds
// exactly the model's launches.
func NCUCommand(atoll, model string, batch int, substitute bool) string {
	sub := ""
	if substitute {
		sub = " --substitute"
	}
	return fmt.Sprintf("ncu --csv --print-units base --metrics %s %s profile --model %s --batch %d%s --ncu-pass > %s-bs%d.ncu.csv",
		strings.Join(NCUMetrics, ","), atoll, model, batch, sub, model, batch)
}
