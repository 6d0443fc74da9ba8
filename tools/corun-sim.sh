#!/usr/bin/env bash
# The simulator's prediction of committed GPU co-run reports (atoll corun
# --out): each report's own command re-run with --backend sim on the
# report's GPU, with the co-run interference given (measured, off, or
# DEVICE,SM[,MEMORY]), then one line per report — the GPU's mean HP
# slowdown, the simulator's, the error, and the same for BE's own slowdown
# where the report has it (--be-depth) — and the rms errors, then each
# report's HP slowdown by BE kernel duration (atoll corun --compare). This is
# how docs/simulator.md's co-run tables are made.
#
#   tools/corun-sim.sh measured results/corun-h200/s31-*.json.gz
#   tools/corun-sim.sh 0.2,1.0,6 results/corun-h200/s31-*-d16gp.json.gz
#
# ATOLL names the binary (bin/atoll); JOBS the runs at once (2); OUT keeps
# the simulated reports and their text (a temporary folder otherwise), and
# a report already simulated there is reused; SIMARGS are more flags for
# the simulator's runs (e.g. --sim-kernel-gap 1.2us).
set -euo pipefail
corun=${1:?usage: tools/corun-sim.sh measured|off|DEVICE,SM[,MEMORY] REPORT...}
shift
[ $# -gt 0 ] || { echo "tools/corun-sim.sh: no GPU report given" >&2; exit 2; }
atoll=${ATOLL:-bin/atoll}
[ -x "$atoll" ] || { echo "tools/corun-sim.sh: $atoll is missing: go build -o bin/atoll ./cmd/atoll" >&2; exit 2; }
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
# field FILE NAME: a report's first "NAME": value (string or number; empty if absent).
field() { zcat -f "$1" 2>/dev/null | sed -n "s/^ *\"$2\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" | head -1; }
# name REPORT: its name without .json or .json.gz.
name() { local n; n=$(basename "$1" .json.gz); echo "${n%.json}"; }
jobs=()
for f in "$@"; do
	cmd=$(zcat -f "$f" | sed -n 's/^ *"command": "atoll corun \(.*\)",$/\1/p')
	[ -n "$cmd" ] || { echo "tools/corun-sim.sh: $f: no atoll corun command recorded" >&2; exit 2; }
	# Drop what names the GPU run's backend, device, output and simulator.
	args=$(echo "$cmd" | sed -E 's/--(backend|out|gpu|sim-corun|device)[ =][^ ]*//g; s/--quiet//g')
	jobs+=("$(name "$f")|$(field "$f" gpu)|$f|$args")
done
printf '%s\n' "${jobs[@]}" | xargs -P "${JOBS:-2}" -I{} bash -c '
	IFS="|" read -r name gpu ref args <<<"{}"
	[ -s "$2/$name.json" ] && exit 0 # simulated before into this OUT
	# shellcheck disable=SC2086
	"$0" corun --backend sim --gpu "$gpu" --sim-corun "$1" $args $3 --quiet --compare "$ref" --out "$2/$name.json" >"$2/$name.txt" 2>&1 ||
		echo "$name: the simulator failed (see $2/$name.txt)" >&2
' "$atoll" "$corun" "$out" "${SIMARGS:-}"
pct() { awk -v g="$1" -v s="$2" 'BEGIN { printf "%.1f", 100 * (s - g) / g }'; }
printf '%-48s %7s %7s %7s   %7s %7s %7s\n' report 'HP GPU' sim error 'BE GPU' sim error
hsq=0 hn=0 bsq=0 bn=0
for f in "$@"; do
	n=$(name "$f")
	g=$(field "$f" meanHpSlowdown) s=$(field "$out/$n.json" meanHpSlowdown)
	bg=$(field "$f" meanBeSlowdown) bs=$(field "$out/$n.json" meanBeSlowdown)
	line=$(printf '%-48s' "$n")
	if [ -n "$g" ] && [ -n "$s" ]; then
		e=$(pct "$g" "$s")
		line+=$(printf ' %7.3f %7.3f %6s%%' "$g" "$s" "$e")
		hsq=$(awk -v a="$hsq" -v e="$e" 'BEGIN { print a + e * e }')
		hn=$((hn + 1))
	else
		line+=$(printf ' %7s %7s %7s' "${g:--}" "${s:--}" -)
	fi
	if [ -n "$bg" ] && [ -n "$bs" ]; then
		e=$(pct "$bg" "$bs")
		line+=$(printf '   %7.3f %7.3f %6s%%' "$bg" "$bs" "$e")
		bsq=$(awk -v a="$bsq" -v e="$e" 'BEGIN { print a + e * e }')
		bn=$((bn + 1))
	fi
	echo "$line"
done
[ "$hn" -gt 0 ] && awk -v a="$hsq" -v n="$hn" 'BEGIN { printf "rms error of HP slowdown over %d reports: %.1f %%\n", n, sqrt(a / n) }'
[ "$bn" -gt 0 ] && awk -v a="$bsq" -v n="$bn" 'BEGIN { printf "rms error of BE slowdown over %d reports: %.1f %%\n", n, sqrt(a / n) }'
echo "HP slowdown by the BE kernel's profiled time (share of the step; simulator, GPU):"
for f in "$@"; do
	n=$(name "$f")
	echo "  $n: $(sed -n 's/^by the BE kernel.s profiled time ([^)]*): //p' "$out/$n.txt" 2>/dev/null)"
done
exit 0
