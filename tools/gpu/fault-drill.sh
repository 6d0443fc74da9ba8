#!/usr/bin/env bash
# Issue 18's fault drill on the GPU: ResNet-50 bs1 served by
# `atoll serve --backend cuda` at about load 0.4 (300 req/s Poisson, 40 s)
# while a ResNet-50 training job runs beside it and its BE_LAUNCH-th kernel
# launch (default 20000, a few seconds into the job) runs kernels.Fault
# (KIND: trap or address) instead: what HP requests see when a BE kernel
# faults on a real GPU. Liveness and readiness are polled every 100 ms;
# afterwards a request, the job list, the restart counters.
#
#   tools/gpu/fault-drill.sh OUT [BE_LAUNCH] [KIND]
#
# Writes OUT/drill.txt (summary), OUT/load.json, OUT/serve.log,
# OUT/health.txt (time live ready), OUT/metrics.txt. Needs bin/atoll.
set -u
out=${1:?usage: tools/gpu/fault-drill.sh OUT [BE_LAUNCH] [KIND]}
launch=${2:-20000}
kind=${3:-trap}
mkdir -p "$out"; out=$(cd "$out" && pwd)
A=$(cd "$(dirname "$0")/../.." && pwd)/bin/atoll
cat > "$out/drill.yaml" <<YAML
listen: 127.0.0.1:8000
backend: cuda
models:
  - name: resnet50
    batch: 1
    default_class: HP
    max_queue: 64
jobs:
  - model: resnet50-train
    batch: 32
fault_drill:
  be_launch: $launch
  kind: $kind
YAML
$A serve --config "$out/drill.yaml" --log-format json > "$out/serve.log" 2>&1 &
SP=$!
for i in $(seq 1 180); do curl -sf 127.0.0.1:8000/v2/health/ready > /dev/null && break; kill -0 $SP 2>/dev/null || break; sleep 1; done
echo "ready after ${i}s" > "$out/drill.txt"
( while kill -0 $SP 2>/dev/null; do
	l=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 127.0.0.1:8000/v2/health/live)
	r=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 127.0.0.1:8000/v2/health/ready)
	echo "$(date +%s.%N) $l $r"; sleep 0.1; done ) > "$out/health.txt" &
HP=$!
timeout 100 $A load --model resnet50 --rate 300 --duration 40s --warmup 0 --slo 20ms --timeout 5s --out "$out/load.json" > "$out/load.txt" 2>&1 &
LP=$!
sleep 3
timeout 20 $A jobs submit --model resnet50-train --batch 32 --iterations 1000000 >> "$out/drill.txt" 2>&1
wait $LP; echo "load rc=$?" >> "$out/drill.txt"
timeout 20 $A jobs list >> "$out/drill.txt" 2>&1
curl -s -o /dev/null -w 'live after: %{http_code}\n' 127.0.0.1:8000/v2/health/live >> "$out/drill.txt"
curl -s -o /dev/null -w 'ready after: %{http_code}\n' 127.0.0.1:8000/v2/health/ready >> "$out/drill.txt"
timeout 30 $A load --model resnet50 --rate 50 --duration 3s --warmup 0 --timeout 5s > "$out/after.txt" 2>&1
curl -s 127.0.0.1:8000/metrics | grep -E "^atoll_(requests_total|engine_restarts|be_iterations)" > "$out/metrics.txt"
kill -TERM $SP; wait $SP; echo "serve rc=$?" >> "$out/drill.txt"
kill $HP 2>/dev/null
awk '{print $2, $3}' "$out/health.txt" | uniq -c >> "$out/drill.txt"
grep -i -E '"level":"(ERROR|WARN)"' "$out/serve.log" | head -20 >> "$out/drill.txt"
cat "$out/drill.txt"; tail -12 "$out/load.txt"; tail -5 "$out/after.txt"
