#!/usr/bin/env bash
# The daemon's phases with the raw input path
# (the traces of daemon-phases.sh), the BERT-base seq-384 profile, and three
# repeats of the MobileNetV2 + ResNet-152 pair (run-to-run spread).
set -u
R=$PWD; OUT=${OUT:-/tmp/out}; W=/tmp/work6; rm -rf $W; mkdir -p $W
A=$R/bin/atoll
log() { echo "== $(date +%T) $*" | tee -a $W/steps.log; }
. tools/gpu/serve-load.sh
serve_and_load
log profile
mkdir -p $W/H200
timeout 90 $A profile --model bert-base-384 --batch 1 --substitute --out $W/H200/bert-base-384-bs1.json > $W/profile.txt 2>&1
echo "profile rc=$?" >> $W/steps.log
for n in 1 2 3; do
  log "pair2 repeat $n"
  timeout 120 $A demo --backend cuda --gpu H200 --hp mobilenetv2 --be resnet152 --be-batch 1 \
    --duration 2s --warmup 200ms --policies dedicated,orion,reef,atoll --reports $W/pair2-r$n > $W/pair2-r$n.txt 2>&1
done
log done
tar czf $OUT/daemon-phases-raw.tgz -C $W .
cat $W/steps.log; tail -3 $W/profile.txt
for r in 20 250; do echo "--- $r req/s"; grep -E "^│ +all|INVALID" $W/load-$r.txt; cat $W/metrics-$r.txt; done
for n in 1 2 3; do grep -E "orion|reef|atoll" $W/pair2-r$n.txt | grep "│"; done
