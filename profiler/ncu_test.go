package profiler_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/kernels"
	"atoll/models"
	"atoll/profiler"
	"atoll/profiles"
)

// ncuLaunch is one launch to write into a test CSV.
type ncuLaunch struct {
	name                  string
	durNs, smPct, memPct  float64
	grid, block, regs, sm int
}

// ncuCSV writes launches the way `ncu --csv --print-units base` does: a
// ==PROF== preamble, a header, then one row per launch and metric, with
// thousands separators in the values.
func ncuCSV(ls []ncuLaunch) string {
	var b strings.Builder
	b.WriteString("==PROF== Connected to process 4242 (/usr/local/bin/atoll)\n")
	b.WriteString(`"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"` + "\n")
	num := func(v float64) string {
		s := fmt.Sprintf("%.2f", v)
		if v >= 1000 {
			s = fmt.Sprintf("%d,%03d.%02d", int(v)/1000, int(v)%1000, int(math.Round(v*100))%100)
		}
		return s
	}
	for id, l := range ls {
		row := func(metric, unit, value string) {
			fmt.Fprintf(&b, `"%d","4242","atoll","127.0.0.1","%s","1","13","(%d, 1, 1)","(%d, 1, 1)","0","9.0","Command line profiler metrics","%s","%s","%s"`+"\n",
				id, l.name, l.block, l.grid, metric, unit, value)
		}
		row(profiler.MetricDuration, "nsecond", num(l.durNs))
		row(profiler.MetricSMPct, "%", num(l.smPct))
		row(profiler.MetricMemoryPct, "%", num(l.memPct))
		row(profiler.MetricGrid, "", fmt.Sprint(l.grid))
		row(profiler.MetricBlock, "", fmt.Sprint(l.block))
		row(profiler.MetricRegisters, "register/thread", fmt.Sprint(l.regs))
		row(profiler.MetricSharedMem, "byte/block", fmt.Sprint(l.sm))
	}
	b.WriteString("==PROF== Disconnected from process 4242\n")
	return b.String()
}

// model returns an estimated profile of a zoo model with what ncu would
// see of each of its launches (every op of vgg19 has a library kernel).
func modelForNCU(t testing.TB, model string) (*profiles.Profile, []profiler.NCUExpect, []ncuLaunch) {
	t.Helper()
	layers := ops(t, model, 1)
	p, err := profiler.Estimate(gpu.H100SXM, model, 1, layers)
	if err != nil {
		t.Fatal(err)
	}
	var want []profiler.NCUExpect
	var ls []ncuLaunch
	for i, l := range layers {
		g := l.Op.Geometry()
		fn := l.Op.Kernel() + "_plain"
		want = append(want, profiler.NCUExpect{Func: fn, Blocks: g.Grid.Count(), Block: g.Block.Count()})
		name := fn
		if i%2 == 1 {
			name = "void " + fn + "(Ctl, Params)" // ncu's demangled form
		}
		ls = append(ls, ncuLaunch{name: name, durNs: 1000 + 10*float64(i), smPct: 70 - float64(i), memPct: 10 + float64(i), grid: g.Grid.Count(), block: g.Block.Count(), regs: 40, sm: 1024})
	}
	return p, want, ls
}

func TestParseAndApplyNCU(t *testing.T) {
	p, want, ls := modelForNCU(t, "vgg19")
	// Two passes: the second 10% slower; median of two is their mean.
	second := make([]ncuLaunch, len(ls))
	for i, l := range ls {
		l.durNs *= 1.1
		second[i] = l
	}
	launches, err := profiler.ParseNCU(strings.NewReader(ncuCSV(append(append([]ncuLaunch{}, ls...), second...))))
	if err != nil {
		t.Fatal(err)
	}
	if len(launches) != 2*len(ls) {
		t.Fatalf("%d launches, want %d", len(launches), 2*len(ls))
	}
	if l := launches[1]; l.Func() != want[1].Func || l.Registers != 40 || l.SharedMem != 1024 || l.Line != 10 {
		t.Errorf("launch 1: %+v (func %q)", l, l.Func())
	}
	if err := profiler.ApplyNCU(p, launches, want, "vgg19.csv"); err != nil {
		t.Fatal(err)
	}
	if p.Source != profiles.SourceNcu || !strings.Contains(p.Notes["ncu"], "vgg19.csv") || !strings.Contains(p.Notes["ncu"], "2 pass") {
		t.Errorf("source %s, notes %v", p.Source, p.Notes)
	}
	for i, k := range p.Kernels {
		wantUs := (1000 + 10*float64(i)) * 1.05 / 1000
		if math.Abs(k.DurationUs-wantUs) > 0.002 {
			t.Errorf("kernels[%d] %s: %.4f us, want %.4f", i, k.Name, k.DurationUs, wantUs)
		}
		if k.SpreadUs <= 0 {
			t.Errorf("kernels[%d]: no spread over two passes", i)
		}
		if k.ComputePct != 70-float64(i) || k.MemoryPct != 10+float64(i) {
			t.Errorf("kernels[%d]: %% %v/%v", i, k.ComputePct, k.MemoryPct)
		}
		if k.Class != profiler.Classify(k.ComputePct, k.MemoryPct) {
			t.Errorf("kernels[%d]: class %s", i, k.Class)
		}
	}
	if err := profiles.Check(p, models.Ops(ops(t, "vgg19", 1)), gpu.H100SXM); err != nil {
		t.Error(err)
	}
}

