#!/usr/bin/env python3
"""HP latency inside a window of a daemon run against the rest of it: how
much a moment of the run (BE jobs submitted 3 s in, by default) costs the
requests scheduled then. For run directories of tools/gpu/standby-drill.sh
(records.jsonl or records.jsonl.gz, from `atoll load --records`).

    python3 tools/gpu/window.py [--from S] [--to S] [--after S] RUN_DIR...

Per run: the requests scheduled in [from, to) — their count, how many
failed, the largest latency of those answered and how many of them took
over 10 ms — and the p99 and largest latency of the requests answered
that were scheduled from `after` on (the steady state).
"""
import argparse
import json
import os

from standby_summary import opened  # records.jsonl, or the .gz results/ keeps


def records(d):
    with opened(os.path.join(d, "records.jsonl")) as fh:
        return [json.loads(line) for line in fh]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--from", dest="lo", type=float, default=2.9, help="window start, seconds after the load began (default 2.9)")
    p.add_argument("--to", dest="hi", type=float, default=3.6, help="window end (default 3.6)")
    p.add_argument("--after", type=float, default=4.0, help="steady state from here (default 4.0)")
    p.add_argument("runs", nargs="+")
    a = p.parse_args()
    print("%-40s %6s %6s %8s %7s %10s %9s" % ("run", "window", "failed", "max ms", ">10 ms", "after p99", "after max"))
    for d in a.runs:
        rs = records(d)
        lat = lambda r: (r["doneNs"] - r["scheduledNs"]) / 1e6
        inw = [r for r in rs if a.lo * 1e9 <= r["scheduledNs"] < a.hi * 1e9]
        w = [lat(r) for r in inw if r.get("kind") == "ok"]
        rest = sorted(lat(r) for r in rs if r["scheduledNs"] >= a.after * 1e9 and r.get("kind") == "ok")
        if not w or not rest:
            print("%-40s no answered request in the window or after it" % d[-40:])
            continue
        print("%-40s %6d %6d %8.1f %7d %10.2f %9.1f" % (d.rstrip("/")[-40:], len(inw), len(inw) - len(w), max(w), sum(x > 10 for x in w), rest[int(len(rest) * 0.99)], rest[-1]))


if __name__ == "__main__":
    main()
