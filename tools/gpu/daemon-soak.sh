#!/usr/bin/env bash
# The overload soak on the GPU: ResNet-50
# bs1 served by `atoll serve --backend cuda` with a ResNet-50 training job
# beside it, driven at ~2x its sustainable rate (1 / 2.1 ms ~ 475 req/s ->
# 950 req/s, Poisson) for 60 s; daemon RSS sampled every 5 s; readiness and
# a request afterwards.
set -u
R=$PWD; OUT=${OUT:-/tmp/out}; W=/tmp/work7; rm -rf $W; mkdir -p $W
A=$R/bin/atoll
$A serve --backend cuda --model resnet50:1:HP:64 --job resnet50-train:32 --listen 127.0.0.1:8000 --log-format json > $W/serve.log 2>&1 &
SP=$!
for i in $(seq 1 180); do curl -sf 127.0.0.1:8000/v2/health/ready > /dev/null && break; kill -0 $SP 2>/dev/null || break; sleep 1; done
echo "ready after ${i}s" > $W/steps.log
timeout 20 $A jobs submit --model resnet50-train --batch 32 --iterations 1000000 >> $W/steps.log 2>&1
( while kill -0 $SP 2>/dev/null; do echo "$(date +%s) $(ps -o rss= -p $SP)"; sleep 5; done ) > $W/rss.txt &
RP=$!
timeout 100 $A load --model resnet50 --rate 950 --duration 60s --warmup 1s --slo 20ms --out $W/soak.json > $W/soak.txt 2>&1
echo "load rc=$?" >> $W/steps.log
curl -s -o /dev/null -w 'ready after the soak: %{http_code}\n' 127.0.0.1:8000/v2/health/ready >> $W/steps.log
timeout 30 $A load --model resnet50 --rate 50 --duration 5s --warmup 1s --slo 20ms > $W/after.txt 2>&1
timeout 20 $A jobs list >> $W/steps.log 2>&1
curl -s 127.0.0.1:8000/metrics | grep -E "^atoll_(requests_total|engine_restarts|be_iterations|request_phase_seconds_(sum|count))" > $W/metrics.txt
kill -TERM $SP; wait $SP; echo "serve rc=$?" >> $W/steps.log
kill $RP 2>/dev/null
tar czf $OUT/daemon-soak.tgz -C $W .
cat $W/steps.log; cat $W/soak.txt; grep -E "^│ +all" $W/after.txt; awk '{print $2}' $W/rss.txt | tr '\n' ' '; echo; grep requests_total $W/metrics.txt
