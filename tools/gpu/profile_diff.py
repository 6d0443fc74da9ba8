#!/usr/bin/env python3
"""Two profiles of one model side by side, by kernel class: the sum of the
measured kernel durations per class (conv forward, data gradient, weight
gradient, GEMM, attention, norms, other) and the ten kernels that moved most.

    python3 tools/gpu/profile_diff.py BEFORE.json AFTER.json    (or .json.gz)
"""
import gzip
import json
import sys
from collections import defaultdict


def kind(name):
    for key, cls in (("wgrad", "conv wgrad"), ("dgrad", "conv dgrad"), ("conv", "conv fwd"),
                     ("attn", "attention"), ("gemm", "gemm"), ("norm", "norms"), ("bn_", "norms")):
        if key in name:
            return cls
    return "other"


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)["kernels"]


def main(before, after):
    a, b = load(before), load(after)
    if [k["name"] for k in a] != [k["name"] for k in b]:
        sys.exit("profile_diff: the two profiles list different kernels (not the same model and batch?)")
    sa, sb = defaultdict(float), defaultdict(float)
    for x, y in zip(a, b):
        sa[kind(x["kernel"])] += x["durationUs"]
        sb[kind(y["kernel"])] += y["durationUs"]
    print("| class | before ms | after ms | after / before |")
    print("|---|---|---|---|")
    for cls in sorted(sa, key=lambda c: -sa[c]):
        print(f"| {cls} | {sa[cls]/1000:.2f} | {sb[cls]/1000:.2f} | {sb[cls]/max(sa[cls], 1e-9):.2f} |")
    ta, tb = sum(sa.values()), sum(sb.values())
    print(f"| total | {ta/1000:.2f} | {tb/1000:.2f} | {tb/ta:.2f} |")
    moved = sorted(zip(a, b), key=lambda p: -abs(p[1]["durationUs"] - p[0]["durationUs"]))[:10]
    print("\n| kernel | shape | before µs | after µs |")
    print("|---|---|---|---|")
    for x, y in moved:
        print(f"| {x['name']} | {x.get('shape', '')} | {x['durationUs']:.1f} | {y['durationUs']:.1f} |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
