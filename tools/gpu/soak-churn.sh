#!/usr/bin/env bash
# The daemon's long soak on the GPU with BE jobs churning: ResNet-50 bs1
# served by `atoll serve --backend cuda` at 250 req/s (Poisson, binary
# inputs) for SOAK seconds (default 420, which fits one 10-minute device
# call; for SOAK=600 start it with `setsid nohup ... &` and collect OUT in
# later calls on the same machine), while
# every 5 s a job is submitted (ResNet-50 training bs32 and VGG-19 bs1
# inference in turn, 10^6 iterations each) and the one submitted before is
# cancelled. Every 20 s: the daemon's goroutines, RSS and GPU memory in use
# (its /metrics: go_goroutines, process_resident_memory_bytes,
# atoll_gpu_memory_used_bytes) into samples.txt; `go run ./tools/soakplot`
# draws them. Usage: tools/gpu/soak-churn.sh OUT, bin/atoll built.
set -u
R=$PWD; OUT=${1:?usage: tools/gpu/soak-churn.sh OUT}; SOAK=${SOAK:-420}; W=$(mktemp -d); mkdir -p "$OUT"
A=$R/bin/atoll; U=http://127.0.0.1:8000
log() { echo "== $(date +%T) $*" | tee -a $W/steps.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/gpu.txt
$A serve --backend cuda --model resnet50:1:HP:64 --job resnet50-train:32 --job vgg19:1 \
  --listen 127.0.0.1:8000 --log-format json > $W/serve.log 2>&1 &
SP=$!
for i in $(seq 1 240); do curl -sf $U/v2/health/ready > /dev/null && break; kill -0 $SP 2>/dev/null || break; sleep 1; done
log "ready after ${i}s"
sample() {
  curl -s $U/metrics | awk -v t=$(date +%s) -v tag=$1 '
    /^go_goroutines /{g=$NF} /^process_resident_memory_bytes /{r=$NF}
    /^atoll_gpu_memory_used_bytes/{m=$NF}
    /^atoll_requests_total.*code="200"/{ok+=$NF}
    END{printf "%s %d %d %.0f %.0f %d\n", tag, t, g, r, m, ok}' >> $W/samples.txt
}
echo "# phase unix_s goroutines rss_bytes gpu_mem_used_bytes requests_ok" > $W/samples.txt
sample start
timeout $((SOAK + 60)) $A load --model resnet50 --rate 250 --duration ${SOAK}s --warmup 1s --slo 10ms \
  --out $W/load.json > $W/load.txt 2>&1 &
LP=$!
( n=0; prev=""; end=$(( $(date +%s) + SOAK ))
  while [ $(date +%s) -lt $end ]; do
    if [ $((n % 2)) -eq 0 ]; then spec='{"model":"resnet50-train","iterations":1000000}'; else spec='{"model":"vgg19","iterations":1000000}'; fi
    id=$(curl -s $U/v2/jobs -d "$spec" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
    echo "$(date +%s) submit $id" >> $W/churn.txt
    if [ -n "$prev" ]; then curl -s -o /dev/null -w "$(date +%s) cancel $prev %{http_code}\n" -X DELETE $U/v2/jobs/$prev >> $W/churn.txt; fi
    prev=$id; n=$((n + 1)); sleep 5
  done
  [ -n "$prev" ] && curl -s -o /dev/null -w "$(date +%s) cancel $prev %{http_code}\n" -X DELETE $U/v2/jobs/$prev >> $W/churn.txt ) &
CP=$!
( while kill -0 $LP 2>/dev/null; do sleep 20; sample soak; done ) &
SMP=$!
wait $LP; echo "load rc=$?" >> $W/steps.log
wait $CP; kill $SMP 2>/dev/null
sleep 5; sample end
curl -s $U/v2/jobs > $W/jobs.json
curl -s -o /dev/null -w 'ready after the soak: %{http_code}\n' $U/v2/health/ready >> $W/steps.log
curl -s $U/metrics > $W/metrics.txt
kill -TERM $SP; wait $SP; echo "serve rc=$?" >> $W/steps.log
tar czf $OUT/soak-churn.tgz -C $W .
cat $W/gpu.txt $W/steps.log
grep -E "^│ +all|VALID|INVALID" $W/load.txt
echo "jobs submitted $(grep -c submit $W/churn.txt), cancels by status: $(awk '$2=="cancel"{print $4}' $W/churn.txt | sort | uniq -c | tr '\n' ' ')"
cat $W/samples.txt
