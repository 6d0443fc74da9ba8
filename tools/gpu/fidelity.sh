#!/usr/bin/env bash
# The simulator's fidelity on this GPU, held out, in one command: the
# matrix's models profiled here first (atoll matrix --profile, into
# OUT/profiles), the matrix run on them (tools/gpu/matrix.sh, resumable),
# then the simulator replaying the series on the same profiles and
# arrivals (atoll matrix --replay, on this machine's CPU, into OUT/sim) and
# the comparison (atoll fidelity, OUT/fidelity.txt). Run it again after a
# cut-off to continue; the replay and the comparison are redone each time.
#
#   tools/gpu/fidelity.sh OUT [BUDGET] [MATRIX]    (default bench/matrix/gpu-onmachine-all.yaml)
#
# ARGS are more flags for atoll matrix, given to the GPU run and the
# replay alike (e.g. ARGS=--be-graphs=false).
#
# Needs bin/atoll (make gpu-build).
set -euo pipefail
out=${1:?usage: tools/gpu/fidelity.sh OUT [BUDGET] [MATRIX]}
budget=${2:-0}
matrix=${3:-bench/matrix/gpu-onmachine-all.yaml}
case $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) in
*H200*) gpu=H200 ;;
*) gpu=H100-SXM ;;
esac
mkdir -p "$out"
PROFILE=1 tools/gpu/matrix.sh "$out" "$budget" "$matrix" > "$out/compare.txt"
rm -rf "$out/sim"
# shellcheck disable=SC2086
ATOLL_PROFILES=$out/profiles bin/atoll matrix --gpu "$gpu" --quiet ${ARGS:-} --replay "$out" --out "$out/sim" "$matrix" > /dev/null
bin/atoll fidelity "$out" "$out/sim" > "$out/fidelity.txt.tmp"
mv "$out/fidelity.txt.tmp" "$out/fidelity.txt"
grep -E '^HP p99 within|^A request|^\| (priority|orion|reef|atoll)[a-z:=,-]* \| [0-9]' "$out/fidelity.txt"
