#!/usr/bin/env bash
# Runs the kernel library's GPU self-test and the torch.matmul baseline in one
# device session. Build first (on any machine with Go):
#   GOOS=linux GOARCH=amd64 CGO_ENABLED=0 go test -c -o bin/kernels.test ./kernels
# then, on the GPU machine, from the repository root:
#   bash kernels/testdata/gpu_selftest.sh
# Logs go to $OUT (or ./out) : smi.txt, torch.txt, selftest.log, kernels_selftest.json.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/smi.txt"
python3 kernels/testdata/torch_gemm.py 4096 2>&1 | tee "$OUT/torch.txt"
./bin/kernels.test -test.run 'TestGPUSelfTest' -test.v -gpu.trials "${TRIALS:-100}" >"$OUT/selftest.log" 2>&1
rc=$?
python3 kernels/testdata/torch_gemm.py 4096 2>&1 | tee -a "$OUT/torch.txt"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/smi.txt"
grep -v "│ ok │" "$OUT/selftest.log" | tail -60
exit $rc
