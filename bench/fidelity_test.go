package bench

import (
	"math"
	"strings"
	"testing"
)

// fidelityCell is a cell of runs with the given HP p50, p99 (µs) and BE
// normalized throughput per policy.
func fidelityCell(name string, runs map[string][3]float64, order []string) *MatrixCell {
	c := &MatrixCell{Result: CellResult{Cell: CellSpec{Name: name}}}
	for _, p := range order {
		v := runs[p]
		be := v[2]
		c.Reports = append(c.Reports, &Report{Policy: p, HP: Latency{P50: v[0], P99: v[1]}, BENormalized: &be})
	}
	return c
}

// The fidelity table's figures against hand-computed ones: per run the
// errors of HP p50, p99 and BE, within 10 % or the GPU CI, the medians,
// and whether each cell ranks the policies as the GPU did.
func TestFidelityFigures(t *testing.T) {
	order := []string{"orion", "atoll"}
	gpu := []*MatrixCell{
		fidelityCell("a", map[string][3]float64{"orion": {600, 2000, 0.30}, "atoll": {700, 2100, 0.40}}, order),
		fidelityCell("b", map[string][3]float64{"orion": {1200, 5000, 0.36}, "atoll": {1300, 4800, 0.42}}, order),
	}
	sim := []*MatrixCell{
		// a: p50 −10 % / +0 %, p99 +5 % / +20 %, BE +10 % / −25 %: BE order flips.
		fidelityCell("a", map[string][3]float64{"orion": {540, 2100, 0.33}, "atoll": {700, 2520, 0.30}}, order),
		// b: p50 +25 % / +0 %, p99 −2 % / +5 %: HP order flips; BE +0 % / +5 %.
		fidelityCell("b", map[string][3]float64{"orion": {1500, 4900, 0.36}, "atoll": {1300, 5040, 0.441}}, order),
	}
	gpu[0].Reports[1].P99CI = &CI{Lo: 1900, Hi: 2600} // atoll's +20 % lies inside its CI
	var b strings.Builder
	if err := FidelityTable(&b, gpu, sim); err != nil {
		t.Fatal(err)
	}
	f := FidelitySummary(gpu, sim)
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if f.Runs != 4 || f.Within != 4 || f.Cells != 2 || f.RankP99 != 1 || f.RankBE != 1 {
		t.Errorf("runs %d within %d cells %d rankP99 %d rankBE %d; want 4 4 2 1 1\n%s", f.Runs, f.Within, f.Cells, f.RankP99, f.RankBE, b.String())
	}
	// |p50 errors| 0.10, 0, 0.25, 0: median 0.05; |p99| 0.05, 0.2, 0.02, 0.05: 0.05;
	// |BE| 0.10, 0.25, 0, 0.05: 0.075.
	if !near(f.MedianP50, 0.05) || !near(f.MedianP99, 0.05) || !near(f.MedianBE, 0.075) {
		t.Errorf("medians p50 %v p99 %v BE %v; want 0.05 0.05 0.075", f.MedianP50, f.MedianP99, f.MedianBE)
	}
	if !strings.Contains(b.String(), "| a | orion | 0.600 / 0.540 (-10%) |") {
		t.Errorf("table lacks orion's p50 column in cell a:\n%s", b.String())
	}
}

// Where both sides split BE's throughput by HP busy and idle time, the
// table says so run by run; reports without the split add no table.
func TestFidelityBusySplit(t *testing.T) {
	order := []string{"orion", "atoll"}
	gpu := []*MatrixCell{fidelityCell("a", map[string][3]float64{"orion": {600, 2000, 0.30}, "atoll": {700, 2100, 0.40}}, order)}
	sim := []*MatrixCell{fidelityCell("a", map[string][3]float64{"orion": {600, 2000, 0.30}, "atoll": {700, 2100, 0.45}}, order)}
	var b strings.Builder
	if err := FidelityTable(&b, gpu, sim); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Where BE's work came from") {
		t.Errorf("a busy split without the reports' figures:\n%s", b.String())
	}
	f := func(v float64) *float64 { return &v }
	for i, c := range []*MatrixCell{gpu[0], sim[0]} {
		r := c.Reports[1]
		r.BEWorkPerSec = 0.4
		r.HPBusyShare, r.BEBesideBusyHP, r.BEWhileHPIdle = f(0.58-0.07*float64(i)), f(0.36+0.32*float64(i)), f(0.75)
	}
	sim[0].Reports[1].BEDryGaps = &Latency{Count: 100, P50: 8.2, P99: 248.4}
	b.Reset()
	if err := FidelityTable(&b, gpu, sim); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| a | atoll | 58 % / 51 % | 0.36 / 0.68 | 0.75 / 0.75 | – / – | – / 8, 248 |") || strings.Count(b.String(), "| a | orion |") != 1 {
		t.Errorf("busy split not as the reports say:\n%s", b.String())
	}
}

