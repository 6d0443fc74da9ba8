#!/usr/bin/env bash
# GPU session 5: atoll with Reset for one-wave BE kernels, against Orion and
# reef, on the three fidelity pairs (same commands as session 3b).
set -u
R=$PWD; OUT=${OUT:-/tmp/out}; W=/tmp/work5; rm -rf $W; mkdir -p $W
A=$R/bin/atoll
pair() { # name hp be batch
  echo "== $(date +%T) $1" >> $W/steps.log
  timeout 200 $A demo --backend cuda --gpu H200 --hp $2 --be $3 --be-batch $4 \
    --duration 2s --warmup 200ms --policies dedicated,orion,reef,atoll \
    --reports $W/$1 > $W/$1.txt 2> $W/$1.err
  echo "rc=$?" >> $W/$1.txt
}
pair pair1 resnet50 vgg19 1
pair pair2 mobilenetv2 resnet152 1
pair train resnet50 resnet50-train 32
tar czf $OUT/session5.tgz -C $W .
cat $W/steps.log
for f in pair1 pair2 train; do tail -9 $W/$f.txt; tail -2 $W/$f.err; done
