package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"atoll/bench"
)

const compareHelp = `
Usage: atoll compare [flags] REPORT.json...
       atoll compare [flags] MATRIX-DIR

Prints the interference table of one or more reports written by 'atoll bench'
(one row per report, in the order given), then each run's HP delay by cause
(sched.Cause: hp-queue, policy, host, drain, padded, co-run, variance) and
the BE kernels HP ran slower beside, and, for reports made with
--hp-kernel-spans, each HP kernel's mean span beside its solo time. Reports must come from the same
workload on the same device; pass --force to tabulate them anyway.

Given the directory of an 'atoll matrix' run, it prints every cell's tables
(Markdown): absolute HP latency and rates with 95 % CIs, PyTorch's rows when
tools/gpu/torch_cell.py ran there, and delay by cause; --plot then draws,
per cell, each run's p99 overhead (CI bars) against its BE throughput.

Examples:
  atoll bench --policy priority --out priority.json
  atoll bench --policy atoll --out atoll.json
  atoll compare priority.json atoll.json
  atoll compare results/matrix-h100-2
  atoll compare --plot overhead.svg results/matrix-h100-2
  atoll compare --pytorch results/matrix-h100-2
`

func init() {
	register(command{name: "compare", summary: "tabulate bench reports or a matrix directory (delay by cause, CIs, --plot)", run: runCompare})
}

func runCompare(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "compare", compareHelp)
	force := fs.Bool("force", false, "tabulate reports of different workloads or devices")
	plotPath := fs.String("plot", "", "also draw the HP latency CDFs to this file (.svg, .png or .pdf)")
	pytorch := fs.Bool("pytorch", false, "matrix directory: only the cells PyTorch ran, atoll's absolute figures beside PyTorch's")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	if st, err := os.Stat(fs.Arg(0)); err == nil && st.IsDir() && fs.NArg() == 1 {
		cells, err := bench.ReadMatrixDir(fs.Arg(0))
		if err != nil {
			return err
		}
		if *pytorch {
			return bench.TorchTables(e.stdout, cells)
		}
		if err := bench.MatrixSummary(e.stdout, cells); err != nil {
			return err
		}
		fmt.Fprintln(e.stdout)
		if err := bench.MatrixTables(e.stdout, cells); err != nil {
			return err
		}
		if *plotPath != "" {
			return writeMatrixPlot(*plotPath, cells)
		}
		return nil
	}
	var rs []*bench.Report
	for _, path := range fs.Args() {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		r, err := bench.ReadReport(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		rs = append(rs, r)
	}
	if err := bench.Comparable(rs); err != nil && !*force {
		return fmt.Errorf("%w (pass --force to tabulate anyway)", err)
	}
	fmt.Fprintln(e.stdout, bench.Describe(rs[0]))
	if err := bench.Table(e.stdout, rs); err != nil {
		return err
	}
	if err := bench.CauseTable(e.stdout, rs); err != nil {
		return err
	}
	if err := bench.KernelTable(e.stdout, rs); err != nil {
		return err
	}
	if *plotPath != "" {
		return writePlot(*plotPath, rs)
	}
	return nil
}

// writePlot draws the CDFs to path, the format taken from its extension.
func writePlot(path string, rs []*bench.Report) error {
	return drawTo(path, func(w io.Writer, format string) error { return bench.PlotCDF(w, rs, format) })
}

// writeMatrixPlot draws the matrix's overhead-vs-BE plot to path.
func writeMatrixPlot(path string, cells []*bench.MatrixCell) error {
	return drawTo(path, func(w io.Writer, format string) error { return bench.PlotMatrix(w, cells, format) })
}

// drawTo creates path and draws into it in the format its extension names;
// a failed drawing leaves no file.
func drawTo(path string, draw func(w io.Writer, format string) error) error {
	format := strings.TrimPrefix(filepath.Ext(path), ".")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := draw(f, format); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}
