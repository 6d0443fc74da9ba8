#!/usr/bin/env bash
# Profiles models at batch 1 with warm passes (atoll profile --warm-pass:
# each timed pass right after an untimed run of it, so kernels find L2 as
# the model's previous pass left it), SM-share scaling included, into
# OUT/profiles/<gpu>/; a model that takes longer than PER seconds is left.
# Usage: tools/gpu/profile_warm.sh OUT PER MODEL...   (bin/atoll built for the GPU)
set -uo pipefail
out=$1 per=$2; shift 2
mkdir -p "$out"
gpu=H200
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 && gpu=H100-SXM
mkdir -p "$out/profiles/$gpu"
for m in "$@"; do
	t0=$(date +%s)
	timeout -s KILL "$per" bin/atoll profile --backend cuda --model "$m" --batch 1 --substitute --force --warm-pass --quiet \
		--out "$out/profiles/$gpu/$m-bs1.json" > "$out/$m-bs1.txt" 2>&1 || echo "profile $m: exit $?" >&2
	[ -f "$out/profiles/$gpu/$m-bs1.json" ] && python3 - "$out/profiles/$gpu/$m-bs1.json" "$m" "$(( $(date +%s) - t0 ))" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:12s} {len(j['kernels']):4d} kernels, sum {sum(k['durationUs'] for k in j['kernels']):8.1f} us, {sys.argv[3]} s")
PY
done
