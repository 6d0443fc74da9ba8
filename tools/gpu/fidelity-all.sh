#!/usr/bin/env bash
# The simulator held out on the whole GPU matrix (bench/matrix/gpu.yaml's
# eight cells, no PyTorch rows), each part on profiles measured on the
# machine that runs it: tools/gpu/fidelity.sh on the three part files in
# turn, into OUT/all, OUT/train and OUT/bert, then one comparison of all
# three (OUT/fidelity.txt). A part whose OUT/PART/fidelity.txt exists is
# done and skipped, so a call cut off by its time limit (each part takes
# 4-5 minutes on an H200) continues where it stopped; a part is never
# split across machines, since its profiles are its machine's.
#
#   tools/gpu/fidelity-all.sh OUT [SECONDS]   (stop starting parts after SECONDS, default 420)
#
# Needs bin/atoll (make gpu-build). On a lent machine that goes back when
# idle, OUT goes with it: bring each finished part back (tar it into the
# call's output) before the machine is released, or run one part a call
# with tools/gpu/fidelity.sh OUT/PART 0 bench/matrix/gpu-onmachine-PART.yaml.
set -euo pipefail
out=${1:?usage: tools/gpu/fidelity-all.sh OUT [SECONDS]}
limit=${2:-420}
mkdir -p "$out"
start=$SECONDS
for part in all train bert; do
	dir=$out/$part
	if [ -s "$dir/fidelity.txt" ]; then
		continue
	fi
	if [ $((SECONDS - start)) -ge "$limit" ]; then
		echo "fidelity-all: stopped before part $part ($((SECONDS - start)) s of $limit); run the same command again to continue" >&2
		exit 0
	fi
	# A part cut off before its comparison starts afresh: its profiles and
	# runs may come from another machine.
	rm -rf "$dir"
	echo "== part $part: bench/matrix/gpu-onmachine-$part.yaml" >&2
	tools/gpu/fidelity.sh "$dir" 0 "bench/matrix/gpu-onmachine-$part.yaml"
done
pairs=()
for part in all train bert; do
	pairs+=("$out/$part" "$out/$part/sim")
done
bin/atoll fidelity "${pairs[@]}" > "$out/fidelity.txt.tmp"
mv "$out/fidelity.txt.tmp" "$out/fidelity.txt"
grep -E '^HP p99 within|^HP alone|^\| (priority|orion|reef|atoll)[a-z:=,-]* \| [0-9]' "$out/fidelity.txt"
