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
# ARGS are more flags for atoll matrix (e.g. --be-graphs=false).
#
# With PROFILE=1 the matrix's models are first profiled on this GPU into
# OUT/profiles (atoll matrix --profile), and the runs use those profiles:
# the simulator then replays the series with this machine's kernel times
# (ATOLL_PROFILES=OUT/profiles atoll matrix --replay OUT ...). A second call
# (resuming) uses them without profiling again.
#
# Needs bin/atoll (make gpu-build) and, for the PyTorch rows, python3 with
# torch, torchvision and transformers.
set -euo pipefail
out=${1:?usage: tools/gpu/matrix.sh OUT [BUDGET] [MATRIX]}
budget=${2:-0}
matrix=${3:-bench/matrix/gpu.yaml}
profile=()
if [ "${PROFILE:-0}" = 1 ]; then
	export ATOLL_PROFILES=$out/profiles
	[ -d "$ATOLL_PROFILES" ] || profile=(--profile)
fi
# shellcheck disable=SC2086
bin/atoll matrix --backend cuda --budget "$budget" "${profile[@]}" ${ARGS:-} --out "$out" "$matrix" >/dev/null
for d in "$out"/*/; do
	if grep -q '"torch"' "$d/cell.json" 2>/dev/null && [ ! -f "$d/torch-green.json" ]; then
		PYTHONUNBUFFERED=1 python3 tools/gpu/torch_cell.py "$d"
	fi
done
bin/atoll compare "$out"
