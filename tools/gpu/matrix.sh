#!/usr/bin/env bash
# The GPU matrix, resumable: atoll's runs of every cell of MATRIX, then the
# PyTorch setups of each cell with a torch: entry (skipped once done), then
# the tables. Run it again after a cut-off to continue.
#
#   tools/gpu/matrix.sh OUT [BUDGET] [MATRIX]
#     OUT     results directory (e.g. results/matrix-h100-2)
#     BUDGET  wall time atoll matrix may start cells in (e.g. 8m; 0: none)
#     MATRIX  matrix file (default bench/matrix/gpu.yaml)
#
# Needs bin/atoll (make gpu-build) and, for the PyTorch rows, python3 with
# torch, torchvision and transformers.
set -euo pipefail
out=${1:?usage: tools/gpu/matrix.sh OUT [BUDGET] [MATRIX]}
budget=${2:-0}
matrix=${3:-bench/matrix/gpu.yaml}
bin/atoll matrix --backend cuda --budget "$budget" --out "$out" "$matrix" >/dev/null
for d in "$out"/*/; do
	if grep -q '"torch"' "$d/cell.json" 2>/dev/null && [ ! -f "$d/torch-green.json" ]; then
		PYTHONUNBUFFERED=1 python3 tools/gpu/torch_cell.py "$d"
	fi
done
bin/atoll compare "$out"
