package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
)

// FidelityTable compares a simulated matrix run with a GPU run of the same
// matrix file, cell by cell and policy by policy: HP p99 (absolute and
// overhead over dedicated) and BE normalized throughput, the error of each,
// and whether the policies rank the same way (by HP p99: wherever the GPU's
// CIs tell two policies apart). Every cell counts as held
// out: nothing in the simulator is fitted to these runs.
func FidelityTable(w io.Writer, gpuCells, simCells []*MatrixCell) error {
	_, err := fidelity(w, gpuCells, simCells)
	return err
}

// Fidelity is the summary of FidelityTable.
type Fidelity struct {
	Within, Runs        int     // HP p99 within 10 % (or the GPU CI), of policy runs compared
	RankP99, RankBE     int     // cells whose policy order matches, by HP p99 and by BE
	Cells               int     // cells compared
	MedianP99, MedianBE float64 // median |relative error|
	MedianP50           float64 // median |relative error| of HP p50
	// Policies holds the same figures per policy, in the order the GPU
	// reports name them (RankP99, RankBE and Cells unused).
	Policies []PolicyFidelity
}

// PolicyFidelity is Fidelity for the runs of one policy.
type PolicyFidelity struct {
	Policy string
	Fidelity
}

// FidelitySummary computes FidelityTable's summary line's figures.
func FidelitySummary(gpuCells, simCells []*MatrixCell) Fidelity {
	f, _ := fidelity(io.Discard, gpuCells, simCells)
	return f
}

