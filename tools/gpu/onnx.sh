#!/usr/bin/env bash
# Issue 19's ONNX table: export torchvision ResNet-50, MobileNetV2, VGG-19
# and Hugging Face BERT-base, DistilBERT with torch.onnx.export (random
# weights, tools/onnx/export.py, which also writes onnxruntime's outputs),
# run each on the GPU with the file's weights and compare with onnxruntime
# (exec.test -test.run TestGPUONNX: relative error, whole-pass time beside
# the zoo model's), profile each export and its zoo model into one store,
# then each model as HP at load 0.5 beside a training step (ResNet-50's for
# the CNNs, BERT-base's for the encoders), imported and zoo (atoll policy).
#
#   tools/gpu/onnx.sh OUT
#
# Resumable: what OUT already holds (exports, the table, profiles, bench
# reports) is not made again, so a call that hits the device's time limit
# (a fresh machine first compiles the kernels: a minute or more) is
# finished by running the same command again. Exports are deleted only at
# the end.
#
# Writes OUT/onnx_gpu.txt (the table), OUT/export.log, OUT/profiles/<gpu>/
# and OUT/bench-<model>-{0,1}.json (1: the export). Needs bin/atoll and
# bin/exec.test (go test -c -o bin/exec.test ./models/exec), python3 with
# torch, torchvision, transformers, onnx and onnxruntime.
set -uo pipefail
out=${1:?usage: tools/gpu/onnx.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
onnx=$out/onnx
if [ ! -f "$onnx/distilbert.ref.safetensors" ]; then
	timeout 300 python3 "$root/tools/onnx/export.py" "$onnx" --models resnet50,mobilenetv2,vgg19,bert-base,distilbert >"$out/export.log" 2>&1 || { tail "$out/export.log"; exit 1; }
fi
if [ ! -f "$out/onnx_gpu.txt" ]; then
	(cd "$root/models/exec" && OUT=$out timeout 300 "$root/bin/exec.test" -test.run TestGPUONNX -models.onnx "$onnx" -test.v >"$out/onnx_gpu.log" 2>&1)
fi
export ATOLL_PROFILES=$out/profiles
gpu=$(ls "$out/profiles" 2>/dev/null | head -1)
for m in resnet50 mobilenetv2 vgg19 bert-base distilbert; do
	for x in "$onnx/$m.onnx" "$m"; do
		name=$(basename "$x" .onnx)
		[ "$x" != "$m" ] && name=$m-onnx
		[ -n "$gpu" ] && [ -f "$out/profiles/$gpu/$name-bs1.json" ] && continue
		timeout 120 "$root/bin/atoll" profile --model "$x" >>"$out/profile.log" 2>&1 || echo "profile $x failed (see profile.log)"
	done
done
bench() { # HP BE BE-BATCH DURATION TAG
	[ -f "$out/bench-$5.json" ] && return
	timeout -s QUIT 150 "$root/bin/atoll" bench --backend cuda --quiet --hp "$1" --be "$2" --be-batch "$3" --load 0.5 --duration "$4" \
		--out "$out/bench-$5.json" >"$out/bench-$5.log" 2>&1 || echo "bench $5 failed (see bench-$5.log)"
}
for m in resnet50:resnet50-train:32:10s mobilenetv2:resnet50-train:32:10s vgg19:resnet50-train:32:12s \
	bert-base:bert-base-train:8:13s distilbert:bert-base-train:8:10s; do
	IFS=: read -r hp be bb dur <<<"$m"
	bench "$onnx/$hp.onnx" "$be" "$bb" "$dur" "$hp-1"
	bench "$hp" "$be" "$bb" "$dur" "$hp-0"
done
rm -rf "$onnx"
cat "$out/onnx_gpu.txt"
