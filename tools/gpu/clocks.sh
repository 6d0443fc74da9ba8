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
sys.path.insert(0, 'tools/gpu')
from phases import by_phase
out = sys.argv[1]
for name, sel in by_phase(out, 3):
    if sel:
        print(f"{name:8s} {len(sel):4d} samples: SM clock median {statistics.median(r[1] for r in sel):.0f} MHz "
              f"(min {min(r[1] for r in sel):.0f}), power median {statistics.median(r[2] for r in sel):.0f} W, util median {statistics.median(r[3] for r in sel):.0f} %")
PY
