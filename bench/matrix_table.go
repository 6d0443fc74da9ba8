package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"atoll/sched"
)

// MatrixTables writes the matrix's results as Markdown: per cell, one row
// per atoll run (absolute HP latency with 95 % CIs, overhead over the
// pooled dedicated runs with its CI, HP and BE rates) and one per PyTorch
// setup measured on the cell's arrivals, then the delay by cause.
func MatrixTables(w io.Writer, cells []*MatrixCell) error {
	ew := &errWriter{w: w}
	for _, mc := range cells {
		res := mc.Result
		c := res.Cell
		ew.printf("### %s — %s bs%d beside %s bs%d, %s load %.2f\n\n", c.Name, c.HP, c.HPBatch, c.BE, c.BEBatch, c.Arrival, c.Load)
		ew.printf("%s (%s%s). HP solo %.0f µs (repeats %s), %.0f req/s offered, HP alone sustains %.0f req/s.",
			res.Device, res.Backend, driverText(res.Driver), res.SoloMedianUs, joinF(res.SoloUs, "%.0f"), res.RatePerSec, res.SustainedPerSec)
		if res.Refused != "" {
			ew.printf(" **Refused:** %s\n\n", res.Refused)
			continue
		}
		watched, stalled := stallsSeen(mc.Reports)
		if hj := res.HostJitter; hj != nil {
			ew.printf(" Host wake-up lateness p99 %.0f µs (max %.0f).", hj.P99, hj.Max)
			if hj.P99 > hostJitterWarnUs && !watched {
				ew.printf(" **The host stalled: every run of this cell is suspect.**")
			}
		}
		if stalled {
			ew.printf(" **The host stalled during runs long enough to reach their HP p99 (below): it is suspect.**")
		}
		for _, r := range mc.Reports {
			if r.BEAloneItersPerSec > 0 {
				ew.printf(" BE alone %.1f steps/s.", r.BEAloneItersPerSec)
				break
			}
		}
		if len(mc.Reports) > 0 && mc.Reports[0].HPGraphs != "" {
			ew.printf(" HP graphs: %s", mc.Reports[0].HPGraphs)
			if n := mc.Reports[0].HPGraphEvents; n > 0 {
				ew.printf(" (%d events each)", n)
			}
			ew.printf(".")
		}
		if rr := mc.Result.Rerun; len(rr) > 0 {
			var runs []string
			for _, r := range rr {
				runs = append(runs, fmt.Sprintf("%s (%d stalls, %.1f ms)", r.Run, r.Stalls, r.StallMs))
			}
			ew.printf(" Run again for the host's stalls, the first time: %s.", strings.Join(runs, ", "))
		}
		for _, r := range mc.Reports {
			if r.BEChunks > 0 || strings.HasPrefix(r.BEGraphs, "off:") {
				ew.printf(" BE chunk graphs: %s (%d chunks).", r.BEGraphs, r.BEChunks)
				break
			}
		}
		if c.HPMaxBatch > 1 {
			var by []string
			for _, r := range mc.Reports {
				if len(r.HPByBatch) > 0 {
					by = append(by, r.Policy+" "+byBatch(r.HPByBatch))
				}
			}
			ew.printf(" HP requests waiting are served together in passes of up to %d (PyTorch's rows: one at a time); requests by the batch of their pass: %s.",
				c.HPMaxBatch, strings.Join(by, "; "))
		}
		ew.printf(" %.1f s measured per run after %.1f s warm-up; command: `%s`\n\n", res.WindowSec, res.WarmupSec, res.Command)
		ew.printf("| run | HP req/s | HP p50 ms | HP p99 ms [95 %% CI] | p99 overhead [95 %% CI] | BE steps/s | BE norm | padded | unpadded |\n")
		ew.printf("|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range mc.Reports {
			ew.printf("| %s | %.0f | %.3f | %.3f %s | %s %s | %s | %s | %d | %d |\n",
				r.Policy, float64(r.HPCompleted)/r.Workload.DurationSec, r.HP.P50/1e3, r.HP.P99/1e3, ciMs(r.P99CI),
				pct(r.P99Overhead), ciPct(r.P99OverheadCI), steps(r.BEItersPerSec, r.Workload.BEModel != "" && !strings.HasPrefix(r.Policy, "dedicated")),
				beNorm(r), r.Padded, r.Unpadded)
		}
		for _, t := range mc.Torch {
			name := "PyTorch " + t.Setup
			if t.Setup == "green" {
				name = fmt.Sprintf("PyTorch green (BE on %d SMs)", t.GreenSMs)
			}
			be := "–"
			if t.BEStepsPerSec > 0 {
				be = fmt.Sprintf("%.1f", t.BEStepsPerSec)
			}
			ci := ""
			ci = ciMs(torchP99CI(t, c.Seed))
			norm := "–"
			if t.BEAloneSteps > 0 && t.BEStepsPerSec > 0 {
				norm = fmt.Sprintf("%.2f", t.BEStepsPerSec/t.BEAloneSteps)
			}
			ew.printf("| %s | %.0f | %.3f | %.3f %s | | %s | %s | | |\n", name, t.RatePerSec, t.HPP50Us/1e3, t.HPP99Us/1e3, ci, be, norm)
		}
		if st := stallLine(mc.Reports); st != "" {
			ew.printf("\nHost stalls (the driver's thread kept 1 ms or more from its wait for the GPU; HP requests then wait for the host, whatever the policy): %s.\n", st)
		}
		if sl := slowLaunchLine(mc.Reports); sl != "" {
			ew.printf("\nLaunch calls of 150 µs or more (a stream's full launch queue blocks the call, and the driver's thread with it): %s.\n", sl)
		}
		if len(mc.Torch) > 0 {
			t := mc.Torch[0]
			ew.printf("\nPyTorch %s (%s, CUDA graphs: %v): HP %s solo %.0f µs; BE %s. %s\n", t.Torch, t.Device, t.Graphs, t.HPModel, t.SoloUs, t.BEModel, t.Note)
		}
		ew.printf("\nDelay by cause, mean / p99 per request (µs) beyond the HP kernels' profiled %.0f µs:\n\n", firstSolo(mc.Reports))
		ew.printf("| run | %s | top BE kernels beside HP (µs per request) |\n", strings.Join(sched.CauseNames(), " | "))
		ew.printf("|---|%s---|\n", strings.Repeat("---|", int(sched.NumCauses)))
		for _, r := range mc.Reports {
			var cols []string
			for _, cs := range r.Causes {
				cols = append(cols, fmt.Sprintf("%.0f / %.0f", cs.MeanUs, cs.P99Us))
			}
			var top []string
			for _, b := range r.Blame[:min(3, len(r.Blame))] {
				top = append(top, fmt.Sprintf("%s %.0f", b.Kernel, b.PerRequestUs))
			}
			ew.printf("| %s | %s | %s |\n", r.Policy, strings.Join(cols, " | "), strings.Join(top, ", "))
		}
		if sp := busySplitLine(mc.Reports); sp != "" {
			ew.printf("\nBE's work beside busy HP / in HP's idle time, of its alone rate (HP busy share of the run; of that, the share with BE's stream empty on the GPU's clock, and the lengths of the empty spans that began beside busy HP): %s.\n", sp)
		}
		ew.printf("\n")
	}
	return ew.err
}