func TestApplyNCUMismatch(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func([]ncuLaunch) []ncuLaunch
		want string
	}{
		"renamed": {func(ls []ncuLaunch) []ncuLaunch { ls[3].name = "gemm_bf16_64x64_plain"; return ls },
			`launch ID 3 ("gemm_bf16_64x64_plain") is row 3 of the CSV, which should be kernels[3] (`},
		"swapped": {func(ls []ncuLaunch) []ncuLaunch { ls[1], ls[2] = ls[2], ls[1]; return ls }, "launch ID 1"},
		"missing": {func(ls []ncuLaunch) []ncuLaunch { return ls[:len(ls)-1] }, "incomplete pass"},
		"extra":   {func(ls []ncuLaunch) []ncuLaunch { return append(ls, ls[0], ls[1]) }, "incomplete pass"},
		"prefix": {func(ls []ncuLaunch) []ncuLaunch {
			return append([]ncuLaunch{{name: "gemm_bf16_128x128_plain", durNs: 1e6, grid: 4096, block: 256}}, ls...)
		}, "launch ID 0"},
		"grid":  {func(ls []ncuLaunch) []ncuLaunch { ls[5].grid++; return ls }, "launch ID 5"},
		"block": {func(ls []ncuLaunch) []ncuLaunch { ls[2].block = 64; return ls }, "threads per block"},
	} {
		p, want, ls := modelForNCU(t, "vgg19")
		before := p.Kernels[0]
		launches, err := profiler.ParseNCU(strings.NewReader(ncuCSV(tc.edit(ls))))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = profiler.ApplyNCU(p, launches, want, "x.csv")
		if !errors.Is(err, profiler.ErrNCU) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrNCU containing %q", name, err, tc.want)
		}
		if p.Source != profiles.SourceEstimated || p.Kernels[0].DurationUs != before.DurationUs {
			t.Errorf("%s: the profile was changed by a failed import", name)
		}
	}
}

