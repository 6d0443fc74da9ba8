#!/usr/bin/env python3
"""Run a matrix cell's workload in PyTorch on the cell's own arrivals.

Usage: torch_cell.py CELL_DIR [--setups green,alone,priority]

CELL_DIR is a cell directory written by `atoll matrix` (cell.json with a
"torch" entry, arrivals.txt). For each setup this replays the same HP
arrival sequence (the same request rate atoll was offered) through the same
model in PyTorch, with the cell's BE training job beside it, and writes
CELL_DIR/torch-<setup>.json (bench.TorchResult):

  alone     HP alone, then the BE job alone (its steps/s)
  priority  HP on the highest-priority stream, BE on the lowest
  green     BE confined to a green context of torch.greenSms SMs, HP in the
            primary context on the highest-priority stream

What a careful PyTorch user runs: bf16 weights for inference, bf16 autocast
for training, channels-last for CNNs, and CUDA graphs (the HP forward, the
whole training step) where capture works; each result says what was used.
Random weights (torchvision / transformers configs). HP latency = the
completion event of the request's graph replay - its scheduled arrival, on
the GPU clock, aligned to the host clock at the run's start.
"""
import argparse, base64, gzip, json, math, os, sys, threading, time, zlib

import torch

ROOT = os.path.dirname(os.path.abspath(__file__))


def encode_samples(us):
    """bench.EncodeSeries: 0.1 us units in arrival order, zigzag varint deltas, raw deflate, base64, "o:" prefix."""
    vals = [max(0, int(round(u * 10))) for u in us]
    raw = bytearray()
    prev = 0
    for v in vals:
        d = v - prev
        prev = v
        d = (d << 1) if d >= 0 else ((-d << 1) - 1)  # zigzag, as Go's binary.AppendVarint
        while True:
            b = d & 0x7F
            d >>= 7
            if d:
                raw.append(b | 0x80)
            else:
                raw.append(b)
                break
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return "o:" + base64.b64encode(c.compress(bytes(raw)) + c.flush()).decode()


def pct(xs, p):
    s = sorted(xs)
    pos = p * (len(s) - 1)
    i = int(pos)
    if i >= len(s) - 1:
        return s[-1]
    return s[i] + (pos - i) * (s[i + 1] - s[i])


def hp_model(name):
    if name in ("resnet50", "mobilenetv2", "vgg19", "resnet152"):
        import torchvision
        ctor = {"resnet50": torchvision.models.resnet50, "mobilenetv2": torchvision.models.mobilenet_v2,
                "vgg19": torchvision.models.vgg19, "resnet152": torchvision.models.resnet152}[name]
        m = ctor(weights=None).cuda().eval().to(torch.bfloat16).to(memory_format=torch.channels_last)
        x = torch.randn(1, 3, 224, 224, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        return lambda: m(x)
    if name in ("bert-base", "distilbert"):
        from transformers import BertConfig, BertModel
        cfg = BertConfig(num_hidden_layers=12 if name == "bert-base" else 6)
        m = BertModel(cfg).cuda().eval().to(torch.bfloat16)
        ids = torch.randint(0, cfg.vocab_size, (1, 128), device="cuda")
        return lambda: m(input_ids=ids).pooler_output
    raise SystemExit(f"torch_cell.py: no PyTorch model for HP {name!r}")


def be_step_fn(name, batch):
    if name == "resnet50-train":
        import torchvision
        m = torchvision.models.resnet50(weights=None).cuda().train().to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(m.parameters(), lr=1e-3)
        x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (batch,), device="cuda")

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
                loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
        return step, m, opt
    if name == "bert-base-train":
        from transformers import BertConfig, BertForSequenceClassification
        cfg = BertConfig()
        m = BertForSequenceClassification(cfg).cuda().train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-5, capturable=True)
        ids = torch.randint(0, cfg.vocab_size, (batch, 128), device="cuda")
        y = torch.randint(0, 2, (batch,), device="cuda")

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
                loss = torch.nn.functional.cross_entropy(m(input_ids=ids).logits, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
        return step, m, opt
    raise SystemExit(f"torch_cell.py: no PyTorch training job for BE {name!r}")


def capture(fn, stream, warm=3):
    """A CUDA graph of fn captured on stream (after warm-up there), or None."""
    try:
        with torch.cuda.stream(stream):
            for _ in range(warm):
                fn()
        stream.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            fn()
        torch.cuda.synchronize()
        return g
    except Exception as e:  # noqa: BLE001 - report and fall back to eager
        print(f"  graph capture failed ({type(e).__name__}: {e}); eager", file=sys.stderr)
        torch.cuda.synchronize()
        return None

# smid: each block spins 20 us, then stores the SM it ran on (PTX, loaded
# with the driver API so the check needs no compiler).
SMID_PTX = b"""
.version 7.8
.target sm_90
.address_size 64
.visible .entry smid(.param .u64 out) {
  .reg .pred %p;
  .reg .u32 %r<3>;
  .reg .u64 %rd<7>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u64 %rd4, %globaltimer;
SPIN:
  mov.u64 %rd5, %globaltimer;
  sub.u64 %rd6, %rd5, %rd4;
  setp.lt.u64 %p, %rd6, 20000;
  @%p bra SPIN;
  mov.u32 %r1, %smid;
  mov.u32 %r2, %ctaid.x;
  mul.wide.u32 %rd2, %r2, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r1;
  ret;
}
"""


def sms_seen(cuda, stream):
    """Distinct SMs a 4-blocks-per-SM kernel uses on stream: launched
    directly, and captured in a CUDA graph then replayed on it."""
    import ctypes
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    if cuda.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(SMID_PTX + b"\0")) != 0:
        raise RuntimeError("cuModuleLoadData of the smid check failed")
    if cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"smid") != 0:
        raise RuntimeError("cuModuleGetFunction(smid) failed")
    n = 4 * torch.cuda.get_device_properties(0).multi_processor_count
    out = torch.zeros(n, dtype=torch.int32, device="cuda")

    def launch():
        arg = ctypes.c_uint64(out.data_ptr())
        params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(arg), ctypes.c_void_p))
        rc = cuda.cuLaunchKernel(fn, n, 1, 1, 1024, 1, 1, 0, ctypes.c_void_p(stream.cuda_stream), params, None)
        if rc != 0:
            raise RuntimeError(f"cuLaunchKernel(smid): CUresult {rc}")

    seen = {}
    launch()
    stream.synchronize()
    seen["direct"] = len(set(out.tolist()))
    out.zero_()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        launch()
    g.replay()
    stream.synchronize()
    seen["graph"] = len(set(out.tolist()))
    return seen


