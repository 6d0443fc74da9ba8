#!/usr/bin/env bash
# The daemon's batching on the GPU (max_batch, docs/api.md): first the
# check that a request served in a slot of a batched pass gets the output it
# gets alone (models/exec TestGPUBatchedSlots), then `atoll serve` with one
# model at max_batch 1 and 4, each driven by `atoll load` at the same rates
# for 30 s; per run the load report (p50/p99, served, dropped) and the
# daemon's per-phase metrics. Needs bin/atoll and bin/exec.test (linux/amd64).
#
#   MODEL=resnet50 RATES="600 900 1200" tools/gpu/daemon-batch.sh OUT
set -u
out=${1:?usage: tools/gpu/daemon-batch.sh OUT}
model=${MODEL:-resnet50}
mkdir -p "$out"
A=$PWD/bin/atoll
(cd models/exec && ../../bin/exec.test -test.run TestGPUBatchedSlots -test.v) > "$out/slots.txt" 2>&1
echo "TestGPUBatchedSlots rc=$?" | tee "$out/steps.log"
for mb in 1 4; do
	printf 'models:\n  - name: %s\n    max_batch: %s\n' "$model" "$mb" > "$out/atoll-$mb.yaml"
	$A serve --backend cuda --config "$out/atoll-$mb.yaml" --listen 127.0.0.1:8000 > "$out/serve-$mb.log" 2>&1 &
	sp=$!
	for i in $(seq 1 180); do curl -sf 127.0.0.1:8000/v2/health/ready > /dev/null && break; kill -0 $sp 2>/dev/null || break; sleep 1; done
	echo "max_batch $mb ready after ${i}s" | tee -a "$out/steps.log"
	for r in ${RATES:-600 900 1200}; do
		timeout 60 $A load --model "$model" --rate "$r" --duration 30s --slo 10ms --max-inflight 2000 \
			--out "$out/load-$mb-$r.json" > "$out/load-$mb-$r.txt" 2>&1
		echo "max_batch $mb rate $r rc=$?" | tee -a "$out/steps.log"
		curl -s 127.0.0.1:8000/metrics | grep -E "^atoll_request_(phase|queue|duration)_seconds_(sum|count)" > "$out/metrics-$mb-$r.txt"
	done
	kill -TERM $sp; wait $sp
done
for f in "$out"/load-*.txt; do echo "--- $f"; grep -E "^│ +all|dropped|INVALID" "$f"; done
