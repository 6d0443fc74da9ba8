#!/usr/bin/env bash
# Scale-out checks on one GPU host (issue: every GPU of a node under one
# daemon). Usage: tools/gpu/fleet.sh OUT, from the repository root, with
# bin/atoll and bin/server.test built for linux/amd64:
#   1. the daemon on GPU 0 (`atoll serve --backend cuda`, one device, as
#      before there were several) on the fixed 20 and 250 req/s traces with
#      binary inputs: load reports and per-phase metrics (serve-load.sh);
#   2. BenchmarkFleetHPThroughput — the simulated fleet of 1 and 2 devices
#      behind one router, closed loop, four clients per device — three
#      times, on this host's cores (the 2-core dev VM is host-bound).
set -u
R=$PWD; OUT=${1:?usage: tools/gpu/fleet.sh OUT}; W=$(mktemp -d); mkdir -p "$OUT"
A=$R/bin/atoll
log() { echo "== $(date +%T) $*" | tee -a $W/steps.log; }
. tools/gpu/serve-load.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/gpu.txt
nproc > $W/cpus.txt
serve_and_load
log fleet-bench
(cd server && timeout 300 $R/bin/server.test -test.run '^$' -test.bench FleetHPThroughput \
  -test.benchtime 1x -test.count 3 > $W/fleet-bench.txt 2>&1)
log done
tar czf $OUT/fleet.tgz -C $W .
cat $W/gpu.txt $W/cpus.txt $W/steps.log
for r in 20 250; do echo "--- $r req/s"; grep -E "^│ +all|INVALID|VALID" $W/load-$r.txt; cat $W/metrics-$r.txt; done
grep -E "^Benchmark" $W/fleet-bench.txt