class BE:
    """The BE training job in a thread: steps back to back on its stream."""

    def __init__(self, name, batch, prio, green_sms=0):
        self.name, self.batch, self.prio, self.green_sms = name, batch, prio, green_sms
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.times = []
        self.graphs = False
        self.err = None
        self.sms_seen = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        self.ready.wait()
        if self.err:
            raise SystemExit(f"torch_cell.py: BE {name}: {self.err}")

    def run(self):
        try:
            torch.cuda.set_device(0)
            if self.green_sms:
                s = self.green_stream()
            else:
                s = torch.cuda.Stream(priority=self.prio)
            with torch.cuda.stream(s):
                step, self.m, self.opt = be_step_fn(self.name, self.batch)
            g = capture(step, s)
            self.graphs = g is not None
            run = g.replay if g is not None else step
            self.ready.set()
            while not self.stop.is_set():
                with torch.cuda.stream(s):
                    run()
                s.synchronize()
                self.times.append(time.perf_counter())
        except Exception as e:  # noqa: BLE001 - reported by ready() and close()
            self.err = f"{type(e).__name__}: {e}"
            self.ready.set()

    def green_stream(self):
        """A stream of a green context of green_sms SMs, current on this thread.

        PyTorch 2.11's GreenContext.set_context() makes the green context
        current but leaves work on streams from PyTorch's pool, which were
        created in the primary context (and are not confined); so the stream
        is made here with the driver API while the green context is current,
        and wrapped as an external stream.
        """
        import ctypes
        from torch.cuda.green_contexts import GreenContext
        try:
            self.gc = GreenContext.create(num_sms=self.green_sms, device_id=0)
        except TypeError:
            self.gc = GreenContext.create(self.green_sms, 0)
        cuda = ctypes.CDLL("libcuda.so.1")
        if hasattr(self.gc, "Stream"):  # newer PyTorch: streams of the green context itself
            s = self.gc.Stream()
        else:
            self.gc.set_context()
            h = ctypes.c_void_p()
            rc = cuda.cuStreamCreateWithPriority(ctypes.byref(h), ctypes.c_uint(1), ctypes.c_int(self.prio))
            if rc != 0:
                raise RuntimeError(f"cuStreamCreateWithPriority in the green context: CUresult {rc}")
            s = torch.cuda.ExternalStream(h.value)
        self.sms_seen = sms_seen(cuda, s)
        print(f"  green context of {self.green_sms} SMs: a kernel on its stream ran on {self.sms_seen['direct']} SMs, "
              f"the same kernel captured in a CUDA graph and replayed there on {self.sms_seen['graph']}", file=sys.stderr)
        if max(self.sms_seen.values()) > self.green_sms:
            raise RuntimeError(f"green context not confined: {self.sms_seen} SMs used, partition of {self.green_sms}")
        return s

    def steps_in(self, t0, t1):
        return sum(1 for t in self.times if t0 <= t < t1) / (t1 - t0)

    def close(self):
        self.stop.set()
        self.thread.join()
        if self.err:
            raise SystemExit(f"torch_cell.py: BE {self.name} failed while HP ran: {self.err}")


