package kernels

import (
	"fmt"
	"io"
	"strings"

	"github.com/olekukonko/tablewriter"
)

func table(w io.Writer, title string, header []any, rows [][]any) {
	if w == nil {
		return
	}
	fmt.Fprintf(w, "\n%s\n", title)
	t := tablewriter.NewWriter(w)
	t.Header(header...)
	for _, r := range rows {
		_ = t.Append(r...)
	}
	_ = t.Render()
}

func printChecks(w io.Writer, cs []Check) {
	var rows [][]any
	fails := 0
	for _, c := range cs {
		ok := "ok"
		if !c.OK {
			ok = "FAIL"
			fails++
		}
		rows = append(rows, []any{c.Kernel, shortShape(c.Shape), c.Form, c.Output, fmt.Sprintf("%.2e", c.RelErr), fmt.Sprintf("%.0e", c.Bound), ok, c.Note})
	}
	table(w, fmt.Sprintf("correctness: %d checks, %d failed", len(cs), fails),
		[]any{"kernel", "shape", "form", "output", "rel err", "bound", "", "note"}, rows)
}

func printIdentity(w io.Writer, ids []Identity) {
	var rows [][]any
	for _, id := range ids {
		rows = append(rows, []any{id.Kernel, id.Workers, id.Launches, fmt.Sprintf("%d (≥ %d)", id.Preemptions, id.Needed), id.Padded, fmt.Sprintf("%d/%d", id.Completed, id.Logical), id.Identical})
	}
	table(w, "preempt + resume vs uninterrupted (bit identity)",
		[]any{"kernel", "workers", "launches", "preempted", "as padded BE", "completed", "identical"}, rows)
}

func printPerf(w io.Writer, rep Report) {
	var rows [][]any
	for _, l := range rep.Latency {
		rows = append(rows, []any{l.Form, fmt.Sprintf("%.1f", l.BlockUS), l.Trials, l.Late,
			fmt.Sprintf("%.1f", l.P50), fmt.Sprintf("%.1f", l.P90), fmt.Sprintf("%.1f", l.P99), fmt.Sprintf("%.1f", l.Max), shortShape(l.Kernel)})
	}
	table(w, "preemption latency, µs (flag seen by watcher on GPU clock → last BE block exit)",
		[]any{"form", "block µs", "trials", "late", "p50", "p90", "p99", "max", "BE kernel"}, rows)
	rows = nil
	for _, f := range rep.FlagCost {
		rows = append(rows, []any{shortShape(f.Kernel), fmt.Sprintf("%.1f", f.PlainUS), fmt.Sprintf("%.1f", f.ResetUS), fmt.Sprintf("%+.2f%%", f.ResetPct),
			fmt.Sprintf("%.1f", f.ResumableUS), fmt.Sprintf("%+.2f%%", f.ResumePct)})
	}
	table(w, "flag-check cost (median of 21 interleaved runs, flag down)",
		[]any{"kernel", "plain µs", "reset µs", "reset", "resumable µs", "resumable"}, rows)
	rows = nil
	for _, p := range rep.Perf {
		rows = append(rows, []any{p.Kernel, p.Shape, fmt.Sprintf("%.1f", p.MedUS), fmt.Sprintf("%.1f", p.TFLOPS), p.Registers, p.BlocksPerSM})
	}
	table(w, "GEMM throughput (plain form, median of 20)", []any{"kernel", "shape", "µs", "TFLOP/s", "regs", "blocks/SM"}, rows)
}

func shortShape(s string) string {
	if i := strings.Index(s, " batch="); i > 0 {
		return s[:i]
	}
	return s
}