// busySplitLine lists each co-located run's BE throughput split by HP
// busy and idle time (Report.BEBesideBusyHP, BEWhileHPIdle); "" where no
// run has it (reports made before it).
func busySplitLine(rs []*Report) string {
	var parts []string
	for _, r := range rs {
		if r.HPBusyShare == nil || r.BEBesideBusyHP == nil || r.BEWhileHPIdle == nil || r.BEWorkPerSec == 0 {
			continue
		}
		p := fmt.Sprintf("%s %.2f / %.2f (%.0f %%", r.Policy, *r.BEBesideBusyHP, *r.BEWhileHPIdle, 100**r.HPBusyShare)
		if r.BEDryShare != nil {
			p += fmt.Sprintf(", BE's stream empty %.0f %% of it", 100**r.BEDryShare)
		}
		if g := r.BEDryGaps; g != nil && g.Count > 0 {
			p += fmt.Sprintf(" in %d gaps, p50 %.0f / p99 %.0f µs", g.Count, g.P50, g.P99)
		}
		parts = append(parts, p+")")
	}
	return strings.Join(parts, "; ")
}

// hostJitterWarnUs is the p99 wake-up lateness above which a cell's
// host is called stalling: an order of magnitude above what an idle GPU
// host shows.
const hostJitterWarnUs = 500

