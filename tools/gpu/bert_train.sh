#!/usr/bin/env bash
# Runs on the GPU machine (repo root; no Go there). Needs, built here by the
# lead:
#   GOOS=linux GOARCH=amd64 go test -c -o bin/kernels.test ./kernels
#   GOOS=linux GOARCH=amd64 go test -c -o bin/exec.test ./models/exec
#
# 1. the BERT training kernels' GPU self-test (every form against the CPU
#    references; bit identity after preemption for softmax/layernorm
#    backward, the layernorm weight-gradient partials, the embedding
#    gradient and in-place Adam; no latency measurements). The strided
#    GEMMs of the attention backward are the self-tested sgemm kernels over
#    other views: step 2 checks them layer by layer;
# 2. BERT fine-tuning steps wholly on the GPU (TestGPUBERTTrainStep):
#    - a reduced BERT step (2 layers, hidden 128, sequence 64, batch 4) run
#      layer by layer, every layer's outputs against its kernel's CPU
#      reference from the layer's device inputs, then the whole step (loss,
#      Adam first moments) against models.Reference, bounded by the CPU's
#      own spread when the bf16 weights move one ulp;
#    - bert-base-train at batch 8: a first step, a second one layer by
#      layer with per-layer checks, and the median step time over 10 steps.
#
# Writes 2 files to $OUT: bert-train-logs.tgz, summary.txt. Budget: under
# 4 minutes (step timeouts 95 + 130 s).
set -u
R=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
W=/tmp/bert-train-work; rm -rf $W; mkdir -p $W
S=$W/summary.txt
log() { echo "== $(date +%T) $*" | tee -a $W/steps.log; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $W/gpu.txt 2>&1

log "kernels self-test (BERT training kernels)"
( cd $R/kernels && OUT=$W timeout 95 $R/bin/kernels.test -test.run 'TestGPUSelfTest$' -test.v \
    -gpu.only gelu_bwd,tanh_bwd,softmax_bwd,layernorm_bwd,ln_grad_partial,col_partial,embed_bwd,embed_add,cls_scatter,transpose_,concat3,adam_ ) > $W/selftest.txt 2>&1
echo "selftest rc=$?" >> $W/steps.log

log "BERT training steps on the GPU"
( cd $R/models/exec && OUT=$W timeout 130 $R/bin/exec.test -test.run 'TestGPUBERTTrainStep$' -test.v -test.timeout 125s \
    -bert.model bert-base-train -bert.batch 8 -bert.runs 10 ) > $W/trainstep.txt 2>&1
echo "trainstep rc=$?" >> $W/steps.log
log done

{
  cat $W/gpu.txt
  cat $W/steps.log
  echo "--- self-test (failures and summary)"
  grep -E "FAIL|false|PASS|ok |SelfTest|panic" $W/selftest.txt | tail -15
  grep -A40 -i "identity" $W/selftest.txt | tail -14
  echo "--- training steps (per-layer worst offenders, whole-step comparison, step time)"
  cat $W/bert_train_gpu.txt 2>/dev/null || tail -40 $W/trainstep.txt
  grep -E "^(--- |FAIL|ok|PASS|panic)|bert_train_gpu_test|train_check_test" $W/trainstep.txt | tail -10
} > $S 2>&1
cp $S $OUT/summary.txt
tar czf $OUT/bert-train-logs.tgz -C $W .
echo
cat $S
