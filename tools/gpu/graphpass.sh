#!/usr/bin/env bash
# A model's kernels timed kernel by kernel (durationUs) against inside a
# graph of the whole pass (graphUs, atoll profile --graph-passes), and what
# serving it alone takes, on one GPU minutes apart. Prints per model the
# two sums, the served request against its graph durations plus its events
# (2.3 µs each) and the graph's start (5.7 µs), and the kernels whose two
# timings differ most. Usage:
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
		--out "$out/$m.json" > "$out/$m-profile.txt" 2>&1 || echo "profile $m: failed" >&2
	bin/atoll bench --backend "$backend" "${gpu[@]}" --hp "$m" --be none --policy dedicated --load 0.5 --duration 3s --quiet \
		--out "$out/$m-alone.json" > "$out/$m-alone.txt" 2>&1 || echo "bench $m: failed" >&2
	python3 - "$out" "$m" <<'PY'
import json, sys
out, m = sys.argv[1], sys.argv[2]
try:
    ks = json.load(open(f"{out}/{m}.json"))["kernels"]
    r = json.load(open(f"{out}/{m}-alone.json"))
except (OSError, ValueError, KeyError) as e:
    print(f"{m}: missing output ({e})")
    sys.exit(0)
r = r[0] if isinstance(r, list) else r
ss, gs = sum(k["durationUs"] for k in ks), sum(k.get("graphUs", 0) for k in ks)
ev = r.get("hpGraphEvents", 0) or 0
served = r["hpService"]["p50Us"]
want = gs + 2.3 * ev + 5.7
print(f"{m}: {len(ks)} kernels, {ss:.1f} us kernel by kernel ({ss - 2.67 * len(ks):.1f} less the launch-and-record gaps), "
      f"{gs:.1f} us inside a graph; served alone at load 0.5: {served:.1f} us launch to end (p50, {ev} events), "
      f"{(served / want - 1) * 100:+.1f} % against {want:.1f} (graph durations + events + start); an isolated request {r['workload']['soloHpUs']:.1f} us")
d = sorted(((k.get("graphUs", 0) - (k["durationUs"] - 2.67), k["name"], k["durationUs"], k.get("graphUs", 0)) for k in ks), key=lambda x: x[0])
for diff, name, a, b in d[:5]:
    print(f"    {name:28s} {a:8.2f} -> {b:8.2f} us ({diff:+.2f} beyond the gap)")
PY
done
