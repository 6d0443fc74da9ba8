#!/usr/bin/env bash
# BE's launch path: what a BE training step gets with HP nearly idle (load
# 0.02), where nothing but the host's turnaround (seeing a completion,
# deciding, launching the next kernel) and the SMs BE may use bound it.
# Per cell and policy one `atoll bench` report; the table last gives BE's
# normalized throughput and the time lost per BE kernel launched,
# gap = (1/steps-per-s - 1/alone-steps-per-s) / kernels-per-step.
# With one launch in flight and no partition the gap is the turnaround
# itself. BACKEND=sim runs the same on the simulator (docs/simulator.md);
# ARGS are further bench flags (e.g. --sim-notice 0). Runs already in OUT
# are kept (resumable).
#
#   tools/gpu/launchpath.sh OUT                # on the GPU machine
#   BACKEND=sim tools/gpu/launchpath.sh OUT    # the simulator's side
set -euo pipefail
out=${1:?usage: tools/gpu/launchpath.sh OUT}
backend=${BACKEND:-cuda}
atoll=${ATOLL:-bin/atoll}
cells=${CELLS:-"resnet50:resnet50-train:32 bert-base:bert-base-train:8"}
policies=${POLICIES:-"orion priority atoll:reserve=off,be-window=1,be-queue=off atoll:reserve=off,be-window=2,be-queue=off atoll:reserve=off atoll"}
for cell in $cells; do
	IFS=: read -r hp be bb <<<"$cell"
	mkdir -p "$out/$be"
	for p in $policies; do
		f="$out/$be/$(echo "$p" | tr ':=,' '---').json"
		[ -s "$f" ] && continue
		echo "== $be $p" >&2
		"$atoll" bench --backend "$backend" --hp "$hp" --be "$be" --be-batch "$bb" \
			--load 0.02 --duration 3s --warmup 500ms --policy "$p" ${ARGS:-} --out "$f.tmp" \
			>"${f%.json}.txt" 2>&1 && mv "$f.tmp" "$f"
	done
done
python3 - "$out" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
print(f"{'BE model':<18} {'policy':<44} {'BE norm':>7} {'steps/s':>8} {'alone':>7} {'gap µs/kernel':>13} {'host µs/launch':>14}")
for f in sorted(glob.glob(os.path.join(out, "*", "*.json"))):
    d = json.load(open(f))
    w = d["workload"]
    n = d.get("beKernelsPerStep") or 0
    it, alone = d["beItersPerSec"], d["beAloneItersPerSec"]
    gap = (1 / it - 1 / alone) / n * 1e6 if it and n else float("nan")
    print(f"{w['beModel']:<18} {d['policy']:<44} {d['beNormalized']:7.2f} {it:8.1f} {alone:7.1f} {gap:13.1f} {d.get('hostUsPerLaunch', 0):14.2f}")
EOF
