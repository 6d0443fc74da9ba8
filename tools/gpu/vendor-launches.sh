#!/usr/bin/env bash
# The launches of one forward pass of each model as the GPU runs them,
# cuBLASLt's included (the driver does not report the geometry of a kernel
# a vendor library launches; Nsight Compute does): grid, block, registers,
# shared memory, the occupancy limits, each launch's time and its compute
# and memory throughput (% of peak), by ncu over
# `atoll profile --ncu-pass`. Writes OUT/MODEL-bsB.csv (ncu's CSV) and
# prints, per model, each distinct kernel's geometry and what its launches
# took.
#
#   tools/gpu/vendor-launches.sh OUT MODEL:BATCH...   (e.g. vgg19:1 resnet50:1)
#   tools/gpu/vendor-launches.sh --summary OUT        (the table again, from OUT's CSVs)
#
# The % metrics make ncu replay each kernel several times (about a minute a
# bs1 model, many for a training step): PCT=0 collects only the geometry
# and times.
#
# Needs bin/atoll (make gpu-build), ncu and python3.
set -euo pipefail
summary=0
if [ "${1:-}" = --summary ]; then summary=1; shift; fi
out=${1:?usage: tools/gpu/vendor-launches.sh [--summary] OUT [MODEL:BATCH...]}
shift
if [ $summary = 0 ]; then
	mkdir -p "$out"
	metrics=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__occupancy_limit_blocks,launch__occupancy_limit_warps,launch__waves_per_multiprocessor
	[ "${PCT:-1}" = 0 ] || metrics+=,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed
	for m in "$@"; do
		name=${m%:*}-bs${m#*:}
		ncu --csv --print-units base --metrics "$metrics" bin/atoll profile --model "${m%:*}" --batch "${m#*:}" --ncu-pass > "$out/$name.csv.tmp" 2> "$out/$name.err"
		mv "$out/$name.csv.tmp" "$out/$name.csv"
	done
fi
python3 - "$out" <<'PY'
import collections, csv, glob, gzip, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.csv*"))):
    op = gzip.open if path.endswith(".gz") else open
    launches = collections.OrderedDict()
    with op(path, "rt") as f:
        for r in csv.DictReader(l for l in f if not l.startswith("==")):
            launches.setdefault(r["ID"], {"name": r["Kernel Name"]})[r["Metric Name"]] = r["Metric Value"].replace(",", "")
    kinds = collections.OrderedDict()
    for l in launches.values():
        name = l["name"].split("(")[0].replace("void ", "")[:60]
        geo = (l["launch__block_size"], l["launch__registers_per_thread"], l["launch__shared_mem_per_block"],
               min(int(float(l[k])) for k in ("launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_blocks", "launch__occupancy_limit_warps")))
        k = kinds.setdefault((name, geo), {"n": 0, "grids": set(), "ns": 0.0})
        k["n"] += 1
        k["grids"].add(int(l["launch__grid_size"]))
        k["ns"] += float(l["gpu__time_duration.sum"])
    total = sum(k["ns"] for k in kinds.values())
    model = os.path.basename(path).split(".csv")[0]
    print(f"\n{model}: {len(launches)} launches, {total/1e3:.0f} µs under ncu (serialised, base clocks)\n")
    print("| kernel | launches | grid | threads | registers | shared memory B | blocks per SM | share of the time |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, (threads, regs, smem, per_sm)), k in sorted(kinds.items(), key=lambda kv: -kv[1]["ns"]):
        g = sorted(k["grids"])
        grid = str(g[0]) if len(g) == 1 else f"{g[0]}–{g[-1]}"
        print(f"| {name} | {k['n']} | {grid} | {threads} | {regs} | {smem} | {per_sm} | {100*k['ns']/total:.0f} % |")
PY
