#!/usr/bin/env bash
# Runs on the GPU machine (repo root, bin/atoll carried): the simulator-
# fidelity pairs (issue 4), the daemon on the GPU (issue 5) and the probe's
# reef row through the scheduler's flag relay. Full logs and JSON reports
# land under $OUT as tarballs; a short summary is printed last.
set -u
R=$PWD
OUT=${OUT:-/tmp/out}
W=/tmp/work; mkdir -p $W
A=$R/bin/atoll
log() { echo "== $(date +%T) $*" | tee -a $W/steps.log; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $W/gpu.txt 2>&1
$A devices > $W/devices.txt 2>&1

pair() { # name hp be
  log "pair $1: $2 + $3"
  timeout 200 $A demo --backend cuda --gpu H200 --hp $2 --be $3 --be-batch 1 \
    --duration 2s --warmup 200ms --policies dedicated,streams,priority,orion,reef,atoll \
    --reports $W/$1 > $W/$1.txt 2> $W/$1.err
  echo "rc=$?" >> $W/$1.txt
}
pair pair1 resnet50 vgg19
pair pair2 mobilenetv2 resnet152

log serve
$A serve --backend cuda --gpu H200 --model resnet50 --job vgg19:1 --listen 127.0.0.1:8000 \
  --log-format json > $W/serve.log 2>&1 &
SP=$!
for i in $(seq 1 120); do
  curl -sf 127.0.0.1:8000/v2/health/ready > /dev/null && break
  kill -0 $SP 2>/dev/null || break
  sleep 1
done
log "ready after ${i}s"
timeout 40 $A load --model resnet50 --rate 250 --duration 20s --slo 10ms --out $W/load-alone.json > $W/load-alone.txt 2>&1
timeout 20 $A jobs submit --model vgg19 --batch 1 --iterations 1000000 > $W/job.txt 2>&1
sleep 1
timeout 40 $A load --model resnet50 --rate 250 --duration 20s --slo 10ms --out $W/load-job.json > $W/load-job.txt 2>&1
timeout 20 $A jobs list >> $W/job.txt 2>&1
curl -s 127.0.0.1:8000/metrics > $W/metrics.txt
# bad input must be answered, not harm the daemon
curl -s -o $W/bad.txt -w '%{http_code}\n' -X POST 127.0.0.1:8000/v2/models/resnet50/infer -d '{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}' >> $W/job.txt
kill -TERM $SP; wait $SP; echo "serve rc=$?" >> $W/job.txt

log probe
timeout 240 $A probe --backend cuda --blocks 200,20 --policies dedicated,priority,reef,atoll \
  --out $W/probe.json > $W/probe.txt 2>&1
echo "rc=$?" >> $W/probe.txt
log done

tar czf $OUT/session2.tgz -C $W .
echo; cat $W/gpu.txt; cat $W/steps.log
for f in pair1 pair2; do tail -14 $W/$f.txt; tail -3 $W/$f.err; done
tail -12 $W/load-alone.txt; tail -12 $W/load-job.txt; cat $W/job.txt
tail -12 $W/probe.txt
