#!/usr/bin/env python3
"""One line per run of tools/gpu/standby-drill.sh OUT: HP answers and
latency, the longest gap between completions, the two BE jobs, the
failover counters and the GPU memory of the daemon's processes.

    python3 tools/gpu/standby_summary.py OUT
"""
import glob
import gzip
import json
import os
import re
import sys


def opened(path):
    """path, or path.gz as the results/ copies keep it."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        return gzip.open(path + ".gz", "rt")
    return open(path)


def metric(text, name):
    m = re.search(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def main(out):
    print("%-16s %6s %6s %8s %8s %9s %7s  %-34s %-34s %4s %6s %9s" % (
        "run", "ok", "errors", "p50 ms", "p99 ms", "gap ms", "gap@s",
        "resnet50-train", "bert-base-train (resume)", "fo", "resent", "GPU MiB"))
    for d in sorted(glob.glob(os.path.join(out, "run-*"))):
        name = os.path.basename(d)
        try:
            load = json.load(open(os.path.join(d, "load.json")))
        except (OSError, ValueError):
            print("%-16s no load report" % name)
            continue
        t = load["total"]
        errs = sum(t["errors"].values()) + t["dropped"]
        jobs = {}
        try:
            for j in json.load(open(os.path.join(d, "jobs.json")))["jobs"]:
                jobs[j["spec"]["model"]] = j
        except (OSError, ValueError, KeyError):
            pass

        def job(model):
            j = jobs.get(model)
            if not j:
                return "-"
            s = "%s %d it %.1f/s" % (j["state"], j["iterationsDone"], j["iterationsPerSec"])
            if j.get("resumed"):
                s += " r%d" % j["resumed"]
            return s

        m = open(os.path.join(d, "metrics.txt")).read() if os.path.exists(os.path.join(d, "metrics.txt")) else ""
        fo = metric(m, "atoll_standby_failovers_total")
        resent = metric(m, "atoll_standby_resent_requests_total")
        mem = 0
        try:
            for line in open(os.path.join(d, "smi.txt")):
                if line.startswith("---"):
                    break
                mem += int(line.split(",")[1].split()[0])
        except (OSError, ValueError, IndexError):
            pass
        print("%-16s %6d %6d %8.3f %8.3f %9.1f %7.2f  %-34s %-34s %4s %6s %9d" % (
            name, t["ok"], errs, t["latency"].get("p50Us", 0) / 1000, t["latency"].get("p99Us", 0) / 1000,
            t.get("maxCompletionGapUs", 0) / 1000, t.get("maxCompletionGapAtSec", 0),
            job("resnet50-train"), job("bert-base-train"),
            "-" if fo is None else "%d" % fo, "-" if resent is None else "%d" % resent, mem))
        for j in jobs.values():
            if j.get("error"):
                print("    %s: %s" % (j["spec"]["model"], j["error"][:300]))
        for kind, msg in (load.get("errorMessages") or {}).items():
            print("    %s: %s" % (kind, msg[:300]))
        if "drill" in name:
            timeline(d, t)


def timeline(d, total):
    """Completions and errors per 50 ms around the longest gap, and the
    supervisor's and workers' log lines there, in seconds of the load run."""
    try:
        t0 = float(open(os.path.join(d, "load-start.txt")).read())
        recs = [json.loads(l) for l in opened(os.path.join(d, "records.jsonl"))]
    except (OSError, ValueError):
        return
    at = total.get("maxCompletionGapAtSec", 0)
    lo, hi = at - total.get("maxCompletionGapUs", 0) / 1e6 - 0.3, at + 1.5
    bins = {}
    for r in recs:
        if not r.get("kind"):
            continue
        done = r["doneNs"] / 1e9
        if lo <= done < hi:
            k = int((done - lo) / 0.05)
            b = bins.setdefault(k, {})
            b[r["kind"]] = b.get(r["kind"], 0) + 1
    print("    timeline (s into the load: completions per 50 ms by kind):")
    for k in sorted(bins):
        print("      %7.2f  %s" % (lo + k * 0.05, " ".join("%s=%d" % kv for kv in sorted(bins[k].items()))))
    try:
        for line in opened(os.path.join(d, "serve.log")):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("level") in ("ERROR", "WARN") or "standby" in e.get("msg", ""):
                ts = e["time"]
                # RFC 3339 with nanoseconds, UTC
                import datetime
                sec = datetime.datetime.strptime(ts[:26].rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()
                rel = sec - t0
                if lo - 1 <= rel <= hi + 5:
                    who = "sup" if e["msg"].startswith("standby:") else "w%s" % e.get("worker", "?")
                    extra = "%.1f ms" % (e["gap"] / 1e6) if "gap" in e else str(e.get("why", e.get("err", "")))[:120]
                    print("      %7.3f  [%s] %s %s" % (rel, who, e["msg"][:110], extra))
    except OSError:
        pass


if __name__ == "__main__":
    main(sys.argv[1])
