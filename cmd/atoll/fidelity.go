package main

import (
	"context"
	"fmt"

	"atoll/bench"
)

const fidelityHelp = `
Usage: atoll fidelity GPU-MATRIX-DIR SIM-MATRIX-DIR

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

Example:
  atoll matrix --out /tmp/matrix-sim bench/matrix/gpu.yaml
  atoll fidelity results/matrix-h100-2 /tmp/matrix-sim
`

func init() {
	register(command{name: "fidelity", summary: "compare a simulated matrix run with a GPU run of it", run: runFidelity})
}

func runFidelity(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "fidelity", fidelityHelp)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return errUsage
	}
	gpuCells, err := bench.ReadMatrixDir(fs.Arg(0))
	if err != nil {
		return err
	}
	simCells, err := bench.ReadMatrixDir(fs.Arg(1))
	if err != nil {
		return err
	}
	for _, c := range gpuCells {
		if len(c.Reports) > 0 && c.Reports[0].Backend == "sim" {
			return fmt.Errorf("%s holds simulated reports; the first directory must be a GPU run", fs.Arg(0))
		}
	}
	return bench.FidelityTable(e.stdout, gpuCells, simCells)
}
