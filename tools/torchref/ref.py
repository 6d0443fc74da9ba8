#!/usr/bin/env python3
"""PyTorch reference outputs for atoll's model zoo.

Given a weights file and an input file that atoll wrote (safetensors; see
docs/models.md), this builds the same network in PyTorch -- written here
independently of atoll's graph, from the architecture named in the weights'
metadata ("arch" and "config") -- runs it and writes its outputs, so that a
test can report atoll's relative error against PyTorch.

Conventions are atoll's (the weights file is read as is):
  * activations NHWC (converted to NCHW around torch's convolutions);
  * convolution weights [R, S, C, OutC] (HWIO); depthwise [R, S, C];
  * linear weights [K, N] = (in, out), i.e. y = x @ W + b;
  * inference CNNs have batch norm folded into each convolution's bias;
  * BERT: fused QKV projection [h, 3h] whose output is laid out
    [tokens][3][heads][d]; no attention mask (full-length sequences), token
    type 0 everywhere, GELU with the tanh approximation;
  * VGG-19's classifier reads the NHWC feature map flattened in (h, w, c)
    order.

Outputs are written as F32 under atoll's tensor names: the model output
(metadata "output") and one intermediate (ResNet: the last bottleneck's
output before the average pool; BERT: the last hidden states), plus
metadata: torch version, device, dtype and, with --time, the median eager
latency of the forward pass.

Usage:
  python3 ref.py --weights w.safetensors --inputs in.safetensors --out ref.safetensors \
      [--device cpu|cuda] [--dtype float32|bfloat16] [--time N]

Needs numpy and torch (no safetensors package: the format is read here).
"""
import argparse
import json
import math
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "BF16": np.uint16}