// stallsSeen reports whether every atoll run of a cell watched for host
// stalls, and whether any run's stalls may reach its HP p99. Where they
// watched, the stalls, not the wake-up lateness measured before the runs,
// say whether the host disturbed them.
func stallsSeen(rs []*Report) (watched, stalled bool) {
	watched = len(rs) > 0
	for _, r := range rs {
		if r.HostStalls == nil {
			watched = false
			continue
		}
		stalled = stalled || stallTouched(r) >= stallSuspect
	}
	return watched, stalled
}

// stallTouched is the fraction of a run's HP requests its host stalls may
// have delayed: one per stall, and those arriving during them.
func stallTouched(r *Report) float64 {
	s := r.HostStalls
	if s == nil {
		return 0
	}
	return touchedBy(s.Count, s.TotalMs/1e3, r.Workload.RatePerSec, r.HPCompleted)
}

// stallTouchedTrace is stallTouched for a run's trace at the offered rate
// (per second).
func stallTouchedTrace(tr *sched.Trace, rate float64) float64 {
	return touchedBy(tr.HostStalls.Count, tr.HostStalls.Total.Seconds(), rate, len(tr.Requests))
}

// touchedBy is the share of a run's requests (arriving at rate per
// second) that n host stalls, sec seconds in all, may have delayed: one
// per stall, and those arriving during them.
func touchedBy(n int, sec, rate float64, requests int) float64 {
	if n == 0 || requests == 0 {
		return 0
	}
	return (float64(n) + sec*rate) / float64(requests)
}

// stallSuspect is the fraction of requests touched by stalls at which a
// run's HP p99 is called suspect: half of the 1 % that p99 leaves above it.
const stallSuspect = 0.005

// stallLine lists each run's host stalls, "" when no report watched
// for them (the simulator's, or reports made before they were counted).
func stallLine(rs []*Report) string {
	var parts []string
	watched := false
	for _, r := range rs {
		s := r.HostStalls
		switch {
		case s == nil:
			continue
		case s.Count == 0:
			parts = append(parts, r.Policy+" none")
		default:
			parts = append(parts, fmt.Sprintf("%s %d, %.1f ms in all, longest %.1f ms", r.Policy, s.Count, s.TotalMs, s.LongestMs))
		}
		watched = true
	}
	if !watched {
		return ""
	}
	return strings.Join(parts, "; ")
}

// slowLaunchLine lists the runs whose launch calls were slow
// (HostSplit.SlowLaunches), "" when none was.
func slowLaunchLine(rs []*Report) string {
	var parts []string
	for _, r := range rs {
		if h := r.HostPerLaunch; h != nil && h.SlowLaunches > 0 {
			parts = append(parts, fmt.Sprintf("%s %d, %.1f ms in all", r.Policy, h.SlowLaunches, h.SlowLaunchMs))
		}
	}
	return strings.Join(parts, "; ")
}

func firstSolo(rs []*Report) float64 {
	for _, r := range rs {
		if r.SoloKernelsUs > 0 {
			return r.SoloKernelsUs
		}
	}
	return 0
}

func ptr[T any](v T) *T { return &v }

func driverText(d string) string {
	if d == "" {
		return ""
	}
	return ", driver " + d
}

func joinF(xs []float64, f string) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf(f, x))
	}
	return strings.Join(s, ", ")
}

func ciMs(c *CI) string {
	if c == nil || math.IsNaN(c.Lo) {
		return ""
	}
	return fmt.Sprintf("[%.3f, %.3f]", c.Lo/1e3, c.Hi/1e3)
}

func ciPct(c *CI) string {
	if c == nil || math.IsNaN(c.Lo) {
		return ""
	}
	return fmt.Sprintf("[%+.1f%%, %+.1f%%]", c.Lo*100, c.Hi*100)
}

func steps(v float64, show bool) string {
	if !show {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(f string, a ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, f, a...)
	}
}

func beNorm(r *Report) string {
	if strings.HasPrefix(r.Policy, "dedicated") {
		return "–"
	}
	return num(r.BENormalized, "%.2f")
}

