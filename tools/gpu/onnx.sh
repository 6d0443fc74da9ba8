#!/usr/bin/env bash
# Issue 19's ONNX table: export torchvision ResNet-50, MobileNetV2, VGG-19
# and Hugging Face BERT-base, DistilBERT with torch.onnx.export (random
# weights, tools/onnx/export.py, which also writes onnxruntime's outputs),
# run each on the GPU with the file's weights and compare with onnxruntime
# (run.test -test.run TestGPUONNX: relative error, whole-pass time beside
# the zoo model's), profile each export and its zoo model into one store,
# then each of ResNet-50 and BERT-base as HP at load 0.5 beside its
# training step, imported and zoo (atoll policy).
#
#   tools/gpu/onnx.sh OUT
#
# Writes OUT/onnx_gpu.txt (the table), OUT/export.log, OUT/profiles/<gpu>/
# and OUT/bench-<model>-{0,1}.json (1: the export). Needs bin/atoll and
# bin/run.test (go test -c -o bin/run.test ./models/run), python3 with
# torch, torchvision, transformers, onnx and onnxruntime.
set -uo pipefail
out=${1:?usage: tools/gpu/onnx.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
onnx=$out/onnx
timeout 300 python3 "$root/tools/onnx/export.py" "$onnx" --models resnet50,mobilenetv2,vgg19,bert-base,distilbert >"$out/export.log" 2>&1 || { tail "$out/export.log"; exit 1; }
(cd "$root/models/run" && OUT=$out timeout 300 "$root/bin/run.test" -test.run TestGPUONNX -models.onnx "$onnx" -test.v >"$out/onnx_gpu.log" 2>&1)
export ATOLL_PROFILES=$out/profiles
for m in resnet50 mobilenetv2 vgg19 bert-base distilbert; do
	for x in "$onnx/$m.onnx" "$m"; do
		timeout 120 "$root/bin/atoll" profile --model "$x" >>"$out/profile.log" 2>&1 || echo "profile $x failed (see profile.log)"
	done
done
bench() { # HP BE BE-BATCH DURATION TAG
	timeout -s QUIT 150 "$root/bin/atoll" bench --backend cuda --quiet --hp "$1" --be "$2" --be-batch "$3" --load 0.5 --duration "$4" \
		--out "$out/bench-$5.json" >"$out/bench-$5.log" 2>&1 || echo "bench $5 failed (see bench-$5.log)"
}
bench "$onnx/resnet50.onnx" resnet50-train 32 10s resnet50-1
bench resnet50 resnet50-train 32 10s resnet50-0
bench "$onnx/bert-base.onnx" bert-base-train 8 13s bert-base-1
bench bert-base bert-base-train 8 13s bert-base-0
rm -rf "$onnx"
cat "$out/onnx_gpu.txt"
