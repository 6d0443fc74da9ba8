#!/usr/bin/env bash
# Runs on the GPU machine (repo root; no Go there). Needs, built here by the
# lead:
#   GOOS=linux GOARCH=amd64 go test -c -o bin/kernels.test ./kernels
#   GOOS=linux GOARCH=amd64 go test -c -o bin/exec.test ./models/exec
#
# 1. the training kernels' GPU self-test (every form against the CPU
#    references, bit identity after preemption; no latency measurements);
# 2. training steps wholly on the GPU (TestGPUTrainStep):
#    - a reduced ResNet step run layer by layer, every layer's outputs
#      against its kernel's CPU reference from the layer's device inputs,
#      then the whole step against models.Reference, bounded by the CPU's own
#      spread when the input moves one bf16 ulp;
#    - resnet50-train at batch 32: a first step, a second one layer by layer
#      with per-layer checks (convolutions on sampled elements, BN, loss,
#      column sums, pooling backward, split sums, SGD), and the median step
#      time over 10 steps.
#    It prints the worst layers (overall and per kernel) for both.
#
# (PyTorch's step and the atoll profile ran in an earlier session and are
# no longer part of this script.)
#
# Writes 2 files to $OUT: train-logs.tgz, summary.txt. Budget: under 4
# minutes (step timeouts 75 + 165 s; NVRTC modules are cached on disk
# after the self-test, so the training step reuses most of them).
set -u
R=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
W=/tmp/train-work; rm -rf $W; mkdir -p $W
S=$W/summary.txt
log() { echo "== $(date +%T) $*" | tee -a $W/steps.log; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $W/gpu.txt 2>&1

log "kernels self-test (training kernels)"
( cd $R/kernels && OUT=$W timeout 75 $R/bin/kernels.test -test.run 'TestGPUSelfTest$' -test.v \
    -gpu.only bn_,xent,colsum,pool_bwd,sgd_,wgrad_split,splitsum ) > $W/selftest.txt 2>&1
echo "selftest rc=$?" >> $W/steps.log

log "training steps on the GPU"
( cd $R/models/exec && OUT=$W timeout 165 $R/bin/exec.test -test.run 'TestGPUTrainStep$' -test.v -test.timeout 160s \
    -train.model resnet50-train -train.batch 32 -train.runs 10 ) > $W/trainstep.txt 2>&1
echo "trainstep rc=$?" >> $W/steps.log
log done

{
  cat $W/gpu.txt
  cat $W/steps.log
  echo "--- self-test (failures and summary)"
  grep -E "FAIL|false|PASS|ok |SelfTest|panic" $W/selftest.txt | tail -15
  grep -A30 -i "identity" $W/selftest.txt | tail -14
  echo "--- training steps (per-layer worst offenders, whole-step comparison)"
  cat $W/train_gpu.txt 2>/dev/null || tail -40 $W/trainstep.txt
  grep -E "^(--- |FAIL|ok|PASS|panic)|train_gpu_test|train_check_test" $W/trainstep.txt | tail -10
} > $S 2>&1
cp $S $OUT/summary.txt
tar czf $OUT/train-logs.tgz -C $W .
echo
cat $S
