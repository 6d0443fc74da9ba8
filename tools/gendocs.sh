#!/usr/bin/env bash
# Regenerates every generated block of README.md, docs/results.md and
# docs/fidelity.md from the committed runs under results/: a line
# "<!-- generated: atoll ARGS -->" is followed by what `bin/atoll ARGS`
# prints, up to "<!-- end generated -->" (TestResultsDocIsGenerated checks them).
set -euo pipefail
cd "$(dirname "$0")/.."
for doc in README.md docs/results.md docs/fidelity.md; do
	awk '
		/^<!-- generated: atoll .* -->$/ {
			print
			cmd = $0
			sub(/^<!-- generated: atoll /, "", cmd)
			sub(/ -->$/, "", cmd)
			cmd = "bin/atoll " cmd
			while ((cmd | getline line) > 0) print line
			if (close(cmd) != 0) { print "gendocs: " cmd " failed" > "/dev/stderr"; exit 1 }
			skip = 1
			next
		}
		/^<!-- end generated -->/ { skip = 0 }
		!skip { print }' "$doc" > "$doc.tmp"
	mv "$doc.tmp" "$doc"
done
