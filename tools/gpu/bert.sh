#!/usr/bin/env bash
# BERT wholly on the GPU (issue 4: BERT-base batch-1 latency against PyTorch
# eager). Runs on the GPU machine from the repository root, with these
# binaries built beforehand (on any machine with Go):
#
#   GOOS=linux GOARCH=amd64 CGO_ENABLED=0 go test -c -o bin/kernels.test ./kernels
#   GOOS=linux GOARCH=amd64 CGO_ENABLED=0 go test -c -o bin/exec.test ./models/exec
#   GOOS=linux GOARCH=amd64 CGO_ENABLED=0 go build -o bin/atoll ./cmd/atoll
#
# Steps (about 4-5 minutes; each step has a time limit, and later steps are
# skipped once 330 s have gone):
#   1. the kernel library's GPU self-test, correctness only (-gpu.quick),
#      of the strided attention GEMM (sgemm_*) and tanh in every form
#      (plain, reset, resumable, padded, sliced, reset with the flag raised);
#   2. TestGPUModels for the BERTs: tiny-bert, bert-base (seq 128),
#      bert-base-384 and distilbert at batch 1, each run whole on the GPU
#      and compared with the CPU reference and PyTorch eager (f32 and bf16)
#      on the same weights (tools/torchref/ref.py);
#   3. measured profiles: atoll profile --substitute for bert-base and
#      distilbert at batch 1.
# $OUT gets six files: selftest.log, models.log, profile.log,
# H200/bert-base-bs1.json, H200/distilbert-bs1.json, summary.txt (printed
# last). Commit the profiles as profiles/H200/*.json.
set -u
OUT=${OUT:-out}
mkdir -p "$OUT/H200"
W=$(mktemp -d)
START=$SECONDS
S=$OUT/summary.txt
: > "$S"
say() { echo "$*" >> "$S"; }
budget() { # step name: skip when the session's time is spent
  if (( SECONDS - START > 330 )); then say "SKIPPED $1: $((SECONDS - START)) s used"; return 1; fi
  say "== $(date -u +%T) $1 (t=$((SECONDS - START)) s)"
}
for b in bin/kernels.test bin/exec.test bin/atoll; do
  [ -x "$b" ] || { say "missing $b: build it first (see the header of $0)"; exit 2; }
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader >> "$S" 2>&1

rc=0
if budget "kernels self-test (quick)"; then
  # Only the new kernels (-gpu.only; they are checked in every form, the
  # padded ones beside an HP GEMM); a binary without that flag runs all.
  OUT=$W timeout 150 ./bin/kernels.test -test.run 'TestGPUSelfTest$' -test.v -gpu.quick -gpu.only 'sgemm_,ew_tanh' > "$OUT/selftest.log" 2>&1
  r=$?
  if grep -q "flag provided but not defined" "$OUT/selftest.log"; then
    OUT=$W timeout 150 ./bin/kernels.test -test.run 'TestGPUSelfTest$' -test.v -gpu.quick > "$OUT/selftest.log" 2>&1
    r=$?
  fi
  grep -q -- "--- SKIP" "$OUT/selftest.log" && { r=3; say "selftest skipped: no GPU seen"; }
  say "selftest rc=$r"; (( r != 0 )) && rc=1
  # The check count, the new kernels' rows passed, every failed row; on
  # failure the log's tail (an NVRTC compile error lands there).
  grep -E "^correctness:" "$OUT/selftest.log" >> "$S"
  say "sgemm/tanh rows ok: $(grep -E "sgemm_|ew_tanh" "$OUT/selftest.log" | grep -c " ok ")," \
    "failed: $(grep -E "sgemm_|ew_tanh" "$OUT/selftest.log" | grep -c " FAIL ")"
  grep -E " FAIL " "$OUT/selftest.log" | head -20 >> "$S"
  (( r != 0 )) && tail -25 "$OUT/selftest.log" | cut -c1-400 >> "$S"
fi

if budget "TestGPUModels: BERTs whole on the GPU vs CPU reference and PyTorch eager"; then
  OUT=$W timeout 200 ./bin/exec.test -test.run 'TestGPUModels$' -test.v \
    -models.only '^(tiny-bert|bert-base|bert-base-384|distilbert)$' -models.runs 30 > "$OUT/models.log" 2>&1
  r=$?
  grep -q -- "--- SKIP" "$OUT/models.log" && { r=3; say "models skipped: no GPU seen"; }
  say "models rc=$r"; (( r != 0 )) && rc=1
  # The table: mode, gpu/all, err vs CPU, err vs torch, atoll ms, torch f32/bf16, ratio.
  grep -E "^(atoll models|latency|model |tiny-bert|bert-base|distilbert)" "$OUT/models.log" >> "$S"
  grep -E "^\s+gpu_test.go:[0-9]+: " "$OUT/models.log" | head -10 >> "$S"
fi

for m in bert-base distilbert; do
  if budget "atoll profile --model $m --batch 1 --substitute"; then
    timeout 75 ./bin/atoll profile --model "$m" --batch 1 --substitute --force \
      --out "$OUT/H200/$m-bs1.json" >> "$OUT/profile.log" 2>&1
    r=$?; say "profile $m rc=$r"; (( r != 0 )) && rc=1
    tail -3 "$OUT/profile.log" >> "$S"
  fi
done
ls -l "$OUT/H200" >> "$S" 2>&1
say "done in $((SECONDS - START)) s, rc=$rc"
rm -rf "$W"
echo; cat "$S"
exit $rc
