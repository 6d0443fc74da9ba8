package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"atoll/bench"
)

const fidelityHelp = `
Usage: atoll fidelity GPU-MATRIX-DIR SIM-MATRIX-DIR [GPU-MATRIX-DIR SIM-MATRIX-DIR ...]

Compares a GPU run of a matrix ('atoll matrix --backend cuda') with a
simulated run of the same matrix file ('atoll matrix', the default backend):
per cell and policy the HP p50, p99 and its overhead over dedicated, BE
normalized throughput, the simulator's error on each, and whether the
policies rank as on the GPU (by HP p99 wherever the GPU's CIs tell two
policies apart; by BE throughput); HP alone (each cell's first dedicated
run) on a line of its own; and, where the reports carry them, BE's
throughput beside busy HP and in HP's idle time and how often BE's stream
was empty while HP was busy. Nothing in the simulator is fitted to the GPU
runs, so every cell is held out. docs/fidelity.md is this command's output.

Several pairs of directories (series that ran different cells, each with
its own simulated replay) make one table and one summary, as if one
series: a matrix run in parts, each on its own machine's profiles. A cell
name may appear in one pair only.

With --repeats, the pairs are repeated series of the same cells (the
same matrix file and arrivals run again, on one machine or another, each
replayed on its own profiles): per cell and policy it prints every
series' GPU HP p99, their span, the simulator's p99 against each, and per
policy how often the simulator is within 10 % of its own series, how often
within 10 % or inside the span of the GPU's series, and how often the
GPU's later series are within 10 % of its first — how far the GPU repeats
itself, against which the simulator can be judged.

Examples:
  atoll matrix --out /tmp/matrix-sim bench/matrix/gpu.yaml
  atoll fidelity results/matrix-h100-2 /tmp/matrix-sim
  atoll fidelity --repeats results/onmachine2c-train-h200 results/matrix-sim-onmachine2c-train-replay results/onmachine2d-train-h200 results/matrix-sim-onmachine2d-train-replay
`

func init() {
	register(command{name: "fidelity", summary: "compare a simulated matrix run with a GPU run of it", run: runFidelity})
}

func runFidelity(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "fidelity", fidelityHelp)
	repeats := fs.Bool("repeats", false, "the pairs are repeated series of the same cells: judge the simulator against the GPU's own spread")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 2 || fs.NArg()%2 != 0 {
		fs.Usage()
		return errUsage
	}
	if *repeats {
		return fidelityRepeats(e, fs.Args())
	}
	var gpuCells, simCells []*bench.MatrixCell
	from := map[string]string{} // cell name -> the GPU directory holding it
	for i := 0; i < fs.NArg(); i += 2 {
		g, err := bench.ReadMatrixDir(fs.Arg(i))
		if err != nil {
			return err
		}
		s, err := bench.ReadMatrixDir(fs.Arg(i + 1))
		if err != nil {
			return err
		}
		for _, c := range g {
			if len(c.Reports) > 0 && c.Reports[0].Backend == "sim" {
				return fmt.Errorf("%s holds simulated reports; the first directory of each pair must be a GPU run", fs.Arg(i))
			}
			name := c.Result.Cell.Name
			if prev, ok := from[name]; ok {
				return fmt.Errorf("cell %s is in both %s and %s: give each cell once (one pair per series)", name, prev, fs.Arg(i))
			}
			from[name] = fs.Arg(i)
		}
		gpuCells, simCells = append(gpuCells, g...), append(simCells, s...)
	}
	return bench.FidelityTable(e.stdout, gpuCells, simCells)
}

// fidelityRepeats reads GPU and simulated series of the same cells
// (atoll fidelity --repeats).
func fidelityRepeats(e *env, dirs []string) error {
	if len(dirs) < 4 {
		return fmt.Errorf("fidelity --repeats: want two or more GPU-DIR SIM-DIR pairs of the same cells, got %d directories", len(dirs))
	}
	var gpuSeries, simSeries [][]*bench.MatrixCell
	var first map[string]bool
	for i := 0; i < len(dirs); i += 2 {
		g, err := bench.ReadMatrixDir(dirs[i])
		if err != nil {
			return err
		}
		s, err := bench.ReadMatrixDir(dirs[i+1])
		if err != nil {
			return err
		}
		names := map[string]bool{}
		for _, c := range g {
			if len(c.Reports) > 0 && c.Reports[0].Backend == "sim" {
				return fmt.Errorf("%s holds simulated reports; the first directory of each pair must be a GPU run", dirs[i])
			}
			names[c.Result.Cell.Name] = true
		}
		if first == nil {
			first = names
		} else if !maps.Equal(first, names) {
			return fmt.Errorf("fidelity --repeats: %s holds other cells than %s (%s against %s): repeats must run the same cells", dirs[i], dirs[0], cellList(names), cellList(first))
		}
		gpuSeries, simSeries = append(gpuSeries, g), append(simSeries, s)
	}
	return bench.FidelityRepeats(e.stdout, gpuSeries, simSeries)
}

func cellList(names map[string]bool) string {
	return strings.Join(slices.Sorted(maps.Keys(names)), ", ")
}
