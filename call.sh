for f in bin/xz/*.xz; do xz -dc $f > bin/$(basename $f .xz); chmod +x bin/$(basename $f .xz); done
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 540 tools/gpu/matrix.sh results/matrix-h200-blas 0 bench/matrix/gpu-blas.yaml > $OUT/m.log 2>&1; echo matrix rc=$?
grep -A12 "^| run" $OUT/m.log | tail -14
tar -czf $OUT/bert.tgz results/matrix-h200-blas/bert-train
