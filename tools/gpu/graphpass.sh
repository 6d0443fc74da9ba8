#!/usr/bin/env bash
# A model's profile timed as the profiler times it (kernel by kernel behind
# a GEMM) against the same passes timed inside a graph (atoll profile
# --graph-passes), and what serving it alone takes, on one GPU minutes
# apart: which kernels run faster inside a request's graph than profiled.
# Prints per model the two sums, the served request, and the kernels whose
# two timings differ most. Usage:
#   tools/gpu/graphpass.sh OUT MODEL...     (bin/atoll built for the GPU)
# BACKEND=sim runs the same on the simulator (a smoke test of the script).
set -uo pipefail
out=$1; shift
backend=${BACKEND:-cuda}
gpu=()
[ "$backend" = sim ] && gpu=(--gpu H200)
mkdir -p "$out"
for m in "$@"; do
	bin/atoll profile --backend "$backend" "${gpu[@]}" --model "$m" --no-scaling --force --quiet \
		--out "$out/$m-stream.json" > "$out/$m-stream.txt" 2>&1 || echo "profile $m: failed" >&2
	bin/atoll profile --backend "$backend" "${gpu[@]}" --model "$m" --no-scaling --force --quiet --graph-passes \
		--out "$out/$m-graph.json" > "$out/$m-graph.txt" 2>&1 || echo "profile $m --graph-passes: failed" >&2
	bin/atoll bench --backend "$backend" "${gpu[@]}" --hp "$m" --be none --policy dedicated --load 0.5 --duration 3s --quiet \
		--out "$out/$m-alone.json" > "$out/$m-alone.txt" 2>&1 || echo "bench $m: failed" >&2
	python3 - "$out" "$m" <<'PY'
import json, sys
out, m = sys.argv[1], sys.argv[2]
try:
    s = json.load(open(f"{out}/{m}-stream.json"))["kernels"]
    g = json.load(open(f"{out}/{m}-graph.json"))["kernels"]
    r = json.load(open(f"{out}/{m}-alone.json"))
except (OSError, ValueError, KeyError) as e:
    print(f"{m}: missing output ({e})")
    sys.exit(0)
r = r[0] if isinstance(r, list) else r
ss, gs = sum(k["durationUs"] for k in s), sum(k["durationUs"] for k in g)
print(f"{m}: {len(s)} kernels, profiled {ss:.1f} us kernel by kernel, {gs:.1f} us in a graph ({(gs / ss - 1) * 100:+.1f} %); "
      f"served alone at load 0.5: {r['hpService']['p50Us']:.1f} us launch to end (p50, {r.get('hpGraphEvents', '?')} events), "
      f"an isolated request {r['workload']['soloHpUs']:.1f} us")
d = sorted(((b["durationUs"] - a["durationUs"], a["name"], a["durationUs"], b["durationUs"]) for a, b in zip(s, g)), key=lambda x: x[0])
for diff, name, a, b in d[:5]:
    print(f"    {name:28s} {a:8.2f} -> {b:8.2f} us ({diff:+.2f})")
PY
done
