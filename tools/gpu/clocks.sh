#!/usr/bin/env bash
# The SM clock while atoll profiles a model and while it serves the same
# model alone at load 0.5, sampled by nvidia-smi every 50 ms; prints each
# phase's median. Usage: tools/gpu/clocks.sh OUT MODEL   (bin/atoll built for the GPU)
set -uo pipefail
out=$1 m=$2
mkdir -p "$out"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv,noheader,nounits -lms 50 > "$out/clocks.csv" &
smi=$!
sleep 1
phase() { echo "$(date +%Y/%m/%d\ %H:%M:%S.%N | cut -c1-23) $1" >> "$out/phases.txt"; }
phase idle
sleep 1
phase profile
bin/atoll profile --backend cuda --model "$m" --batch 1 --no-scaling --force --quiet --out "$out/$m-bs1.json" > "$out/profile.txt" 2>&1
phase idle2
sleep 1
phase serve
bin/atoll bench --backend cuda --hp "$m" --be none --policy dedicated --load 0.5 --duration 5s --quiet --out "$out/$m-alone.json" > "$out/bench.txt" 2>&1
phase end
sleep 0.5
kill $smi
python3 - "$out" <<'PY'
import sys, statistics
out = sys.argv[1]
ph = [l.split(' ', 2) for l in open(out + '/phases.txt')]
ph = [(a + ' ' + b, c.strip()) for a, b, c in ph]
rows = []
for l in open(out + '/clocks.csv'):
    f = [x.strip() for x in l.split(',')]
    rows.append((f[0][:23], float(f[1]), float(f[2]), float(f[3])))
for i, (t0, name) in enumerate(ph[:-1]):
    t1 = ph[i + 1][0]
    sel = [r for r in rows if t0 <= r[0] < t1]
    if sel:
        print(f"{name:8s} {len(sel):4d} samples: SM clock median {statistics.median(r[1] for r in sel):.0f} MHz "
              f"(min {min(r[1] for r in sel):.0f}), power median {statistics.median(r[2] for r in sel):.0f} W, util median {statistics.median(r[3] for r in sel):.0f} %")
PY
