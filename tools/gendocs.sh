#!/usr/bin/env bash
# Regenerates the generated blocks of README.md, docs/results.md and docs/fidelity.md
# from the committed matrix runs (TestResultsDocIsGenerated checks them).
set -euo pipefail
cd "$(dirname "$0")/.."
splice() { # doc, then the atoll command line whose output fills its block
	local doc=$1; shift
	local out; out=$(mktemp)
	bin/atoll "$@" > "$out"
	awk -v gen="$out" '
		/^<!-- generated: / { print; while ((getline line < gen) > 0) print line; skip = 1; next }
		/^<!-- end generated -->/ { skip = 0 }
		!skip { print }' "$doc" > "$doc.tmp"
	mv "$doc.tmp" "$doc"
	rm -f "$out"
}
splice README.md compare --pytorch results/matrix-h100-2
splice docs/results.md compare results/matrix-h100-2
splice docs/fidelity.md fidelity results/matrix-h100-2 results/matrix-sim