// The HP p99 ranking asks the simulator for the GPU's order only where the
// GPU's CIs separate two policies.
func TestSameP99Order(t *testing.T) {
	ci := func(lo, hi float64) *CI { return &CI{Lo: lo, Hi: hi} }
	for _, c := range []struct {
		name string
		rs   []rankedP99
		want bool
	}{
		{"overlapping CIs, flipped", []rankedP99{{4767, ci(4406, 5048), 5033}, {4813, ci(4554, 5138), 4946}}, true},
		{"separate CIs, flipped", []rankedP99{{2186, ci(2030, 2346), 2400}, {2713, ci(2523, 2873), 2379}}, false},
		{"separate CIs, same order", []rankedP99{{2186, ci(2030, 2346), 2341}, {2713, ci(2523, 2873), 2379}}, true},
		{"no CI: strict", []rankedP99{{5000, nil, 4900}, {4800, nil, 5040}}, false},
		{"one of three pairs separated and flipped", []rankedP99{{4767, ci(4406, 5048), 5033}, {4813, ci(4554, 5138), 4946}, {5283, ci(5200, 5692), 4900}}, false},
	} {
		if got := sameP99Order(c.rs); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// HP alone gets a row and a line of its own (the first dedicated run),
// outside the co-located policies' counts.
func TestFidelityDedicated(t *testing.T) {
	order := []string{"dedicated-1", "orion", "dedicated-2"}
	gpu := []*MatrixCell{fidelityCell("a", map[string][3]float64{"dedicated-1": {580, 2000, 0}, "orion": {600, 2100, 0.3}, "dedicated-2": {590, 2050, 0}}, order)}
	sim := []*MatrixCell{fidelityCell("a", map[string][3]float64{"dedicated-1": {570, 2300, 0}, "orion": {610, 2150, 0.3}, "dedicated-2": {570, 2300, 0}}, order)}
	var b strings.Builder
	if err := FidelityTable(&b, gpu, sim); err != nil {
		t.Fatal(err)
	}
	f := FidelitySummary(gpu, sim)
	out := b.String()
	if f.Runs != 1 || f.Within != 1 {
		t.Errorf("co-located runs %d within %d: want 1 and 1 (dedicated apart)\n%s", f.Runs, f.Within, out)
	}
	if !strings.Contains(out, "| a | dedicated | 0.580 / 0.570 (-2%) | 2.000 | 2.300 | +15% |") || strings.Count(out, "| dedicated |") != 1 ||
		!strings.Contains(out, "HP alone (dedicated, each cell's first run; not in the counts above): HP p99 within 10 % (or the GPU CI) in 0 of 1 cells, median |error| 15 %.") {
		t.Errorf("dedicated row or line missing:\n%s", out)
	}
	if strings.Contains(out, "HP kernels alone") {
		t.Errorf("a kernels-alone line without soloKernelsUs in the reports:\n%s", out)
	}
	gpu[0].Reports[0].SoloKernelsUs, sim[0].Reports[0].SoloKernelsUs = 431, 449
	b.Reset()
	if err := FidelityTable(&b, gpu, sim); err != nil {
		t.Fatal(err)
	}
	if want := "GPU / sim: a 431 / 449 µs (+4 %)."; !strings.Contains(b.String(), want) {
		t.Errorf("the kernels-alone line lacks %q:\n%s", want, b.String())
	}
}

// FidelityRepeats against hand-computed counts: two series of one cell.
// priority: GPU 10 and 14 ms (span +40 %), simulated 8 (−20 %, outside the
// span) and 12 ms (−14 %, inside it); orion: GPU 2.0 and 2.1 ms,
// simulated 2.1 (+5 %) and 2.0 (−5 %); the second GPU series is within
// 10 % of the first for orion, not for priority. Mismatched series are
// refused.
func TestFidelityRepeats(t *testing.T) {
	order := []string{"dedicated-1", "priority", "orion", "dedicated-2"}
	cell := func(ded, prio, orion float64) []*MatrixCell {
		return []*MatrixCell{fidelityCell("a", map[string][3]float64{"dedicated-1": {500, ded}, "priority": {900, prio}, "orion": {600, orion}, "dedicated-2": {500, 9e9}}, order)}
	}
	gpu := [][]*MatrixCell{cell(1800, 10000, 2000), cell(1900, 14000, 2100)}
	sim := [][]*MatrixCell{cell(1800, 8000, 2100), cell(1900, 12000, 2000)}
	var b strings.Builder
	if err := FidelityRepeats(&b, gpu, sim); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| a | priority | 10.000 / 14.000 | +40% | 8.000 / 12.000 | -20%, -14% (span) |",
		"| a | orion | 2.000 / 2.100 | +5% | 2.100 / 2.000 | +5% ✓, -5% ✓ |",
		"| priority | 0 of 2 | 1 of 2 | 0 of 1 |",
		"| orion | 2 of 2 | 2 of 2 | 1 of 1 |",
		"| dedicated | 2 of 2 | 2 of 2 | 1 of 1 |",
		"| all | 4 of 6 | 5 of 6 | 2 of 3 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "dedicated-2") || strings.Contains(out, "9000000") {
		t.Errorf("a dedicated run other than the first is compared:\n%s", out)
	}
	if err := FidelityRepeats(&b, gpu[:1], sim[:1]); err == nil {
		t.Error("one series accepted: want two or more")
	}
}