func fidelity(w io.Writer, gpuCells, simCells []*MatrixCell) (Fidelity, error) {
	sim := map[string]*MatrixCell{}
	for _, c := range simCells {
		sim[c.Result.Cell.Name] = c
	}
	ew := &errWriter{w: w}
	ew.printf("| cell | policy | HP p50 ms, GPU / sim | GPU p99 ms | sim p99 ms | p99 error | GPU p99 overhead [95 %% CI] | sim p99 overhead | GPU BE norm | sim BE norm | BE error |\n")
	ew.printf("|---|---|---|---|---|---|---|---|---|---|---|\n")
	var p50Err, p99Err, beErr []float64
	within, total, rankP99, rankBE, cells := 0, 0, 0, 0, 0
	type perPolicy struct {
		within, runs int
		p50, p99, be []float64
	}
	var names, busyRows, soloRows []string
	pols := map[string]*perPolicy{}
	var ded perPolicy // HP alone (each cell's dedicated-1)
	for _, g := range gpuCells {
		s := sim[g.Result.Cell.Name]
		if s == nil || g.Result.Refused != "" || s.Result.Refused != "" {
			continue
		}
		sr := map[string]*Report{}
		for _, r := range s.Reports {
			sr[r.Policy] = r
		}
		var gb, sb []rank
		var p99s []rankedP99
		for _, r := range g.Reports {
			if strings.HasPrefix(r.Policy, "dedicated") {
				// HP alone: its first run, a row of its own, counted
				// apart from the co-located policies.
				if o := sr[r.Policy]; r.Policy == "dedicated-1" && o != nil {
					e := o.HP.P99/r.HP.P99 - 1
					ok := p99Within(r, o.HP.P99)
					ded.runs++
					if ok {
						ded.within++
					}
					ded.p99 = append(ded.p99, math.Abs(e))
					if r.SoloKernelsUs > 0 && o.SoloKernelsUs > 0 {
						soloRows = append(soloRows, fmt.Sprintf("%s %.0f / %.0f µs (%+.0f %%)", g.Result.Cell.Name,
							r.SoloKernelsUs, o.SoloKernelsUs, (o.SoloKernelsUs/r.SoloKernelsUs-1)*100))
					}
					ew.printf("| %s | dedicated | %.3f / %.3f (%+.0f%%) | %.3f | %.3f | %+.0f%%%s | | | – | – | – |\n", g.Result.Cell.Name,
						r.HP.P50/1e3, o.HP.P50/1e3, (o.HP.P50/r.HP.P50-1)*100, r.HP.P99/1e3, o.HP.P99/1e3, e*100, mark(ok))
				}
				continue
			}
			o := sr[r.Policy]
			if o == nil {
				continue
			}
			pp := pols[r.Policy]
			if pp == nil {
				pp = &perPolicy{}
				pols[r.Policy] = pp
				names = append(names, r.Policy)
			}
			e50 := o.HP.P50/r.HP.P50 - 1
			p50Err = append(p50Err, math.Abs(e50))
			pp.p50 = append(pp.p50, math.Abs(e50))
			e := o.HP.P99/r.HP.P99 - 1
			p99Err = append(p99Err, math.Abs(e))
			pp.p99 = append(pp.p99, math.Abs(e))
			total++
			pp.runs++
			ok := p99Within(r, o.HP.P99)
			if ok {
				within++
				pp.within++
			}
			be := math.NaN()
			if r.BENormalized != nil && o.BENormalized != nil && *r.BENormalized > 0 {
				be = *o.BENormalized / *r.BENormalized - 1
				beErr = append(beErr, math.Abs(be))
				pp.be = append(pp.be, math.Abs(be))
			}
			ew.printf("| %s | %s | %.3f / %.3f (%+.0f%%) | %.3f | %.3f | %+.0f%%%s | %s %s | %s | %s | %s | %s |\n", g.Result.Cell.Name, r.Policy,
				r.HP.P50/1e3, o.HP.P50/1e3, e50*100, r.HP.P99/1e3, o.HP.P99/1e3, e*100, mark(ok), pct(r.P99Overhead), ciPct(r.P99OverheadCI), pct(o.P99Overhead),
				num(r.BENormalized, "%.2f"), num(o.BENormalized, "%.2f"), signedPct(be))
			if r.HPBusyShare != nil && o.HPBusyShare != nil && r.BEWorkPerSec > 0 {
				busyRows = append(busyRows, fmt.Sprintf("| %s | %s | %.0f %% / %.0f %% | %s / %s | %s / %s | %s / %s | %s / %s |", g.Result.Cell.Name, r.Policy,
					100**r.HPBusyShare, 100**o.HPBusyShare, num(r.BEBesideBusyHP, "%.2f"), num(o.BEBesideBusyHP, "%.2f"),
					num(r.BEWhileHPIdle, "%.2f"), num(o.BEWhileHPIdle, "%.2f"), pctOf(r.BEDryShare), pctOf(o.BEDryShare),
					gapsOf(r.BEDryGaps), gapsOf(o.BEDryGaps)))
			}
			p99s = append(p99s, rankedP99{gpu: r.HP.P99, ci: r.P99CI, sim: o.HP.P99})
			gb, sb = append(gb, rank{r.Policy, -val(r.BENormalized)}), append(sb, rank{r.Policy, -val(o.BENormalized)})
		}
		if len(p99s) > 0 {
			cells++
			if sameP99Order(p99s) {
				rankP99++
			}
			if order(gb) == order(sb) {
				rankBE++
			}
		}
	}
	ew.printf("\nHP p99 within 10 %% (or inside the GPU run's CI): %d of %d (✓ above); median |error| HP p99 %.0f %%, BE normalized %.0f %%, HP p50 %.0f %%. "+
		"Policies ranked as on the GPU by HP p99 (where its CIs separate them) in %d of %d cells, by BE throughput in %d of %d.\n",
		within, total, sortedQuantile(p99Err, 0.5)*100, sortedQuantile(beErr, 0.5)*100, sortedQuantile(p50Err, 0.5)*100, rankP99, cells, rankBE, cells)
	if ded.runs > 0 {
		ew.printf("HP alone (dedicated, each cell's first run; not in the counts above): HP p99 within 10 %% (or the GPU CI) in %d of %d cells, median |error| %.0f %%.\n",
			ded.within, ded.runs, sortedQuantile(ded.p99, 0.5)*100)
	}
	if len(soloRows) > 0 {
		ew.printf("A request's HP kernels alone, summed as the request runs them (the first dedicated run's soloKernelsUs), GPU / sim: %s.\n", strings.Join(soloRows, "; "))
	}
	f := Fidelity{Within: within, Runs: total, RankP99: rankP99, RankBE: rankBE, Cells: cells,
		MedianP99: sortedQuantile(p99Err, 0.5), MedianBE: sortedQuantile(beErr, 0.5), MedianP50: sortedQuantile(p50Err, 0.5)}
	if len(names) > 0 {
		ew.printf("\n| policy | HP p99 within 10 %% (or the GPU CI) | median error, HP p99 | median error, BE normalized | median error, HP p50 |\n|---|---|---|---|---|\n")
	}
	for _, n := range names {
		pp := pols[n]
		pf := PolicyFidelity{Policy: n, Fidelity: Fidelity{Within: pp.within, Runs: pp.runs,
			MedianP99: sortedQuantile(pp.p99, 0.5), MedianBE: sortedQuantile(pp.be, 0.5), MedianP50: sortedQuantile(pp.p50, 0.5)}}
		f.Policies = append(f.Policies, pf)
		ew.printf("| %s | %d of %d | %.0f %% | %s | %.0f %% |\n", n, pf.Within, pf.Runs, pf.MedianP99*100, medianPct(pp.be), pf.MedianP50*100)
	}
	if len(busyRows) > 0 {
		ew.printf("\nWhere BE's work came from: the share of the run HP was busy, and BE's throughput beside busy HP and in HP's idle time, each of its alone rate (reports that carry them):\n\n")
		ew.printf("| cell | policy | HP busy, GPU / sim | BE beside busy HP, GPU / sim | BE in HP's idle time, GPU / sim | BE's stream empty while HP busy, GPU / sim | its empty spans beside busy HP, p50, p99 µs, GPU / sim |\n|---|---|---|---|---|---|---|\n")
		for _, row := range busyRows {
			ew.printf("%s\n", row)
		}
	}
	return f, ew.err
}