def serve(run, stream, arrivals_us):
    """Replays run at each arrival (host clock, from t0) on stream; returns latencies (us)."""
    n = len(arrivals_us)
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    base = torch.cuda.Event(enable_timing=True)
    base.record(stream)
    base.synchronize()
    t0 = time.perf_counter()
    for i, a in enumerate(arrivals_us):
        due = t0 + a / 1e6
        while True:
            left = due - time.perf_counter()
            if left <= 0:
                break
            if left > 300e-6:
                time.sleep(left - 200e-6)
        with torch.cuda.stream(stream):
            run()
        evs[i].record(stream)
    torch.cuda.synchronize()
    return [base.elapsed_time(e) * 1e3 - a for e, a in zip(evs, arrivals_us)], t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cell_dir")
    # green first: cuDNN plans the BE job chose on the whole GPU (alone,
    # priority) fail inside a green context (CUDNN_STATUS_EXECUTION_FAILED).
    ap.add_argument("--setups", default="green,alone,priority")
    args = ap.parse_args()
    cell = json.load(open(os.path.join(args.cell_dir, "cell.json")))
    spec = cell["cell"].get("torch")
    if not spec:
        raise SystemExit(f"torch_cell.py: {args.cell_dir}: the cell has no torch entry")
    path = os.path.join(args.cell_dir, "arrivals.txt")
    # committed cells keep it gzipped (results/README.md)
    f = open(path) if os.path.exists(path) else gzip.open(path + ".gz", "rt")
    arrivals = [float(l) for l in f if l.strip() and not l.startswith("#")]
    warm = cell["warmupSec"] * 1e6
    sys.setswitchinterval(5e-5)
    torch.backends.cudnn.benchmark = True
    lo, hi = torch.cuda.Stream.priority_range()
    hp_stream = torch.cuda.Stream(priority=hi)
    fwd = hp_model(spec["hp"])
    with torch.no_grad():
        g = capture(fwd, hp_stream)
        run = g.replay if g is not None else fwd
        solo = []
        for _ in range(300):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(hp_stream)
            with torch.cuda.stream(hp_stream):
                run()
            e.record(hp_stream)
            e.synchronize()
            solo.append(s.elapsed_time(e) * 1e3)
        solo_us = sorted(solo[100:])[len(solo[100:]) // 2]
        print(f"  {spec['hp']} solo {solo_us:.0f} us (graphs {g is not None})", file=sys.stderr)
        be_alone = None
        for setup in args.setups.split(","):
            be = None
            if setup == "priority":
                be = BE(spec["be"], spec["beBatch"], lo)
            elif setup == "green":
                be = BE(spec["be"], spec["beBatch"], lo, spec["greenSms"])
            elif setup != "alone":
                raise SystemExit(f"torch_cell.py: unknown setup {setup!r}")
            if be:
                time.sleep(1.0)  # BE at its pace before HP starts
            lat, t0 = serve(run, hp_stream, arrivals)
            t1 = t0 + arrivals[-1] / 1e6
            keep = [l for l, a in zip(lat, arrivals) if a >= warm]
            steps = 0.0
            note = ""
            if be:
                steps = be.steps_in(t0 + warm / 1e6, t1)
                note = f"BE graphs: {be.graphs}."
                if be.sms_seen:
                    note += (f" Confinement check: a 4-blocks-per-SM kernel on the BE stream ran on "
                             f"{be.sms_seen['direct']} SMs, captured in a graph on {be.sms_seen['graph']}.")
                be.close()
            if setup == "alone":
                be2 = BE(spec["be"], spec["beBatch"], lo)
                time.sleep(4.0)
                now = time.perf_counter()
                be_alone = be2.steps_in(now - 3.0, now)
                note = f"BE graphs: {be2.graphs}."
                be2.close()
            res = {
                "apiVersion": "atoll/torch-cell/v1", "setup": setup, "device": torch.cuda.get_device_name(0),
                "torch": torch.__version__, "hpModel": spec["hp"], "beModel": f"{spec['be']} bs{spec['beBatch']}",
                "greenSms": spec["greenSms"] if setup == "green" else 0, "cudaGraphs": g is not None,
                "soloUs": solo_us, "ratePerSec": cell["ratePerSec"], "requests": len(keep),
                "hpP50Us": pct(keep, 0.5), "hpP99Us": pct(keep, 0.99), "hpSamples": encode_samples(keep),
                "beStepsPerSec": steps, "beAloneStepsPerSec": be_alone or 0.0, "note": note,
            }
            if setup == "alone":
                res["beStepsPerSec"] = 0.0
            with open(os.path.join(args.cell_dir, f"torch-{setup}.json"), "w") as f:
                json.dump(res, f, indent=2)
            print(f"  {setup:9s} HP p50 {res['hpP50Us']/1e3:.3f} ms p99 {res['hpP99Us']/1e3:.3f} ms, "
                  f"{len(keep)} requests, BE {steps:.1f} steps/s (alone {be_alone or 0:.1f}) {note}", file=sys.stderr)


if __name__ == "__main__":
    main()
