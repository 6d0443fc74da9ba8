#!/usr/bin/env bash
# One model served alone (atoll bench --policy dedicated) at several loads:
# does a request take longer served than its kernels alone as the load
# grows, and where does the difference go (the report's causes)? Prints per
# load the request's service time (launch to end) and latency, p50, the
# kernels' solo sum, and the mean host and variance delay per request.
#   tools/gpu/alone-load.sh OUT MODEL [LOAD...]     (default loads 0.1 0.4 0.8)
# BACKEND=sim runs the same on the simulator (--gpu H200).
set -uo pipefail
out=$1 m=$2; shift 2
loads=("$@")
[ ${#loads[@]} -gt 0 ] || loads=(0.1 0.4 0.8)
backend=${BACKEND:-cuda}
gpu=()
[ "$backend" = sim ] && gpu=(--gpu H200)
mkdir -p "$out"
for l in "${loads[@]}"; do
	bin/atoll bench --backend "$backend" "${gpu[@]}" --hp "$m" --be none --policy dedicated --load "$l" --duration 4s --quiet \
		--out "$out/$m-$l.json" > "$out/$m-$l.txt" 2>&1 || echo "bench $m at $l: failed" >&2
done
python3 - "$out" "$m" "${loads[@]}" <<'PY'
import json, sys
out, m, loads = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"{m} alone | load | service p50 us | latency p50 us | kernels solo us | host us/request | variance us/request | hp-queue us/request")
for l in loads:
    try:
        r = json.load(open(f"{out}/{m}-{l}.json"))
    except (OSError, ValueError) as e:
        print(f"  {l}: missing ({e})")
        continue
    r = r[0] if isinstance(r, list) else r
    c = {x["cause"]: x["meanUs"] for x in r.get("causes", [])}
    print(f"  {l} | {r['hpService']['p50Us']:.1f} | {r['hp']['p50Us']:.1f} | {r.get('soloKernelsUs', 0):.1f} | "
          f"{c.get('host', 0):.1f} | {c.get('variance', 0):.1f} | {c.get('hp-queue', 0):.1f}")
PY
