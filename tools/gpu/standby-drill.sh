#!/usr/bin/env bash
# Issue 18's acceptance drill on the GPU, and what the standby costs when
# nothing faults. Each run serves ResNet-50 bs1 at 300 req/s (Poisson,
# binary inputs, 25 s measured after 2 s of warm-up) with two BE jobs
# submitted 3 s in: ResNet-50 training bs32 (no resume) and BERT-base
# training bs8 (--resume). Modes:
#   plain    atoll serve --backend cuda                     (no standby, no fault)
#   standby  the same with --standby                        (no fault)
#   drill    --standby, and BE kernel launch BE_LAUNCH (default 30000,
#            several seconds into the jobs) runs kernels.Fault (KIND:
#            trap, the default, or address)
# A run starts its own daemon and waits until it (and, with --standby, the
# warm standby) is ready, so the kernel cache is warm after the first.
#
#   tools/gpu/standby-drill.sh OUT MODE...      e.g. OUT plain standby drill drill
#
# START (default 1) numbers the first run, so that several calls add to one
# OUT; RATE and BACKEND=sim change the rate and the backend (a dry run),
# POLICY the scheduling policy (default: the daemon's).
# Writes OUT/run-NN-MODE/{config.yaml,serve.log,load.json,load.txt,
# records.jsonl,jobs.json,metrics.txt,smi.txt,steps.txt}, prints one line
# per run and, for drills, the timeline around the failover
# (standby_summary.py), and packs everything into OUT/standby-drill.tgz.
set -u
OUT=${1:?usage: tools/gpu/standby-drill.sh OUT MODE...}; shift
R=$(cd "$(dirname "$0")/../.." && pwd); A=${ATOLL:-$R/bin/atoll}; U=http://127.0.0.1:8000
N=${START:-1}; LAUNCH=${BE_LAUNCH:-30000}; KIND=${KIND:-trap}; RATE=${RATE:-300}; BACKEND=${BACKEND:-cuda}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
for mode in "$@"; do
  name=$mode; [ "$mode" = drill ] && [ "$KIND" != trap ] && name=drill-$KIND
  d=$OUT/run-$(printf %02d $N)-$name; mkdir -p "$d"; N=$((N + 1))
  { echo "listen: 127.0.0.1:8000"; echo "backend: $BACKEND"
    echo "models: [{name: resnet50, batch: 1, default_class: HP, max_queue: 64}]"
    echo "jobs: [{model: resnet50-train, batch: 32}, {model: bert-base-train, batch: 8}]"
    [ -n "${POLICY:-}" ] && echo "policy: $POLICY"
    [ "$mode" != plain ] && echo "standby: true"
    [ "$mode" = drill ] && printf 'fault_drill:\n  be_launch: %s\n  kind: %s\n' "$LAUNCH" "$KIND"
  } > "$d/config.yaml"
  $A serve --config "$d/config.yaml" --log-format json > "$d/serve.log" 2>&1 &
  SP=$!
  for i in $(seq 1 300); do
    m=$(curl -sf $U/metrics 2>/dev/null) && { [ "$mode" = plain ] || grep -q '^atoll_standby_ready 1' <<< "$m"; } && break
    kill -0 $SP 2>/dev/null || break; sleep 1
  done
  echo "ready after ${i}s" > "$d/steps.txt"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader > "$d/smi.txt"
  date +%s.%N > "$d/load-start.txt"
  timeout 90 $A load --model resnet50 --rate $RATE --duration 27s --warmup 2s --slo 20ms --timeout 5s \
    --out "$d/load.json" --records "$d/records.jsonl" > "$d/load.txt" 2>&1 &
  LP=$!
  sleep 3
  curl -s $U/v2/jobs -d '{"model":"resnet50-train","iterations":1000000}' >> "$d/steps.txt"
  curl -s $U/v2/jobs -d '{"model":"bert-base-train","iterations":1000000,"resume":true}' >> "$d/steps.txt"
  wait $LP; echo "load rc=$?" >> "$d/steps.txt"
  curl -s $U/v2/jobs > "$d/jobs.json"
  curl -s $U/metrics > "$d/metrics.txt"
  echo "--- after" >> "$d/smi.txt"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >> "$d/smi.txt"
  kill -TERM $SP
  for i in $(seq 1 60); do kill -0 $SP 2>/dev/null || break; sleep 1; done
  kill -KILL $SP 2>/dev/null; wait $SP 2>/dev/null; echo "serve rc=$?" >> "$d/steps.txt"
  sleep 2 # the GPU's contexts are torn down before the next run
done
python3 "$R/tools/gpu/standby_summary.py" "$OUT" | tee "$OUT/summary.txt"
tar czf /tmp/standby-drill.tgz -C "$OUT" --exclude standby-drill.tgz . && mv /tmp/standby-drill.tgz "$OUT/"