// p99Within is the acceptance's test of a simulated HP p99 against the GPU
// run r: within 10 % of r's, or inside r's CI.
func p99Within(r *Report, sim float64) bool {
	return math.Abs(sim/r.HP.P99-1) <= 0.10 || (r.P99CI != nil && r.P99CI.Contains(sim))
}

// gapsOf prints the p50 and p99 of BE's empty spans beside busy HP
// (Report.BEDryGaps; "–" for none).
func gapsOf(g *Latency) string {
	if g == nil || g.Count == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f, %.0f", g.P50, g.P99)
}

// pctOf prints a share as a whole percentage ("–" for none).
func pctOf(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", 100**v)
}

// medianPct prints the median of xs as a percentage ("–" for none).
func medianPct(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", sortedQuantile(xs, 0.5)*100)
}

// rankedP99 is one policy's HP p99 in a cell: the GPU's with its CI, and
// the simulator's.
type rankedP99 struct {
	gpu float64
	ci  *CI
	sim float64
}

// sameP99Order reports whether the simulator orders the policies by HP p99
// as the GPU does wherever the GPU's own runs tell them apart: for every
// pair whose GPU p99 CIs do not overlap (or, lacking a CI, whose p99s
// differ), the simulator's p99s must be in the same order. Pairs inside
// each other's noise on the GPU have no order to match.
func sameP99Order(rs []rankedP99) bool {
	for i, a := range rs {
		for _, b := range rs[i+1:] {
			if a.ci != nil && b.ci != nil && a.ci.Overlaps(*b.ci) || a.gpu == b.gpu {
				continue
			}
			if (a.gpu < b.gpu) != (a.sim < b.sim) {
				return false
			}
		}
	}
	return true
}

type rank struct {
	name string
	v    float64
}

func order(rs []rank) string {
	s := slices.Clone(rs)
	sort.SliceStable(s, func(i, j int) bool { return s[i].v < s[j].v })
	var names []string
	for _, r := range s {
		names = append(names, r.name)
	}
	return strings.Join(names, ">")
}

func val(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}

func mark(ok bool) string {
	if ok {
		return " ✓"
	}
	return ""
}

func signedPct(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%+.0f%%", v*100)
}

// sortedQuantile is Quantile of a sorted copy of xs.
func sortedQuantile(xs []float64, p float64) float64 {
	return Quantile(slices.Sorted(slices.Values(xs)), p)
}

