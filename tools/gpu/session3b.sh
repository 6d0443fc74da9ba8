#!/usr/bin/env bash
# GPU session 3b: the daemon on the GPU with binary tensors (issue 5), the
# fidelity pairs again (repeat + the driver's host cost per launch), and the
# default demo workload (ResNet-50 HP + ResNet-50 training bs32 BE) on the GPU.
set -u
R=$PWD; OUT=${OUT:-/tmp/out}; W=/tmp/work3b; rm -rf $W; mkdir -p $W
A=$R/bin/atoll
log() { echo "== $(date +%T) $*" | tee -a $W/steps.log; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $W/gpu.txt 2>&1

log serve
$A serve --backend cuda --model resnet50 --job vgg19:1 --job resnet50-train:32 --listen 127.0.0.1:8000 \
  --log-format json > $W/serve.log 2>&1 &
SP=$!
for i in $(seq 1 180); do
  curl -sf 127.0.0.1:8000/v2/health/ready > /dev/null && break
  kill -0 $SP 2>/dev/null || break
  sleep 1
done
log "ready after ${i}s"
L="timeout 40 $A load --model resnet50 --rate 250 --duration 15s --slo 10ms"
$L --data json --out $W/load-json.json > $W/load-json.txt 2>&1
$L --out $W/load-alone.json > $W/load-alone.txt 2>&1
timeout 20 $A jobs submit --model vgg19 --batch 1 --iterations 100000000 > $W/jobs.txt 2>&1
sleep 1
$L --out $W/load-vgg.json > $W/load-vgg.txt 2>&1
timeout 20 $A jobs list >> $W/jobs.txt 2>&1
timeout 20 $A jobs cancel job-1 >> $W/jobs.txt 2>&1
timeout 20 $A jobs submit --model resnet50-train --batch 32 --iterations 100000 >> $W/jobs.txt 2>&1
sleep 2
$L --out $W/load-train.json > $W/load-train.txt 2>&1
timeout 20 $A jobs list >> $W/jobs.txt 2>&1
curl -s 127.0.0.1:8000/metrics > $W/metrics.txt
kill -TERM $SP; wait $SP; echo "serve rc=$?" >> $W/jobs.txt

pair() { # name hp be batch
  log "pair $1: $2 + $3 bs$4"
  timeout 240 $A demo --backend cuda --gpu H200 --hp $2 --be $3 --be-batch $4 \
    --duration 2s --warmup 200ms --policies dedicated,streams,priority,orion,reef,atoll \
    --reports $W/$1 > $W/$1.txt 2> $W/$1.err
  echo "rc=$?" >> $W/$1.txt
}
pair pair1 resnet50 vgg19 1
pair pair2 mobilenetv2 resnet152 1
pair train resnet50 resnet50-train 32
log done
tar czf $OUT/session3b.tgz -C $W .
echo; cat $W/gpu.txt $W/steps.log
for f in load-json load-alone load-vgg load-train; do echo "-- $f"; grep -E "^│ +all|INVALID|send lag" $W/$f.txt; done
cat $W/jobs.txt
for f in pair1 pair2 train; do tail -13 $W/$f.txt; tail -2 $W/$f.err; done
grep -h hostUsPerLaunch $W/pair1/*.json $W/train/*.json | head -12
