#!/usr/bin/env bash
# The simulator's speed (issue: 10 s of GPU time of the demo workload in
# under 5 s of wall time on one core at loads 0.3-0.9, under 20 s at load
# 2): BenchmarkDemoWorkload10s (bench/run_test.go) with GOMAXPROCS 1, each
# test binary pinned to a core of its own, the binaries' runs interleaved
# COUNT times; prints, per load and policy, the least and the greatest
# wall seconds each binary took per 10 s simulated.
#
#   tools/simspeed.sh OUT [TESTBIN...]
#     OUT      directory for the raw benchmark output (OUT/NAME-RUN.txt)
#     TESTBIN  test binaries of ./bench (go test -c -o X ./bench); none:
#              this tree's, built into OUT/bench.test
#
# COUNT (default 3) rounds; BENCH (default DemoWorkload10s) the benchmark
# pattern; CORES (default 2 3 4 5 ...) the cores to pin to, one per binary;
# PARALLEL=1 runs a round's binaries side by side on their cores (on a
# machine with idle cores to spare; the default runs them one by one). The
# runs need no GPU; binaries built here run on the GPU machine's host.
set -euo pipefail
out=${1:?usage: tools/simspeed.sh OUT [TESTBIN...]}
shift
mkdir -p "$out"
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
	go test -c -o "$out/bench.test" ./bench
	bins=("$out/bench.test")
fi
count=${COUNT:-3}
bench=${BENCH:-DemoWorkload10s}
read -r -a cores <<< "${CORES:-$(seq -s ' ' 2 $((1 + ${#bins[@]})))}"
root=$(pwd)
pin() { if command -v taskset > /dev/null; then taskset -c "$1" "${@:2}"; else "${@:2}"; fi; }
for r in $(seq "$count"); do
	for i in "${!bins[@]}"; do
		b=${bins[$i]}
		[[ $b == /* ]] || b=$root/$b
		name=$(basename "$b" .test)
		f=$out/$name-$r.txt
		[ -s "$f" ] && continue
		run() { (cd "$root/bench" && pin "${cores[$i]}" "$b" -test.run '^$' -test.bench "$bench" -test.benchtime 1x -test.cpu 1 > "$f.tmp" 2>&1 && mv "$f.tmp" "$f"); }
		if [ "${PARALLEL:-0}" = 1 ]; then run & else run; fi
		echo "simspeed: round $r, $name" >&2
	done
	wait
done
python3 - "$out" <<'PY'
import collections, glob, os, re, sys
out = sys.argv[1]
runs = collections.defaultdict(list)
names = []
for f in sorted(glob.glob(os.path.join(out, "*-*.txt"))):
    name = os.path.basename(f).rsplit("-", 1)[0]
    if name not in names:
        names.append(name)
    for line in open(f):
        m = re.match(r"BenchmarkDemoWorkload10s/(\S+?)(-\d+)?\s+\d+\s+(\d+) ns/op", line)
        if m:
            runs[(m.group(1), name)].append(int(m.group(3)) / 1e9)
cases = sorted({c for c, _ in runs}, key=lambda c: (float(c.split("/")[0][4:]), c))
print("| load / policy | " + " | ".join(f"{n}: s per 10 s simulated (least–greatest)" for n in names) + " |")
print("|---|" + "---|" * len(names))
for c in cases:
    cells = []
    for n in names:
        v = runs.get((c, n), [])
        cells.append(f"{min(v):.2f}–{max(v):.2f} ({len(v)})" if v else "")
    print(f"| {c} | " + " | ".join(cells) + " |")
PY