func TestParseNCUErrors(t *testing.T) {
	hdr := `"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"` + "\n"
	for name, tc := range map[string]struct{ csv, want string }{
		"empty":        {"", "no header"},
		"no header":    {"a,b,c\n1,2,3\n", "no header"},
		"header only":  {hdr, "no launches"},
		"bad id":       {hdr + `"x","k","gpu__time_duration.sum","nsecond","5"` + "\n", `line 2: ID "x"`},
		"no name":      {hdr + `"0","","gpu__time_duration.sum","nsecond","5"` + "\n", "no kernel name"},
		"bad unit":     {hdr + `"0","k","gpu__time_duration.sum","cycle","5"` + "\n", `unit "cycle"`},
		"zero time":    {hdr + `"0","k","gpu__time_duration.sum","nsecond","0"` + "\n", "must be > 0"},
		"not a number": {hdr + `"0","k","gpu__time_duration.sum","nsecond","n/a"` + "\n", `"n/a"`},
		"negative":     {hdr + `"0","k","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","-1"` + "\n", "non-negative"},
		"over 100":     {hdr + `"0","k","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","180"` + "\n", "over 100"},
		"pct unit":     {hdr + `"0","k","sm__throughput.avg.pct_of_peak_sustained_elapsed","x","18"` + "\n", "is not %"},
		"fraction":     {hdr + `"0","k","launch__grid_size","","1.5"` + "\n", "not a count"},
		"twice":        {hdr + `"0","k","launch__grid_size","","1"` + "\n" + `"0","k","launch__grid_size","","1"` + "\n", "line 3: launch 0 (k) launch__grid_size: given twice"},
		"renamed":      {hdr + `"0","k","launch__grid_size","","1"` + "\n" + `"0","j","launch__block_size","","1"` + "\n", `line 3: launch 0 is "j" here and "k" on line 2`},
		"order":        {hdr + `"1","k","launch__grid_size","","1"` + "\n" + `"0","k","launch__block_size","","1"` + "\n", "line 3: launch ID 0 after 1"},
		"short row":    {hdr + `"0","k","launch__grid_size",""` + "\n", "line 2: 4 fields"},
		"smem unit":    {hdr + `"0","k","launch__shared_mem_per_block","furlong","1"` + "\n", `unit "furlong"`},
	} {
		_, err := profiler.ParseNCU(strings.NewReader(tc.csv))
		if !errors.Is(err, profiler.ErrNCU) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrNCU containing %q", name, err, tc.want)
		}
	}
	// Units: ms and Kbyte are converted; other metrics are ignored.
	ls, err := profiler.ParseNCU(strings.NewReader(hdr +
		`"0","void k(int)","gpu__time_duration.sum","msecond","1.5"` + "\n" +
		`"0","void k(int)","launch__shared_mem_per_block","Kbyte/block","2"` + "\n" +
		`"0","void k(int)","dram__bytes.sum","byte","7"` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l := ls[0]; l.DurationUs != 1500 || l.SharedMem != 2000 || l.Func() != "k" || l.Has["dram__bytes.sum"] {
		t.Errorf("%+v", l)
	}
	// A launch without a duration cannot be applied.
	p, want, _ := modelForNCU(t, "vgg19")
	var rows strings.Builder
	rows.WriteString(hdr)
	for i, w := range want {
		fmt.Fprintf(&rows, `"%d","%s","launch__grid_size","","%d"`+"\n", i, w.Func, w.Blocks)
	}
	ls, err = profiler.ParseNCU(strings.NewReader(rows.String()))
	if err != nil {
		t.Fatal(err)
	}
	if err := profiler.ApplyNCU(p, ls, want, "x"); !errors.Is(err, profiler.ErrNCU) || !strings.Contains(err.Error(), "has no gpu__time_duration.sum") {
		t.Errorf("no durations: %v", err)
	}
}

// Measure applies an import against what the model launches on the device
// (here with the avgpool substituted: ncu sees the pool kernel).
func TestMeasureWithNCU(t *testing.T) {
	dev := simDev(t, sim.Config{})
	layers := ops(t, "resnet50", 1)
	var ls []ncuLaunch
	for _, l := range layers {
		op := l.Op
		if l.Name == "avgpool" {
			op = kernels.Pool{N: 1, H: 7, W: 7, C: 2048, R: 7, S: 7, Stride: 1, In: kernels.BF16}
		}
		g := op.Geometry()
		ls = append(ls, ncuLaunch{name: op.Kernel() + "_plain", durNs: 4321, smPct: 12.5, memPct: 61, grid: g.Grid.Count(), block: g.Block.Count()})
	}
	launches, err := profiler.ParseNCU(strings.NewReader(ncuCSV(ls)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := profiler.Measure(context.Background(), dev, kernels.New(dev), "resnet50", 1, profiler.MeasureOptions{
		Substitute: true, Runs: 1, NoScaling: true, NCU: launches, NCUFile: "r50.csv"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != profiles.SourceNcu || p.Kernels[54].DurationUs != 4.321 || p.Kernels[54].Class != profiles.ClassMemory {
		t.Errorf("source %s, avgpool %+v", p.Source, p.Kernels[54])
	}
	// Without the substitution the model cannot run at all; with the CSV of
	// another batch it is refused naming the first launch.
	launches[0].Kernel = "conv2d_bf16_128x128_plain"
	if _, err := profiler.Measure(context.Background(), dev, kernels.New(dev), "resnet50", 1, profiler.MeasureOptions{
		Substitute: true, Runs: 1, NoScaling: true, NCU: launches}); !errors.Is(err, profiler.ErrNCU) || !strings.Contains(err.Error(), "launch ID 0") {
		t.Errorf("mismatched CSV: %v", err)
	}
}

func TestNCUCommand(t *testing.T) {
	c := profiler.NCUCommand("bin/atoll", "resnet50", 2, true)
	for _, want := range append([]string{"ncu --csv", "--print-units base", "bin/atoll profile --model resnet50 --batch 2 --substitute --ncu-pass", "> resnet50-bs2.ncu.csv"}, profiler.NCUMetrics...) {
		if !strings.Contains(c, want) {
			t.Errorf("%q lacks %q", c, want)
		}
	}
	if strings.Contains(profiler.NCUCommand("atoll", "vgg19", 1, false), "--substitute") {
		t.Error("substitute without asking")
	}
}

// FuzzParseNCU: ParseNCU never panics, and what it accepts is well formed.
func FuzzParseNCU(f *testing.F) {
	_, _, ls := modelForNCU(f, "vgg19")
	f.Add(ncuCSV(ls[:3]))
	f.Add(`"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"` + "\n" + `"0","k","gpu__time_duration.sum","usecond","1,5"`)
	f.Add("==PROF== x\n\"ID\"\n")
	f.Fuzz(func(t *testing.T, s string) {
		out, err := profiler.ParseNCU(strings.NewReader(s))
		if err != nil {
			if !errors.Is(err, profiler.ErrNCU) {
				t.Fatalf("error does not wrap ErrNCU: %v", err)
			}
			return
		}
		if len(out) == 0 {
			t.Fatal("no launches and no error")
		}
		for i, l := range out {
			if l.Kernel == "" || l.Line < 1 || (i > 0 && l.ID <= out[i-1].ID) {
				t.Fatalf("launch %d: %+v", i, l)
			}
			if l.Has[profiler.MetricDuration] && !(l.DurationUs > 0) {
				t.Fatalf("launch %d: duration %v", i, l.DurationUs)
			}
			if l.SMPct < 0 || l.SMPct > 100 || l.MemoryPct < 0 || l.MemoryPct > 100 {
				t.Fatalf("launch %d: %% %v %v", i, l.SMPct, l.MemoryPct)
			}
		}
	})
}
