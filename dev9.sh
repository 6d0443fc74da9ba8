#!/bin/bash
cd bin && tar xJf xz.tar.xz && cp new/atoll atoll && cd ..
tools/gpu/matrix.sh $OUT/matrix-h100-embed 6m30s bench/matrix/gpu-blas.yaml > $OUT/matrix.log 2>&1
echo rc=$?
cd $OUT && tar czf matrix.tgz matrix-h100-embed matrix.log && cd - > /dev/null
tail -40 $OUT/matrix.log
