#!/usr/bin/env bash
# atoll's kernels against PyTorch's on this GPU, one model at a time
# (issue 12's table): for every zoo model, `atoll profile` (the sum of the
# measured kernel durations: atoll's time on the GPU for one forward pass
# or training step), then tools/gpu/speed.py (PyTorch, bf16, channels-last,
# the whole pass in one CUDA graph), then the table. Resumable: a model
# whose profile exists is not profiled again.
#
#   tools/gpu/speed.sh OUT [MODEL:BATCH ...]
#   SPEED_LOAD=1 tools/gpu/speed.sh OUT     # also each model alone at load 0.9
#   SPEED_PROFILE=0 SPEED_LOAD=1 SPEED_GRAPHS="true false" tools/gpu/speed.sh OUT resnet50:1 bert-base:1
#       # no profiling (the built-in profiles/<gpu>/), the load runs with HP graphs on and off
#   SPEED_PROFILE=0 SPEED_TORCH=0 SPEED_LOAD=1 SPEED_STREAMS="1 2" tools/gpu/speed.sh OUT
#       # the load runs with HP served one request at a time and two at once (--hp-streams)
#   SPEED_PROFILE=0 SPEED_TORCH=0 SPEED_LOAD=1 SPEED_BATCH="1 8" tools/gpu/speed.sh OUT
#       # the load runs with one request per pass and with the requests waiting served
#       # together in passes of up to 8 (--hp-max-batch; the inference models' profiles
#       # at batches 2, 4, 8 are measured first into OUT/profiles, resumable)
#   ATOLL_CUBLASLT=off SPEED_PROFILE_ARGS=--no-scaling tools/gpu/speed.sh OUT ...
#       # atoll's own kernels only (no cuBLASLt); extra `atoll profile` flags
#
#   ATOLL=bin/old/atoll SPEED_TORCH=0 tools/gpu/speed.sh OUT ...   # another build
#
# Writes OUT/profiles/<gpu>/<model>-bs<N>.json, OUT/profile.log,
# OUT/torch-speed.json and OUT/speed.md (SPEED_TORCH=0: the profiles only;
# they are the zoo's built-in profiles for that GPU, profiles/<gpu>/). Needs bin/atoll (make gpu-build)
# and python3 with torch, torchvision and transformers.
set -uo pipefail
atoll=${ATOLL:-bin/atoll} # ATOLL=path: another build (an A/B of two builds into two OUTs)
out=${1:?usage: tools/gpu/speed.sh OUT [MODEL:BATCH ...]}
shift
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(resnet50:1 resnet152:1 vgg19:1 mobilenetv2:1 bert-base:1 distilbert:1 resnet50-train:32 bert-base-train:8)
case $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) in
*H200*) gpu=H200 ;;
*) gpu=H100-SXM ;;
esac
mkdir -p "$out/profiles/$gpu"
for mb in "${models[@]}"; do
	[ "${SPEED_PROFILE:-1}" = 0 ] && break # the built-in profiles
	m=${mb%:*} b=${mb#*:}
	f=$out/profiles/$gpu/$m-bs$b.json
	[ -f "$f" ] && continue
	echo "== $(date +%T) $m bs$b" >> "$out/profile.log"
	timeout "${SPEED_PROFILE_TIMEOUT:-170}" "$atoll" profile --model "$m" --batch "$b" --substitute --force ${SPEED_PROFILE_ARGS:-} --out "$f" >> "$out/profile.log" 2>&1
	echo "rc=$?" >> "$out/profile.log"
done
# The pass sizes --hp-max-batch N uses (the powers of two below N, and N),
# times the request's batch, profiled for every inference model.
sizes() { local n=$1 s=2; while [ "$s" -lt "$n" ]; do echo $s; s=$((s * 2)); done; [ "$n" -gt 1 ] && echo "$n"; }
batched=0
for nb in ${SPEED_BATCH:-1}; do
	for mb in "${models[@]}"; do
		m=${mb%:*} b=${mb#*:}
		case $m in *-train) continue ;; esac
		for s in $(sizes "$nb"); do
			batched=1
			f=$out/profiles/$gpu/$m-bs$((s * b)).json
			[ -f "$f" ] && continue
			echo "== $(date +%T) $m bs$((s * b)) (batched pass)" >> "$out/profile.log"
			timeout "${SPEED_PROFILE_TIMEOUT:-170}" "$atoll" profile --model "$m" --batch $((s * b)) --substitute --force ${SPEED_PROFILE_ARGS:-} --out "$f" >> "$out/profile.log" 2>&1
			echo "rc=$?" >> "$out/profile.log"
		done
	done
done
# SPEED_LOAD=1: each inference model alone at load 0.9 for 30 s through the
# scheduler, on the profiles just made (SPEED_PROFILE=0: the built-in ones;
# issue 12's sustained-rate check: p99 within 15x the solo latency), once
# per value of --hp-graphs in SPEED_GRAPHS (default true). Resumable like
# the profiles.
if [ "${SPEED_LOAD:-0}" = 1 ]; then
	profs=()
	# The store OUT/profiles comes first, the built-in profiles where it has none.
	[ "${SPEED_PROFILE:-1}" = 0 ] && [ $batched = 0 ] || profs=(env "ATOLL_PROFILES=$out/profiles")
	for mb in "${models[@]}"; do
		m=${mb%:*} b=${mb#*:}
		case $m in *-train) continue ;; esac
		for g in ${SPEED_GRAPHS:-true}; do
			for st in ${SPEED_STREAMS:-1}; do
				for nb in ${SPEED_BATCH:-1}; do
					f=$out/alone-$m-bs$b-0.9
					[ "$g" = true ] || f=$f-graphs-$g
					[ "$st" = 1 ] || f=$f-streams-$st
					[ "$nb" = 1 ] || f=$f-batch-$nb
					f=$f.json
					[ -f "$f" ] && continue
					"${profs[@]}" timeout 150 "$atoll" bench --backend cuda --be none --policy atoll --hp-graphs="$g" --hp-streams "$st" --hp-max-batch "$nb" --ci \
						--hp "$m" --hp-batch "$b" --load 0.9 --duration 30s --quiet --out "$f" >> "$out/alone.log" 2>&1
					echo "$m bs$b graphs=$g streams=$st max-batch=$nb rc=$?" >> "$out/alone.log"
				done
			done
		done
	done
fi
[ "${SPEED_TORCH:-1}" = 0 ] && [ "${SPEED_LOAD:-0}" != 1 ] && exit 0 # profiles only (the zoo's profiles for a GPU)
[ "${SPEED_TORCH:-1}" = 0 ] || [ -f "$out/torch-speed.json" ] || PYTHONUNBUFFERED=1 python3 tools/gpu/speed.py "$out/torch-speed.json" "${models[@]}" 2>> "$out/torch-speed.log"
profdir=$out/profiles
[ "${SPEED_PROFILE:-1}" = 0 ] && profdir=profiles # the built-in profiles
python3 - "$out" "$gpu" "$profdir" "${models[@]}" <<'PY' | tee "$out/speed.md"
import json, os, sys
out, gpu, profdir, models = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
tf = os.path.join(out, "torch-speed.json")
torch = json.load(open(tf)) if os.path.exists(tf) else {"models": {}, "device": "(PyTorch not run: SPEED_TORCH=0)", "torch": "–"}
print(f"| model | atoll (sum of kernels) | PyTorch, CUDA graph (median, p10–p90) | atoll / PyTorch |")
print(f"|---|---|---|---|")
for mb in models:
    m, _, b = mb.partition(":")
    f = os.path.join(profdir, gpu, f"{m}-bs{b}.json")
    t = torch["models"].get(mb)
    a = sum(k["durationUs"] for k in json.load(open(f))["kernels"]) if os.path.exists(f) else None
    cell_a = f"{a/1000:.2f} ms" if a else "–"
    cell_t = f"{t['medianUs']/1000:.2f} ms ({t['p10Us']/1000:.2f}–{t['p90Us']/1000:.2f})" if t else "–"
    ratio = f"{a/t['medianUs']:.2f}×" if a and t else "–"
    print(f"| {m} bs{b} | {cell_a} | {cell_t} | {ratio} |")
print(f"\n{torch['device']}, PyTorch {torch['torch']}.")
sys.path.insert(0, os.path.join(os.getcwd(), "tools", "gpu"))
try:
    from speed import op_class
except Exception:  # noqa: BLE001 - no torch here: no per-class table
    op_class = None
if op_class:
    print("\n| model | op class | atoll ms | PyTorch ms (eager kernels) |")
    print("|---|---|---|---|")
    for mb in models:
        m, _, b = mb.partition(":")
        f = os.path.join(profdir, gpu, f"{m}-bs{b}.json")
        t = (torch["models"].get(mb) or {}).get("classesUs", {})
        if not os.path.exists(f):
            continue
        mine = {}
        for k in json.load(open(f))["kernels"]:
            c = op_class(k["kernel"])
            mine[c] = mine.get(c, 0.0) + k["durationUs"]
        for c in sorted(set(mine) | set(t), key=lambda c: -mine.get(c, 0)):
            a = f"{mine[c]/1000:.2f}" if c in mine else "–"
            p = f"{t[c]/1000:.2f}" if c in t else "–"
            print(f"| {m} bs{b} | {c} | {a} | {p} |")
import glob
alone = []
for mb in models:
    alone += [(mb, f) for f in sorted(glob.glob(os.path.join(out, "alone-%s-bs%s-0.9*.json" % tuple(mb.split(":")))))]
def fifo_p99(rho, n=1_000_000, seed=1):
    """p99 sojourn, in service times, of one FIFO server with a constant
    service time at utilisation rho under Poisson arrivals (M/D/1, Lindley's
    recursion): what no one-request-at-a-time server can beat."""
    import random
    rng, w, so = random.Random(seed), 0.0, []
    for _ in range(n):
        so.append(w + 1)
        w = max(0.0, w + 1 - rng.expovariate(rho))
    so.sort()
    return so[int(n * 0.99)]
if alone:
    print("\n| model alone at load 0.9, 30 s | HP graphs | HP streams | max batch | requests per pass (mean) | rate /s | solo ms | service ms (mean) | utilisation | p50 ms | p99 ms (95% CI) | p99 / solo | M/D/1 p99 / solo at that utilisation | host µs per request |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for mb, f in alone:
        r = json.load(open(f))
        solo, hp = r["workload"]["soloHpUs"], r["hp"]
        rate, svc = r["workload"]["ratePerSec"], r["hpService"]["meanUs"]
        streams = r["workload"].get("hpStreams", 1)
        sizes = [1] + [int(x) for x in r["workload"].get("hpBatches", "").split(",") if x]
        by = {int(k): v for k, v in (r.get("hpRequestsByBatch") or {"1": 1}).items()}
        per_pass = sum(by.values()) / sum(v / k for k, v in by.items())
        passes_per_s = rate / per_pass
        rho = passes_per_s * svc / 1e6 / streams  # per stream: passes × their service
        ideal = "–" if streams > 1 or len(sizes) > 1 else (f"{fifo_p99(rho) * svc / solo:.1f}×" if rho < 1 else "unbounded")
        graphs = r.get("hpGraphs", "off")
        c = r.get("p99CiUs")
        ci = f" [{c['lo']/1000:.2f}, {c['hi']/1000:.2f}]" if c else ""
        per_req = r["hostUsPerLaunch"] * r["launches"] / max(r["hpCompleted"], 1) if r.get("hpCompleted") else float("nan")
        print(f"| {mb} | {graphs} | {streams} | {max(sizes)} | {per_pass:.2f} | {rate:.0f} | {solo/1000:.2f} | {svc/1000:.2f} | {rho:.2f} | {hp['p50Us']/1000:.2f} | {hp['p99Us']/1000:.2f}{ci} | {hp['p99Us']/solo:.1f}× | {ideal} | {per_req:.0f} |")
    print("\nM/D/1: one FIFO server whose every request takes the run's mean service time, at the run's arrival rate (Poisson); "
          "at utilisation 0.9 its p99 is 22× the service time, so a p99 within 15× solo at load 0.9 needs requests served faster than solo (overlap) or in batches. "
          "With batching (max batch > 1) the utilisation is of passes (passes per second × their mean service) and the M/D/1 floor does not apply. "
          "With several HP streams the utilisation is per stream (rate × mean service ÷ streams; a request's service then includes the time it shares the GPU with the others) and the M/D/1 floor does not apply.")
PY
