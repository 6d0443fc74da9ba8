package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"atoll/bench"
)

const compareHelp = `
Usage: atoll compare [flags] REPORT.json...

Prints the interference table of one or more reports written by 'atoll bench'
(one row per report, in the order given). Reports must come from the same
workload on the same device; pass --force to tabulate them anyway.

Examples:
  atoll bench --policy priority --out priority.json
  atoll bench --policy atoll --out atoll.json
  atoll compare priority.json atoll.json
`

func init() {
	register(command{name: "compare", summary: "print the comparison table of bench reports", run: runCompare})
}

func runCompare(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "compare", compareHelp)
	force := fs.Bool("force", false, "tabulate reports of different workloads or devices")
	plotPath := fs.String("plot", "", "also draw the HP latency CDFs to this file (.svg, .png or .pdf)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
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
	if *plotPath != "" {
		return writePlot(*plotPath, rs)
	}
	return nil
}

// writePlot draws the CDFs to path, the format taken from its extension.
func writePlot(path string, rs []*bench.Report) error {
	format := strings.TrimPrefix(filepath.Ext(path), ".")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := bench.PlotCDF(f, rs, format); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}
