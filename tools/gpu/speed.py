#!/usr/bin/env python3
"""PyTorch's time for each zoo model, as a careful user runs it.

Usage: speed.py OUT.json [MODEL:BATCH ...]

What a careful PyTorch user runs (the same builders as torch_cell.py): bf16
weights and channels-last for inference, bf16 autocast for training, and the
whole forward pass or training step captured in one CUDA graph. Each model:
warm-up, then REPS graph replays timed one by one with CUDA events; the
median and the p10/p90 in microseconds go to OUT.json as
{"device": ..., "torch": ..., "models": {"resnet50:1": {...}}}, with the
kernel time per op class (GEMM, conv fwd/dgrad/wgrad, attention, norms,
other) from a profiled eager pass (classesUs; kernel names classified by
op_class, which speed.sh applies to atoll's profiles too).
Random weights (torchvision / transformers configs).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_cell import be_step_fn, capture, hp_model, pct  # noqa: E402

REPS = 200
DEFAULT = ["resnet50:1", "resnet152:1", "vgg19:1", "mobilenetv2:1", "bert-base:1", "distilbert:1",
           "resnet50-train:32", "bert-base-train:8"]


def build(name, batch):
    if name.endswith("-train"):
        step, _, _ = be_step_fn(name, batch)
        return step
    if batch != 1:
        raise SystemExit(f"speed.py: inference at batch {batch} is not built here (batch 1 only)")
    return hp_model(name)


def time_one(fn):
    stream = torch.cuda.Stream()
    g = capture(fn, stream)
    run = (lambda: g.replay()) if g is not None else fn
    with torch.cuda.stream(stream):
        for _ in range(20):
            run()
    stream.synchronize()
    times = []
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        for _ in range(REPS):
            a.record(stream)
            run()
            b.record(stream)
            b.synchronize()
            times.append(a.elapsed_time(b) * 1000.0)
    return {"medianUs": pct(times, 0.5), "p10Us": pct(times, 0.1), "p90Us": pct(times, 0.9),
            "reps": REPS, "graph": g is not None}


def op_class(name):
    """The op class of a kernel name, atoll's or cuDNN/cuBLAS/PyTorch's."""
    n = name.lower()
    for key, cls in (("wgrad", "conv wgrad"), ("dgrad", "conv dgrad"), ("fprop", "conv fwd"), ("conv", "conv fwd"),
                     ("depthwise", "conv fwd"), ("fmha", "attention"), ("flash", "attention"), ("attention", "attention"),
                     ("sgemm_", "attention"), ("softmax", "attention"), ("layer_norm", "norms"), ("layernorm", "norms"),
                     ("batch_norm", "norms"), ("bn_", "norms"), ("gemm", "GEMM"), ("nvjet", "GEMM"), ("cutlass", "GEMM")):
        if key in n:
            return cls
    return "other"


def classes(fn, reps=5):
    """PyTorch's kernel time per op class for one pass of fn (eager, so the
    profiler sees every kernel), in microseconds; {} if profiling fails."""
    try:
        from torch.profiler import ProfilerActivity, profile
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
        out = {}
        for e in prof.key_averages():
            us = getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0)
            if us > 0:
                c = op_class(e.key)
                out[c] = out.get(c, 0.0) + us / reps
        return out
    except Exception as e:  # noqa: BLE001 - the per-class table is optional
        print(f"  per-class profile failed ({type(e).__name__}: {e})", file=sys.stderr)
        return {}


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    out = sys.argv[1]
    todo = sys.argv[2:] or DEFAULT
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "models": {}}
    for mb in todo:
        name, _, batch = mb.partition(":")
        fn = build(name, int(batch or 1))
        r = time_one(fn)
        r["classesUs"] = classes(fn)
        res["models"][mb] = r
        print(f"{mb:22s} {r['medianUs']:9.1f} us  (p10 {r['p10Us']:.1f}, p90 {r['p90Us']:.1f}, graph {r['graph']})",
              file=sys.stderr)
        del fn
        torch.cuda.empty_cache()
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
