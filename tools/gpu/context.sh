#!/usr/bin/env bash
# Does an HP request run slower inside a matrix cell than served on its own?
# HP served alone (dedicated, load 0.5, 5 s) four ways, with nvidia-smi
# sampling the SM and memory clocks, power, temperatures and throttle
# reasons every 50 ms:
#   alone-cold    on its own, first thing (atoll bench --be none)
#   matrix        a one-cell matrix (tools: its BE alone 4 s, dedicated-1,
#                 priority, dedicated-2), as a matrix series runs them
#   alone-after   on its own again, right after the matrix's BE work
#   be-idle       with the BE client loaded but never launched
# and HP's profile (its pass inside one graph, graphUs) measured before
# and after them; prints each phase's clocks, each run's HP service time
# (p50, mean: a request's time from its first kernel's start to its end)
# and each profile's kernel-by-kernel and graph sums.
#   tools/gpu/context.sh OUT [HP] [BE] [BE-BATCH]   (bin/atoll built for the GPU)
# CONTEXT_BE_ALONE and CONTEXT_WARMUP_RUN set the matrix's beAlone and
# warmupRun (4s, 1s: as the committed matrices), so that BE can barely run
# before the dedicated runs; CONTEXT_MATRIX_ARGS adds flags to the matrix
# (e.g. --be-graphs=false); CONTEXT_POLICY the matrix's policy (priority);
# CONTEXT_PROFILE=0 skips the two profiles.
set -uo pipefail
out=${1:?usage: tools/gpu/context.sh OUT [HP] [BE] [BE-BATCH]} hp=${2:-resnet50} be=${3:-resnet50-train} bb=${4:-32}
mkdir -p "$out"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory,utilization.gpu,clocks_throttle_reasons.active --format=csv,noheader,nounits -lms 50 > "$out/clocks.csv" &
smi=$!
sleep 1
phase() { echo "$(date +%Y/%m/%d\ %H:%M:%S.%N | cut -c1-23) $1" >> "$out/phases.txt"; }
alone() { bin/atoll bench --backend cuda --hp "$hp" --be none --policy dedicated --load 0.5 --duration 5s --quiet --out "$out/$1.json" > "$out/$1.txt" 2>&1; }
prof() { bin/atoll profile --backend cuda --model "$hp" --batch 1 --no-scaling --no-partition --force --quiet --out "$out/$1.json" > "$out/$1.txt" 2>&1; }
[ "${CONTEXT_PROFILE:-1}" = 0 ] && prof() { :; }
phase idle; sleep 1
phase profile-cold; prof profile-cold
phase alone-cold; alone alone-cold
phase matrix
cat > "$out/cell.yaml" <<YAML
name: context
policies: [${CONTEXT_POLICY:-priority}]
dedicatedRuns: 2
minRequests: 5000
warmup: 500ms
beAlone: ${CONTEXT_BE_ALONE:-4s}
warmupRun: ${CONTEXT_WARMUP_RUN:-1s}
soloRepeats: 3
pairWait: 20s
cells:
  - {name: cell, hp: $hp, be: $be, beBatch: $bb, load: 0.5}
YAML
bin/atoll matrix --backend cuda ${CONTEXT_MATRIX_ARGS:-} --out "$out/m" "$out/cell.yaml" > "$out/matrix.txt" 2>&1
phase alone-after; alone alone-after
phase profile-after; prof profile-after
phase be-idle
bin/atoll bench --backend cuda --hp "$hp" --be "$be" --be-batch "$bb" --policy dedicated --load 0.5 --duration 5s --quiet --out "$out/be-idle.json" > "$out/be-idle.txt" 2>&1
phase end
sleep 0.5
kill $smi
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import sys, json, statistics, os
sys.path.insert(0, 'tools/gpu')
from phases import by_phase
out = sys.argv[1]
for name, sel in by_phase(out, 6):
    if sel:
        med = lambda k: statistics.median(r[k] for r in sel)
        thr = sorted({r[7] for r in sel})
        print(f"{name:12s} {len(sel):4d} samples: SM {med(1):.0f} MHz (min {min(r[1] for r in sel):.0f}), mem {med(2):.0f} MHz, "
              f"power {med(3):.0f} W (max {max(r[3] for r in sel):.0f}), GPU {med(4):.0f} °C (max {max(r[4] for r in sel):.0f}), "
              f"HBM {med(5):.0f} °C, throttle reasons {' '.join(thr)}")
def svc(f):
    d = json.load(open(f))
    return f"HP service p50 {d['hpService']['p50Us']:.1f} µs, mean {d['hpService']['meanUs']:.1f}, p99 {d['hpService']['p99Us']:.1f}; HP p50 {d['hp']['p50Us']:.1f}, p99 {d['hp']['p99Us']:.1f}"
for f in ['profile-cold', 'profile-after']:
    p = f"{out}/{f}.json"
    if os.path.exists(p):
        ks = json.load(open(p))['kernels']
        print(f"{f:20s} {len(ks)} kernels: {sum(k['durationUs'] for k in ks):.1f} µs kernel by kernel, {sum(k.get('graphUs', 0) for k in ks):.1f} µs inside one graph")
for f in ['alone-cold', 'm/cell/dedicated-1', 'm/cell/' + os.environ.get('CONTEXT_POLICY', 'priority'), 'm/cell/dedicated-2', 'alone-after', 'be-idle']:
    p = f"{out}/{f}.json"
    if os.path.exists(p):
        print(f"{f:20s} {svc(p)}")
PY
