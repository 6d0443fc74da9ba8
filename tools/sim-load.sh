#!/usr/bin/env bash
# The simulator against the GPU for HP alone at load 0.9 (docs/fidelity.md,
# "How much of the GPU a cuBLASLt kernel takes"): each inference model for
# 30 s with one stream, with passes of up to 4 requests (--hp-max-batch 4)
# and with two streams (--hp-streams 2), on the built-in H100 profiles;
# then mean service time and p99, sim ÷ GPU, against the H100 runs
# committed in results/batching-h100 (one stream, batch ≤ 4) and
# results/parts-embed-h100/load (two streams).
#
#   tools/sim-load.sh OUT      # about a minute on 2 cores; resumable
set -euo pipefail
out=${1:?usage: tools/sim-load.sh OUT}
atoll=${ATOLL:-bin/atoll}
[ -x "$atoll" ] || { mkdir -p bin && CGO_CFLAGS=-Wno-deprecated-declarations go build -o bin/atoll ./cmd/atoll; }
mkdir -p "$out"
models=(vgg19 mobilenetv2 resnet50 resnet152 bert-base distilbert)
for m in "${models[@]}"; do
	for setup in s1 b4 s2; do
		f=$out/$m-$setup.json
		[ -f "$f" ] && continue
		case $setup in
		s1) extra=() ;;
		b4) extra=(--hp-max-batch 4) ;;
		s2) extra=(--hp-streams 2) ;;
		esac
		"$atoll" bench --be none --policy atoll --hp "$m" --load 0.9 --duration 30s --quiet "${extra[@]}" --out "$f" > /dev/null &
	done
	wait
done
python3 - "$out" "${models[@]}" <<'PY'
import json, sys
out, models = sys.argv[1], sys.argv[2:]
def load(f):
    r = json.load(open(f))
    return r["hpService"]["meanUs"], r["hp"]["p99Us"]
gpu = {"s1": "results/batching-h100/alone-%s-bs1-0.9.json", "b4": "results/batching-h100/alone-%s-bs1-0.9-batch-4.json",
       "s2": "results/parts-embed-h100/load/alone-%s-bs1-0.9-streams-2.json"}
print("| model | service, 1 stream | service, batch ≤ 4 | service, 2 streams | p99, 1 stream | p99, batch ≤ 4 | p99, 2 streams |")
print("|---|---|---|---|---|---|---|")
for m in models:
    svc, p99 = [], []
    for s in ("s1", "b4", "s2"):
        gs, gp = load(gpu[s] % m)
        ss, sp = load(f"{out}/{m}-{s}.json")
        svc.append(f"{ss / gs:.2f}")
        p99.append(f"{sp / gp:.2f}")
    print(f"| {m} | " + " | ".join(svc + p99) + " |")
print("\nsim ÷ GPU (NVIDIA H100 80GB HBM3); the simulator on the built-in H100-SXM profiles.")
PY
