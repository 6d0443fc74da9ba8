#!/usr/bin/env bash
# Profiles the zoo's CNNs on the GPU with `atoll profile` and leaves the
# profiles, logs and a summary under $OUT (default ./out-profile).
#
#   go build -o bin/atoll ./cmd/atoll
#   OUT=/tmp/p profiler/testdata/gpu_profile.sh bin/atoll
#
# Each model runs on its own: one failing never stops the others. A model
# refused for a layer the kernel library lacks is retried with --substitute
# (recorded in the profile's notes). Profiles land in
# $OUT/profiles/<gpu>/<model>-bs<N>.json (atoll's default path, relative to
# $OUT), ready to copy into the repository's profiles/. Where ncu is
# installed, resnet50 is also collected with Nsight Compute and imported.
set -u

ATOLL=${1:-bin/atoll}
OUT=${OUT:-./out-profile}
RUNS=${RUNS:-20}
MODELS=${MODELS:-"resnet50 resnet152 mobilenetv2 vgg19"}
BATCH=${BATCH:-1}
LIMIT=${LIMIT:-240} # seconds per model run; a hung model cannot eat the others' time

if [ ! -x "$ATOLL" ]; then
	echo "gpu_profile.sh: $ATOLL is not an executable (build it: go build -o bin/atoll ./cmd/atoll)" >&2
	exit 2
fi
ATOLL=$(cd "$(dirname "$ATOLL")" && pwd)/$(basename "$ATOLL")
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
cd "$OUT" || exit 2

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

{
	echo "== $(date -u +%FT%TZ) nvidia-smi before"
	nvidia-smi || echo "nvidia-smi failed"
	nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv || true
} 2>&1 | tee "$OUT/logs/nvidia-smi-before.txt"

declare -a ROWS
for m in $MODELS; do
	log="$OUT/logs/$m-bs$BATCH.log"
	sub=""
	t0=$(now)
	echo "== $m bs$BATCH"
	timeout "$LIMIT" "$ATOLL" profile --model "$m" --batch "$BATCH" --runs "$RUNS" --force >"$log" 2>&1
	rc=$?
	if [ $rc -ne 0 ] && grep -q "try --substitute" "$log"; then
		echo "   $m needs --substitute (see $log); retrying with it"
		mv "$log" "$log.nosubst"
		sub="--substitute"
		t0=$(now)
		timeout "$LIMIT" "$ATOLL" profile --model "$m" --batch "$BATCH" --runs "$RUNS" --force --substitute >"$log" 2>&1
		rc=$?
	fi
	t1=$(now)
	[ $rc -eq 124 ] && echo "   $m: killed after $LIMIT s" | tee -a "$log"
	tail -n 12 "$log"
	file=$(sed -n 's/^wrote \([^ ]*\) .*/\1/p' "$log" | head -n 1)
	total=$(sed -n 's/.*kernels, \([0-9.]*\) us of kernel time.*/\1/p' "$log" | head -n 1)
	kern=$(sed -n 's/.*bs[0-9]*: \([0-9]*\) kernels,.*/\1/p' "$log" | head -n 1)
	ROWS+=("$(printf '%-12s %-4s %-13s %8s %8s %10s  %s' "$m" "$rc" "${sub:--}" "$(secs "$t0" "$t1")" "${kern:--}" "${total:--}" "${file:-$(tail -n 1 "$log" | cut -c1-120)}")")
done

if command -v ncu >/dev/null 2>&1; then
	echo "== ncu: resnet50 bs$BATCH"
	cmd=$("$ATOLL" profile --model resnet50 --batch "$BATCH" --substitute --print-ncu-command)
	echo "$cmd"
	t0=$(now)
	timeout "$LIMIT" bash -c "$cmd" >"$OUT/logs/ncu-resnet50.log" 2>&1
	rc=$?
	if [ $rc -eq 0 ]; then
		timeout "$LIMIT" "$ATOLL" profile --model resnet50 --batch "$BATCH" --substitute --runs 3 --no-scaling \
			--ncu "resnet50-bs$BATCH.ncu.csv" --out "$OUT/ncu/resnet50-bs$BATCH.json" >>"$OUT/logs/ncu-resnet50.log" 2>&1
		rc=$?
	fi
	t1=$(now)
	tail -n 12 "$OUT/logs/ncu-resnet50.log"
	ROWS+=("$(printf '%-12s %-4s %-13s %8s %8s %10s  %s' "resnet50/ncu" "$rc" "--substitute" "$(secs "$t0" "$t1")" - - "ncu/resnet50-bs$BATCH.json")")
else
	echo "== ncu not installed: Nsight Compute import not exercised"
fi

{
	echo "== $(date -u +%FT%TZ) nvidia-smi after"
	nvidia-smi || echo "nvidia-smi failed"
} 2>&1 | tee "$OUT/logs/nvidia-smi-after.txt"

{
	echo
	echo "== atoll profile on the GPU (target: resnet50 bs1 under 60 s)"
	printf '%-12s %-4s %-13s %8s %8s %10s  %s\n' model rc substitute seconds kernels kernel-us file
	for r in "${ROWS[@]}"; do echo "$r"; done
} | tee "$OUT/summary.txt"
