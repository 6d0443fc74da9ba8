#!/usr/bin/env bash
# Regenerates every committed simulator replay of a GPU series (the
# results/matrix-sim-*-replay directories that docs/fidelity.md, the
# README, the demo's note and their tests read) with this build's
# simulator: each replays its GPU series on the same arrivals (atoll
# matrix --replay), with that series' own profiles where it has them.
# Run it after a change to the simulator's model or its measured figures,
# then tools/gendocs.sh (cmd/atoll TestReplaysAreCurrent fails until then).
# Reports are gzipped as committed (gzip -n). A few minutes on two cores.
#
#   tools/replays.sh            # all of them
#   tools/replays.sh NAME...    # only these (e.g. onmachine2-train context)
set -euo pipefail
cd "$(dirname "$0")/.."
atoll=${ATOLL:-bin/atoll}
[ -x "$atoll" ] || { echo "replays: $atoll missing: go build -o bin/atoll ./cmd/atoll" >&2; exit 1; }

# withLaunches DIR: a copy of profile store DIR (in a temporary folder)
# whose H200 and H100 profiles carry the launches of their vendor calls
# from results/vendor-launches-h200 and -h100, as the built-in profiles do
# (the series' own records stay as measured).
withLaunches() {
	local src=$1 tmp f b csv gpu
	tmp=$(mktemp -d)
	cp -r "$src"/. "$tmp"/
	for gpu in H200:h200 H100-SXM:h100; do
		for f in "$tmp/${gpu%:*}"/*.json*; do
			[ -e "$f" ] || continue
			b=$(basename "$f"); b=${b%.gz}; b=${b%.json}
			csv=results/vendor-launches-${gpu#*:}/$b.csv.gz
			[ -e "$csv" ] || continue
			"$atoll" profile --model "${b%-bs*}" --batch "${b##*-bs}" --launches "$csv" --out "$f" >/dev/null
		done
	done
	echo "$tmp"
}

# replay OUT GPU-SERIES MATRIX PROFILES [FLAGS...]: OUT's cells are made
# anew (what else is there, a README, stays); PROFILES "" for the built-in.
replay() {
	local out=$1 series=$2 matrix=$3 prof=$4
	shift 4
	mkdir -p "$out"
	find "$out" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
	[ -z "$prof" ] || prof=$(withLaunches "$prof")
	env ${prof:+ATOLL_PROFILES="$prof"} "$atoll" matrix --gpu H200 --quiet "$@" --replay "$series" --out "$out" "$matrix" >/dev/null
	[ -z "$prof" ] || rm -rf "$prof"
	find "$out" -name '*.json' ! -name cell.json -exec gzip -9nf {} +
	find "$out" -name arrivals.txt -exec gzip -9nf {} +
	echo "replays: $out" >&2
}

names=("$@")
pick() { [ ${#names[@]} -eq 0 ] || [[ " ${names[*]} " == *" $1 "* ]]; }

jobs=()
run() { # NAME then replay's arguments; two at a time
	local name=$1
	shift
	pick "$name" || return 0
	replay "$@" &
	jobs+=($!)
	if [ ${#jobs[@]} -ge 2 ]; then
		wait "${jobs[0]}"
		jobs=("${jobs[@]:1}")
	fi
}

run g8 results/matrix-sim-h200-g8-replay results/matrix-h200-g8-events bench/matrix/replay-g8-events.yaml ""
run admission results/matrix-sim-h200-admission-replay results/admission-h200 bench/matrix/replay-admission.yaml ""
run blas results/matrix-sim-h200-blas-replay results/matrix-h200-blas-events bench/matrix/replay-blas-confined.yaml ""
run bequeue-half results/matrix-sim-bequeue-half-replay results/bequeue-half-h200 bench/matrix/gpu-bequeue-half.yaml ""
for part in all train bert; do
	run onmachine-$part results/matrix-sim-onmachine-$part-replay results/onmachine-$part-h200 bench/matrix/gpu-onmachine-$part.yaml results/onmachine-$part-h200/profiles
	run onmachine2-$part results/matrix-sim-onmachine2-$part-replay results/onmachine2-$part-h200 bench/matrix/gpu-onmachine-$part.yaml results/onmachine2-$part-h200/profiles
done
run onmachine2b-all results/matrix-sim-onmachine2b-all-replay results/onmachine2b-all-h200 bench/matrix/gpu-onmachine-all.yaml results/onmachine2b-all-h200/profiles
run onmachine2b-train results/matrix-sim-onmachine2b-train-replay results/onmachine2b-train-h200 bench/matrix/gpu-onmachine-train.yaml results/onmachine2b-train-h200/profiles
for x in c d; do # the training part twice in a row on a third H200
	run onmachine2$x-train results/matrix-sim-onmachine2$x-train-replay results/onmachine2$x-train-h200 bench/matrix/gpu-onmachine-train.yaml results/onmachine2$x-train-h200/profiles
done
# priority alone on two H100s, BE in graph chunks and launched kernel by kernel
for x in "" -2; do
	d=results/priority-train-h100$x
	run priority-train-graphs$x $d/graphs/sim $d/graphs bench/matrix/gpu-priority-train.yaml $d/graphs/profiles --gpu H100-SXM
	run priority-train-launches$x $d/launches/sim $d/launches bench/matrix/gpu-priority-train.yaml $d/graphs/profiles --gpu H100-SXM --be-graphs=false
done
# HP kernel by kernel under priority (an event after each HP kernel, each
# kernel's span in the reports)
run kernelspans results/matrix-sim-kernelspans-replay results/kernelspans-h200 bench/matrix/gpu-kernelspans.yaml results/kernelspans-h200/profiles --hp-kernel-events --hp-kernel-spans
run kernelspans-own results/matrix-sim-kernelspans-own-replay results/kernelspans-own-h200 bench/matrix/gpu-kernelspans-own.yaml "" --hp-kernel-events --hp-kernel-spans
run onmachine results/matrix-sim-onmachine-replay results/onmachine-h200 bench/matrix/gpu-onmachine.yaml results/onmachine-h200/profiles
run onmachine3 results/matrix-sim-onmachine3-replay results/onmachine3-h200 bench/matrix/gpu-onmachine3.yaml results/onmachine3-h200/profiles
# four cells no series ran before, on the built-in profiles (held out)
run heldout4 results/matrix-sim-heldout4-replay results/heldout4-h200 bench/matrix/gpu-heldout4.yaml ""
run heldout4b results/matrix-sim-heldout4b-replay results/heldout4b-h200 bench/matrix/gpu-heldout4.yaml ""
# The context series' cells, each with its matrix file kept beside its
# replay (cell.yaml); cq ran BE kernel by kernel.
run context results/matrix-sim-context-replay/cp results/context-h200/cp/m results/matrix-sim-context-replay/cp/cell.yaml ""
run context results/matrix-sim-context-replay/co results/context-h200/co/m results/matrix-sim-context-replay/co/cell.yaml ""
run context results/matrix-sim-context-replay/cq results/context-h200/cq/m results/matrix-sim-context-replay/cq/cell.yaml "" --be-graphs=false
for j in "${jobs[@]}"; do wait "$j"; done