// MatrixSummary writes one Markdown row per measured cell: each policy's
// HP p99 overhead over the pooled dedicated runs (with its 95 % CI) and its
// BE normalized throughput, then the dedicated re-run (the noise floor).
func MatrixSummary(w io.Writer, cells []*MatrixCell) error {
	ew := &errWriter{w: w}
	var pols []string
	for _, mc := range cells {
		for _, r := range mc.Reports {
			if !strings.HasPrefix(r.Policy, "dedicated") && !slices.Contains(pols, r.Policy) {
				pols = append(pols, r.Policy)
			}
		}
	}
	ew.printf("| cell | HP solo µs | req/s |")
	for _, p := range pols {
		ew.printf(" %s p99 overhead [CI] / BE |", p)
	}
	ew.printf(" dedicated re-run [CI] |\n|---|---|---|%s---|\n", strings.Repeat("---|", len(pols)))
	for _, mc := range cells {
		res := mc.Result
		if res.Refused != "" {
			ew.printf("| %s | %.0f | %.0f | refused: %s |\n", res.Cell.Name, res.SoloMedianUs, res.RatePerSec, res.Refused)
			continue
		}
		ew.printf("| %s | %.0f | %.0f |", res.Cell.Name, res.SoloMedianUs, res.RatePerSec)
		for _, p := range pols {
			cell := "–"
			for _, r := range mc.Reports {
				if r.Policy == p {
					cell = fmt.Sprintf("%s %s / %s", pct(r.P99Overhead), ciPct(r.P99OverheadCI), num(r.BENormalized, "%.2f"))
				}
			}
			ew.printf(" %s |", cell)
		}
		re := "–"
		for _, r := range mc.Reports {
			if r.Policy == "dedicated-2" {
				re = fmt.Sprintf("%s %s", pct(r.P99Overhead), ciPct(r.P99OverheadCI))
			}
		}
		ew.printf(" %s |\n", re)
	}
	return ew.err
}

// torchP99CI is the 95 % bootstrap CI of a PyTorch run's p99: blocks of
// neighbouring requests when its samples are in arrival order.
func torchP99CI(t *TorchResult, seed uint64) *CI {
	s, ordered, err := DecodeSeries(t.HPSamples)
	if err != nil || len(s) < 2 {
		return nil
	}
	if ordered {
		return ptr(BlockBootstrapQuantile(s, 0.99, seed))
	}
	slices.Sort(s)
	return ptr(BootstrapQuantile(s, 0.99, seed))
}

// TorchTables writes, for each cell PyTorch ran, atoll's absolute figures
// beside PyTorch's on the same arrivals (Markdown): HP p50 and p99 with the
// p99's 95 % CI, and BE steps per second (alone in brackets).
func TorchTables(w io.Writer, cells []*MatrixCell) error {
	ew := &errWriter{w: w}
	for _, mc := range cells {
		if len(mc.Torch) == 0 || mc.Result.Refused != "" {
			continue
		}
		c := mc.Result.Cell
		ew.printf("| %s bs%d HP at %.0f req/s, %s bs%d BE | HP p50 ms | HP p99 ms [95 %% CI] | BE steps/s |\n|---|---|---|---|\n",
			c.HP, c.HPBatch, mc.Result.RatePerSec, c.BE, c.BEBatch)
		for _, t := range mc.Torch {
			be := "–"
			if t.BEStepsPerSec > 0 {
				be = fmt.Sprintf("%.1f", t.BEStepsPerSec)
			}
			if t.Setup == "alone" && t.BEAloneSteps > 0 {
				be = fmt.Sprintf("– (alone %.1f)", t.BEAloneSteps)
			}
			green := fmt.Sprintf("PyTorch, BE in a green context of %d SMs", t.GreenSMs)
			if !strings.Contains(t.Note, "Confinement check") {
				green += " (confinement not checked)"
			}
			name := map[string]string{"alone": "PyTorch, HP alone", "priority": "PyTorch, HP on the high-priority stream",
				"green": green}[t.Setup]
			ew.printf("| %s | %.2f | %.2f %s | %s |\n", name, t.HPP50Us/1e3, t.HPP99Us/1e3, ciMs(torchP99CI(t, c.Seed)), be)
		}
		for _, r := range mc.Reports {
			if r.Policy == "dedicated-2" {
				continue
			}
			name, be := "atoll, "+r.Policy+" policy", fmt.Sprintf("%.1f", r.BEItersPerSec)
			if r.Policy == "dedicated-1" {
				name, be = "atoll, HP alone (dedicated)", fmt.Sprintf("– (alone %.1f)", r.BEAloneItersPerSec)
			}
			ew.printf("| %s | %.2f | %.2f %s | %s |\n", name, r.HP.P50/1e3, r.HP.P99/1e3, ciMs(r.P99CI), be)
		}
		ew.printf("\n")
	}
	return ew.err
}
