#!/usr/bin/env bash
# Measured profiles of the zoo on an H100 (the simulator's default GPU):
# `atoll profile` for every model the kernel library runs whole.
set -u
OUT=${OUT:-/tmp/out}; W=/tmp/h100; rm -rf $W; mkdir -p $W/H100-SXM
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $W/gpu.txt 2>&1
bin/atoll devices > $W/devices.txt 2>&1
for mb in resnet50:1 resnet152:1 mobilenetv2:1 vgg19:1 bert-base:1 bert-base-384:1 distilbert:1 resnet50-train:32; do
  m=${mb%:*}; b=${mb#*:}
  echo "== $(date +%T) $m bs$b" >> $W/profile.log
  timeout 150 bin/atoll profile --model $m --batch $b --substitute --force --out $W/H100-SXM/$m-bs$b.json >> $W/profile.log 2>&1
  echo "rc=$?" >> $W/profile.log
done
tar czf $OUT/h100-profiles.tgz -C $W .
cat $W/gpu.txt $W/devices.txt; grep -E "^==|rc=|wrote|total|Error|error" $W/profile.log | head -40