def read_safetensors(path):
    """Returns ({name: torch.Tensor}, metadata). BF16 widens to float32."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        sys.exit(f"{path}: truncated (no header length)")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        sys.exit(f"{path}: truncated header")
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, e in header.items():
        if e["dtype"] not in DTYPES:
            sys.exit(f"{path}: tensor {name}: dtype {e['dtype']} not supported")
        b, end = e["data_offsets"]
        arr = np.frombuffer(data[b:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
        if e["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        t = torch.from_numpy(arr.copy())
        if e["dtype"] == "I32":
            t = t.long()
        else:
            t = t.float()
        out[name] = t
    return out, meta


def write_safetensors(path, tensors, meta):
    header, chunks, off = {"__metadata__": meta}, [], 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.detach().float().cpu().numpy(), dtype=np.float32)
        raw = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    js = json.dumps(header).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for c in chunks:
            f.write(c)


class Net:
    """Functional networks over a dict of weights in atoll's layouts."""

    def __init__(self, w):
        self.w = w

    def conv(self, name, x, stride, pad, act=None, resid=None):
        wt = self.w[name + ".weight"].permute(3, 2, 0, 1)  # HWIO -> OIHW
        y = F.conv2d(x, wt, self.w[name + ".bias"].to(x.dtype), stride=stride, padding=pad)
        if resid is not None:
            y = y + resid
        return act(y) if act else y

    def linear(self, name, x, act=None):
        y = x @ self.w[name + ".weight"] + self.w[name + ".bias"].to(x.dtype)
        return act(y) if act else y

    # -- ResNet v1.5, BN folded ------------------------------------------
    def resnet(self, x, cfg):
        x = x.permute(0, 3, 1, 2)  # NHWC -> NCHW
        x = self.conv("conv1", x, 2, 3, F.relu)
        x = F.max_pool2d(x, 3, 2, 1)
        last = None
        for stage, count in enumerate(cfg["blocks"]):
            for i in range(count):
                p = f"layer{stage + 1}.{i}"
                s = 2 if i == 0 and stage > 0 else 1
                y = self.conv(p + ".conv1", x, 1, 0, F.relu)
                y = self.conv(p + ".conv2", y, s, 1, F.relu)
                short = self.conv(p + ".downsample", x, s, 0) if i == 0 else x
                x = self.conv(p + ".conv3", y, 1, 0, F.relu, short)
                last = p + ".conv3"
        feats = x.permute(0, 2, 3, 1)
        pooled = x.mean(dim=(2, 3))
        return {last: feats, "avgpool": pooled, "fc": self.linear("fc", pooled)}

    # -- VGG-19 ------------------------------------------------------------
    def vgg19(self, x, cfg):
        x = x.permute(0, 3, 1, 2)
        idx = 0
        for group in [[64, 64], [128, 128], [256] * 4, [512] * 4, [512] * 4]:  # widths / width_div, from the weights
            for _ in group:
                x = self.conv(f"features.{idx}", x, 1, 1, F.relu)
                idx += 2
            x = F.max_pool2d(x, 2, 2)
            idx += 1
        x = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)  # atoll flattens NHWC
        feats = x
        x = self.linear("classifier.0", x, F.relu)
        x = self.linear("classifier.3", x, F.relu)
        return {"features.36": feats, "classifier.6": self.linear("classifier.6", x)}

    # -- MobileNetV2, BN folded --------------------------------------------
    def mobilenetv2(self, x, cfg):
        relu6 = lambda t: t.clamp(0, 6)
        x = x.permute(0, 3, 1, 2)
        x = self.conv("features.0", x, 2, 1, relu6)
        c, idx = 32, 1
        for t, out, reps, stride in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                                     (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
            for r in range(reps):
                s = stride if r == 0 else 1
                p = f"features.{idx}"
                y = self.conv(p + ".expand", x, 1, 0, relu6) if t != 1 else x
                dw = self.w[p + ".depthwise.weight"].permute(2, 0, 1).unsqueeze(1)  # [R,S,C] -> [C,1,R,S]
                y = relu6(F.conv2d(y, dw, self.w[p + ".depthwise.bias"].to(y.dtype), stride=s, padding=1, groups=y.shape[1]))
                x = self.conv(p + ".project", y, 1, 0, None, x if s == 1 and c == out else None)
                c, idx = out, idx + 1
        x = self.conv(f"features.{idx}", x, 1, 0, relu6)
        pooled = x.mean(dim=(2, 3))
        return {"avgpool": pooled, "classifier.1": self.linear("classifier.1", pooled)}

    # -- BERT encoder ------------------------------------------------------
    def bert(self, ids, cfg):
        w = self.w
        n, seq = ids.shape
        h, heads = cfg["hidden"], cfg["heads"]
        d = h // heads
        dt = w["embeddings.layernorm.weight"].dtype
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:seq]
        if cfg["types"] > 0:
            x = x + w["embeddings.token_type_embeddings.weight"][0]
        ln = lambda name, t: F.layer_norm(t, (h,), w[name + ".weight"].to(t.dtype), w[name + ".bias"].to(t.dtype), 1e-5)
        x = ln("embeddings.layernorm", x)
        last = None
        for i in range(cfg["layers"]):
            p = f"encoder.{i}"
            qkv = self.linear(p + ".attention.qkv", x).view(n, seq, 3, heads, d)
            q, k, v = (qkv[:, :, j].permute(0, 2, 1, 3) for j in range(3))  # [n, heads, seq, d]
            probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)
            ctx = (probs @ v).permute(0, 2, 1, 3).reshape(n, seq, h)
            x = ln(p + ".attention.layernorm", self.linear(p + ".attention.output", ctx) + x)
            f = self.linear(p + ".ffn.intermediate", x, lambda t: F.gelu(t, approximate="tanh"))
            x = ln(p + ".ffn.layernorm", self.linear(p + ".ffn.output", f) + x)
            last = p + ".ffn.layernorm"
        out = {last: x.reshape(n * seq, h)}
        if cfg["pooler"]:
            out["pooler"] = self.linear("pooler.dense", x[:, 0], torch.tanh)
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--time", type=int, default=0, help="timed eager runs (after 3 warm-ups)")
    a = ap.parse_args()

    w, meta = read_safetensors(a.weights)
    inputs, imeta = read_safetensors(a.inputs)
    arch = meta.get("arch", "")
    cfg = json.loads(meta.get("config", "{}") or "{}")
    if meta.get("format") != "atoll" or arch not in ("resnet", "bert", "vgg19", "mobilenetv2"):
        sys.exit(f"{a.weights}: not an atoll inference weights file (format {meta.get('format')!r}, arch {arch!r})")
    if cfg.get("train") or cfg.get("labels"):
        sys.exit(f"{a.weights}: training steps have no reference here (inference only)")
    dev, dt = torch.device(a.device), getattr(torch, a.dtype)
    net = Net({k: v.to(dev, dt) for k, v in w.items()})
    if arch == "bert":
        x = inputs["input_ids"].to(dev)
    else:
        x = inputs["input"].to(dev, dt)
    fwd = lambda: getattr(net, arch)(x, cfg)
    with torch.no_grad():
        outs = fwd()
        out_meta = {"format": "atoll-torchref", "model": meta.get("model", ""), "torch": torch.__version__,
                    "device": str(dev) if dev.type != "cuda" else torch.cuda.get_device_name(dev),
                    "dtype": a.dtype, "output": meta.get("output", "")}
        if a.time > 0:
            sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
            for _ in range(3):
                fwd()
            ts = []
            for _ in range(a.time):
                sync()
                t0 = time.perf_counter()
                fwd()
                sync()
                ts.append(time.perf_counter() - t0)
            out_meta["eager_ms_median"] = f"{1e3 * float(np.median(ts)):.4f}"
            out_meta["eager_runs"] = str(a.time)
    write_safetensors(a.out, outs, out_meta)


if __name__ == "__main__":
    main()
