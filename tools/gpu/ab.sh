#!/usr/bin/env bash
# Two atoll builds on one GPU, interleaved (A B A B ...): does a change
# move the GPU's figures beyond the runs' own noise? Per round, each build
# runs the matrix MATRIX (default bench/matrix/gpu-ab.yaml: the default cell
# under Orion and atoll) into OUT/matrix-{a,b}-R, then serves the daemon
# drill's plain mode (tools/gpu/standby-drill.sh: ResNet-50 bs1 at 300 req/s
# for 25 s with two BE training jobs) into OUT/daemon-{a,b}; a table of
# every run follows, with the HP latency around the jobs' start
# (tools/gpu/window.py).
#
#   tools/gpu/ab.sh OUT A_BIN B_BIN [ROUNDS] [MATRIX]
#
# SKIP_DAEMON=1 runs the matrices only; SKIP_MATRIX=1 the daemon only;
# BACKEND=sim (and RATE=4 for the daemon) makes a dry run without a GPU.
# START (default 1) numbers the first round, so that several calls add to
# one OUT.
set -u
OUT=${1:?usage: tools/gpu/ab.sh OUT A_BIN B_BIN [ROUNDS] [MATRIX]}
A=$(realpath "${2:?A_BIN}"); B=$(realpath "${3:?B_BIN}")
ROUNDS=${4:-1}; MATRIX=${5:-bench/matrix/gpu-ab.yaml}
R=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
{ echo "a: $A $($A version 2>/dev/null)"; echo "b: $B $($B version 2>/dev/null)"; } > "$OUT/builds.txt"
start=${START:-1}
for r in $(seq "$start" $((start + ROUNDS - 1))); do
  for s in a b; do
    bin=$A; [ $s = b ] && bin=$B
    if [ "${SKIP_MATRIX:-}" != 1 ]; then
      echo "round $r, build $s: matrix" >&2
      "$bin" matrix --backend "${BACKEND:-cuda}" --quiet --out "$OUT/matrix-$s-$r" "$MATRIX" > "$OUT/matrix-$s-$r.txt" 2>&1
    fi
    if [ "${SKIP_DAEMON:-}" != 1 ]; then
      echo "round $r, build $s: daemon" >&2
      START=$r ATOLL=$bin "$R/tools/gpu/standby-drill.sh" "$OUT/daemon-$s" plain > /dev/null 2>&1
    fi
  done
done
cd "$R"
for d in "$OUT"/matrix-*/; do
  [ -d "$d" ] || continue
  echo "== $(basename "$d")"
  "$A" compare "$d" 2>&1 | grep -E '^\| (dedicated|orion|atoll)[^|]*\| [0-9]+ \| [0-9.]+ \|' || true
done
for s in a b; do
  [ -d "$OUT/daemon-$s" ] || continue
  echo "== daemon-$s"
  python3 tools/gpu/standby_summary.py "$OUT/daemon-$s"
  python3 tools/gpu/window.py "$OUT/daemon-$s"/run-*
done