// FidelityRepeats judges the simulator against repeated GPU series of the
// same cells — the same matrix file and arrivals run again, on the same
// machine or another — each with its own simulated replay (gpu[i] and
// sim[i], every series holding the same cells). A GPU near saturation
// does not repeat its own tail within 10 %, so beside the acceptance's
// test (the simulator within 10 % of its own series, or inside that run's
// CI) it counts the runs where the simulator lies within 10 % of its series
// or inside the span of the GPU's series (their lowest to highest HP p99),
// and how often the GPU's later series are within 10 % of its first.
// Dedicated runs (each cell's first) are compared like the policies'.
func FidelityRepeats(w io.Writer, gpu, sim [][]*MatrixCell) error {
	if len(gpu) < 2 || len(gpu) != len(sim) {
		return fmt.Errorf("%w: repeats: want two or more GPU series, each with its simulated replay (got %d GPU, %d simulated)", ErrMatrix, len(gpu), len(sim))
	}
	// A run compared: every policy's and each cell's first dedicated one.
	type key struct{ cell, policy string }
	runs := func(series []*MatrixCell) (map[key]*Report, []key) {
		m, keys := map[key]*Report{}, []key(nil)
		for _, c := range series {
			if c.Result.Refused != "" {
				continue
			}
			for _, r := range c.Reports {
				if strings.HasPrefix(r.Policy, "dedicated") && r.Policy != "dedicated-1" {
					continue
				}
				k := key{c.Result.Cell.Name, strings.TrimSuffix(r.Policy, "-1")}
				m[k], keys = r, append(keys, k)
			}
		}
		return m, keys
	}
	gs, ss := make([]map[key]*Report, len(gpu)), make([]map[key]*Report, len(sim))
	var keys []key // in the first series' order
	for i := range gpu {
		var ks []key
		gs[i], ks = runs(gpu[i])
		ss[i], _ = runs(sim[i])
		if i == 0 {
			keys = ks
		}
	}
	ew := &errWriter{w: w}
	head := "| cell | policy | GPU p99 ms, series 1.." + fmt.Sprint(len(gpu)) + " | GPU's span | sim p99 ms | sim error against its series |"
	ew.printf("%s\n|---|---|---|---|---|---|\n", head)
	type tally struct{ own, span, runs, gpuWithin, gpuRuns int }
	byPolicy := map[string]*tally{}
	var order []string
	var all tally
	for _, k := range keys {
		g, s := make([]float64, len(gpu)), make([]float64, len(sim))
		gr := make([]*Report, len(gpu))
		ok := true
		for i := range gpu {
			sr := ss[i][k]
			if gr[i] = gs[i][k]; gr[i] == nil || sr == nil || gr[i].HP.P99 <= 0 {
				ok = false
				break
			}
			g[i], s[i] = gr[i].HP.P99, sr.HP.P99
		}
		if !ok {
			continue // not in every series and replay
		}
		t := byPolicy[k.policy]
		if t == nil {
			t = &tally{}
			byPolicy[k.policy] = t
			order = append(order, k.policy)
		}
		lo, hi := slices.Min(g), slices.Max(g)
		var gcol, scol, ecol []string
		for i := range g {
			e := s[i]/g[i] - 1
			own := p99Within(gr[i], s[i])
			span := own || (s[i] >= lo && s[i] <= hi)
			for _, x := range []*tally{t, &all} {
				x.runs++
				if own {
					x.own++
				}
				if span {
					x.span++
				}
				if i > 0 {
					x.gpuRuns++
					if math.Abs(g[i]/g[0]-1) <= 0.10 {
						x.gpuWithin++
					}
				}
			}
			m := ""
			switch {
			case own:
				m = " ✓"
			case span:
				m = " (span)"
			}
			gcol, scol = append(gcol, fmt.Sprintf("%.3f", g[i]/1e3)), append(scol, fmt.Sprintf("%.3f", s[i]/1e3))
			ecol = append(ecol, fmt.Sprintf("%+.0f%%%s", e*100, m))
		}
		ew.printf("| %s | %s | %s | %+.0f%% | %s | %s |\n", k.cell, k.policy, strings.Join(gcol, " / "), (hi/lo-1)*100,
			strings.Join(scol, " / "), strings.Join(ecol, ", "))
	}
	ew.printf("\n| policy | sim within 10 %% of its own series (or its CI) | the same, or inside the GPU series' span | GPU series 2..%d within 10 %% of series 1 |\n|---|---|---|---|\n", len(gpu))
	for _, p := range order {
		t := byPolicy[p]
		ew.printf("| %s | %d of %d | %d of %d | %d of %d |\n", p, t.own, t.runs, t.span, t.runs, t.gpuWithin, t.gpuRuns)
	}
	ew.printf("| all | %d of %d | %d of %d | %d of %d |\n", all.own, all.runs, all.span, all.runs, all.gpuWithin, all.gpuRuns)
	return ew.err
}
