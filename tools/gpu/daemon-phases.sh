#!/usr/bin/env bash
# The training step's per-layer check (tools/gpu/train.sh),
# then where a daemon request's time goes: `atoll serve` on the GPU driven by
# `atoll load` on a fixed Poisson trace (20 and 250 req/s), its per-phase
# metrics, and the scheduler alone on the same trace (atoll demo, dedicated).
set -u
R=$PWD; OUT=${OUT:-/tmp/out}; W=/tmp/work4; rm -rf $W; mkdir -p $W
A=$R/bin/atoll
log() { echo "== $(date +%T) $*" | tee -a $W/steps.log; }
. tools/gpu/serve-load.sh
log train.sh
OUT=$OUT timeout 250 bash tools/gpu/train.sh > $W/train-run.log 2>&1
echo "train.sh rc=$?" >> $W/steps.log

log "scheduler alone on the traces"
for r in 20 250; do
  timeout 60 $A demo --backend cuda --gpu H200 --hp resnet50 --be none --policies dedicated \
    --arrival trace --trace tools/gpu/trace-${r}rps-15s.txt --duration 14s --warmup 1s \
    --reports $W/demo-$r > $W/demo-$r.txt 2>&1
done
serve_and_load
log done
tar czf $OUT/daemon-phases.tgz -C $W .
echo; cat $W/steps.log
echo "--- train"; cat $OUT/summary.txt 2>/dev/null | tail -40
for r in 20 250; do
  echo "--- $r req/s: scheduler alone"; grep -E "dedicated" $W/demo-$r.txt | tail -1
  echo "--- $r req/s: daemon"; grep -E "^│ +all|INVALID|send lag" $W/load-$r.txt
  cat $W/metrics-$r.txt
done
