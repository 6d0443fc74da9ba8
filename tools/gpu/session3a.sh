#!/usr/bin/env bash
# GPU session 3a: BERT wholly on the GPU (tools/gpu/bert.sh), then the
# ResNet-50 training step (tools/gpu/train.sh). Each script's files go back
# in few enough files for the device tool: bert's as $OUT/bert.tgz.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/bert-out
OUT=/tmp/bert-out bash tools/gpu/bert.sh > /tmp/bert-run.log 2>&1
echo "bert.sh rc=$?" >> /tmp/bert-out/summary.txt
cp /tmp/bert-run.log /tmp/bert-out/
tar czf $OUT/bert.tgz -C /tmp/bert-out .
OUT=$OUT timeout 280 bash tools/gpu/train.sh > /tmp/train-run.log 2>&1
echo "train.sh rc=$?"
echo "===== BERT"; cat /tmp/bert-out/summary.txt
echo "===== TRAIN"; cat $OUT/summary.txt 2>/dev/null || tail -30 /tmp/train-run.log
