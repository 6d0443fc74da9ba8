#!/usr/bin/env bash
# GPU session 8: the BERT training step on the GPU (tools/gpu/bert_train.sh)
# and its measured profile (bert-base-train bs8).
set -u
OUT=${OUT:-/tmp/out}
OUT=$OUT timeout 260 bash tools/gpu/bert_train.sh > /tmp/bt.log 2>&1
echo "bert_train.sh rc=$?"
mkdir -p /tmp/p8
timeout 150 bin/atoll profile --model bert-base-train --batch 8 --substitute --out $OUT/bert-base-train-bs8.json > /tmp/p8/profile.log 2>&1
echo "profile rc=$?"
cp /tmp/p8/profile.log $OUT/profile.log
cat $OUT/summary.txt 2>/dev/null | tail -60 || tail -40 /tmp/bt.log
tail -12 $OUT/profile.log
