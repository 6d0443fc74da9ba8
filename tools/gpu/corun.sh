#!/usr/bin/env bash
# The co-run series of docs/physics.md ("Co-run slowdown, kernel by
# kernel"): `atoll corun` for each HP/BE pair with HP on every SM and on the
# SMs the partition leaves, BE partitions of 16/32/64 SMs, HP as graphs,
# a bounded BE queue (which also measures BE's own slowdown beside HP;
# also with HP as graphs: BERT-base's bounded runs with HP launched kernel
# by kernel left half its step unmeasured)
# and BE on every SM with no partition (132: the H100's and H200's SMs);
# the summary lines last. Runs already in OUT are kept (resumable); each
# run has its own time limit so a hang costs one run.
#
#   tools/gpu/corun.sh OUT                 # on the GPU machine
#   BACKEND=sim tools/gpu/corun.sh OUT     # the simulator's prediction (ARGS: e.g. --gpu H200 --sim-corun off)
#
# VARIANTS is a space-separated list of NAME:FLAGS, FLAGS comma-separated
# (e.g. "rest-d16:--hp-rest,--be-depth=16").
set -euo pipefail
out=${1:?usage: tools/gpu/corun.sh OUT}
backend=${BACKEND:-cuda}
atoll=${ATOLL:-bin/atoll}
pairs=${PAIRS:-"resnet50:resnet50-train:32 bert-base:bert-base-train:8"}
variants=${VARIANTS:-"all: rest:--hp-rest graph:--hp-graph depth16:--be-depth=16 graph-d16:--hp-graph,--be-depth=16 rest-d16:--hp-rest,--be-depth=16 p16:--partition=16 p32:--partition=32 p64:--partition=64 nopart:--partition=132"}
mkdir -p "$out"
for pair in $pairs; do
	IFS=: read -r hp be bb <<<"$pair"
	for v in $variants; do
		name=${v%%:*}
		flags=${v#*:}
		f="$out/$hp-$name.json"
		[ -s "$f" ] && continue
		echo "== $hp beside $be: $name" >&2
		# shellcheck disable=SC2086
		timeout -s KILL "${LIMIT:-300}" "$atoll" corun --backend "$backend" --hp "$hp" --be "$be" --be-batch "$bb" \
			${flags//,/ } ${ARGS:-} --quiet --out "$f.tmp" >"$out/$hp-$name.txt" 2>&1 && mv "$f.tmp" "$f" ||
			echo "   failed or cut (see $out/$hp-$name.txt)" >&2
	done
done
for t in "$out"/*.txt; do
	[ -s "${t%.txt}.json" ] || continue
	echo "$(basename "${t%.txt}"): $(grep -E '^HP slowdown' "$t" | sed 's/.*: //') HP$(grep -E '^BE slowdown' "$t" | sed 's/.*: /, BE /')"
done
