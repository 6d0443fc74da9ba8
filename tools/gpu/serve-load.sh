# Sourced by the daemon scripts: serve resnet50 with `atoll serve` on the
# GPU, drive it with `atoll load` on the fixed 20 and 250 req/s traces, and
# keep each run's load report and the daemon's per-phase metrics in $W.
# Needs A (the atoll binary), W (the work folder) and log().
serve_and_load() {
  log serve
  $A serve --backend cuda --model resnet50 --listen 127.0.0.1:8000 --log-format json > $W/serve.log 2>&1 &
  SP=$!
  for i in $(seq 1 180); do curl -sf 127.0.0.1:8000/v2/health/ready > /dev/null && break; kill -0 $SP 2>/dev/null || break; sleep 1; done
  log "ready after ${i}s"
  for r in 20 250; do
    timeout 40 $A load --model resnet50 --trace tools/gpu/trace-${r}rps-15s.txt --warmup 1s --slo 10ms \
      --out $W/load-$r.json > $W/load-$r.txt 2>&1
    curl -s 127.0.0.1:8000/metrics | grep -E "^atoll_request_(phase|queue|duration)_seconds_(sum|count)" > $W/metrics-$r.txt
  done
  kill -TERM $SP; wait $SP
}
