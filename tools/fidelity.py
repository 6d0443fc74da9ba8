#!/usr/bin/env python3
"""Simulator fidelity table: the simulator's reports beside the GPU's for the
same workload (same profiles, same arrival trace), as markdown.

usage: tools/fidelity.py PAIR:SIMDIR:GPUDIR ...
Each DIR holds the <policy>.json reports of `atoll demo --reports DIR`.
Errors are (sim - gpu) / gpu; |err| > 10 % is marked with '!'.
"""
import json, os, sys

def load(d):
    return {f[:-5]: json.load(open(os.path.join(d, f))) for f in sorted(os.listdir(d)) if f.endswith('.json')}

def err(s, g):
    if not g:
        return '–'
    e = (s - g) / g * 100
    return f"{e:+.0f}%{' !' if abs(e) > 10 else ''}"

def main(args):
    order = ['dedicated', 'timeslice', 'streams', 'priority', 'orion', 'reef', 'atoll']
    alone = ["| model | role | sim | GPU | err |", "|---|---|---:|---:|---:|"]
    rows = ["| pair | policy | HP p50 ms sim / GPU | err | HP p99 ms sim / GPU | err | BE work/s sim / GPU | err |",
            "|---|---|---:|---:|---:|---:|---:|---:|"]
    n = bad = 0
    for a in args:
        pair, sd, gd = a.split(':')
        s, g = load(sd), load(gd)
        d_s, d_g = s['dedicated'], g['dedicated']
        w = d_g['workload']
        hp = f"{w['hpModel']} bs{w['hpBatch']}"
        alone.append(f"| {hp} | HP alone, service p50 ms | {d_s['hpService']['p50Us']/1e3:.3f} | {d_g['hpService']['p50Us']/1e3:.3f} | {err(d_s['hpService']['p50Us'], d_g['hpService']['p50Us'])} |")
        be = f"{w['beModel']} bs{w['beBatch']}"
        alone.append(f"| {be} | BE alone, work/s | {d_s['beAloneWorkPerSec']:.3f} | {d_g['beAloneWorkPerSec']:.3f} | {err(d_s['beAloneWorkPerSec'], d_g['beAloneWorkPerSec'])} |")
        for p in order:
            if p not in s or p not in g:
                continue
            rs, rg = s[p], g[p]
            e50, e99 = err(rs['hp']['p50Us'], rg['hp']['p50Us']), err(rs['hp']['p99Us'], rg['hp']['p99Us'])
            ebe = err(rs['beWorkPerSec'], rg['beWorkPerSec']) if p != 'dedicated' else '–'
            for e in (e50, e99, ebe):
                if e != '–':
                    n += 1
                    bad += e.endswith('!')
            be_s = f"{rs['beWorkPerSec']:.3f} / {rg['beWorkPerSec']:.3f}" if p != 'dedicated' else '–'
            rows.append(f"| {pair}: {hp} + {be} | {p} | {rs['hp']['p50Us']/1e3:.3f} / {rg['hp']['p50Us']/1e3:.3f} | {e50} | "
                        f"{rs['hp']['p99Us']/1e3:.3f} / {rg['hp']['p99Us']/1e3:.3f} | {e99} | {be_s} | {ebe} |")
    print('\n'.join(alone))
    print()
    print('\n'.join(rows))
    print()
    print(f"{n - bad} of {n} co-located figures within 10 %.")

if __name__ == '__main__':
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
