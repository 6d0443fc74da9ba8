#!/usr/bin/env bash
# Two settings of one atoll build on one GPU, interleaved (A B A B ...):
# each an `atoll bench` run of the cell CELL (its own HP-alone and BE-alone
# runs on the same arrivals, CIs of HP p99) with flags A or B; the table
# of every run last. Runs already in OUT are kept (resumable).
#
#   CELL="--hp resnet50 --be resnet50-train --be-batch 32 --duration 6s" \
#     tools/gpu/interleave.sh OUT "--launch-order hp-first" "--launch-order decision" [ROUNDS]
#
# BACKEND=sim runs the same on the simulator.
set -euo pipefail
out=${1:?usage: tools/gpu/interleave.sh OUT A_FLAGS B_FLAGS [ROUNDS]}
a=${2:?A_FLAGS}; b=${3:?B_FLAGS}; rounds=${4:-3}
atoll=${ATOLL:-bin/atoll}
cell=${CELL:---hp resnet50 --be resnet50-train --be-batch 32 --duration 6s}
mkdir -p "$out"
[ -s "$out/settings.txt" ] || printf 'a: %s\nb: %s\ncell: %s\n' "$a" "$b" "$cell" > "$out/settings.txt"
for r in $(seq 1 "$rounds"); do
	for s in a b; do
		f="$out/$s-$r.json"
		[ -s "$f" ] && continue
		flags=$a; [ $s = b ] && flags=$b
		echo "== round $r, $s: $flags" >&2
		# shellcheck disable=SC2086
		"$atoll" bench --backend "${BACKEND:-cuda}" $cell $flags --ci --quiet --out "$f.tmp" > "$out/$s-$r.txt" 2>&1 && mv "$f.tmp" "$f"
	done
done
python3 - "$out" <<'PY'
import glob, gzip, json, os, sys
out = sys.argv[1]
print(f"{'run':<6} {'HP p50 ms':>9} {'HP p99 ms [95 % CI]':>26} {'p99 overhead':>12} {'BE norm':>7} {'host µs mean/p99':>16} {'stalls':>6}")
for f in sorted(glob.glob(os.path.join(out, "*.json")) + glob.glob(os.path.join(out, "*.json.gz"))):
    d = json.load(gzip.open(f) if f.endswith(".gz") else open(f))
    ci = d.get("p99CiUs") or {}
    c = {x["cause"]: x for x in d.get("causes", [])}
    h = c.get("host", {})
    st = (d.get("hostStalls") or {}).get("count", "-")
    print(f"{os.path.basename(f).split('.')[0]:<6} {d['hp']['p50Us']/1e3:9.3f} {d['hp']['p99Us']/1e3:9.3f} [{ci.get('lo',0)/1e3:.3f}, {ci.get('hi',0)/1e3:.3f}] {d['p99Overhead']*100:+11.1f}% {d.get('beNormalized') or 0:7.2f} {h.get('meanUs',0):8.0f}/{h.get('p99Us',0):<7.0f} {st:>6}")
PY
