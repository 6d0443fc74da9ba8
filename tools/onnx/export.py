#!/usr/bin/env python3
"""Export models to ONNX with torch.onnx.export and compute onnxruntime's
outputs for them: the reference atoll's ONNX import is checked against.

For each model NAME it writes, in OUT:
  NAME.onnx              the export (random-initialized weights, eval mode,
                         dynamic batch, opset --opset)
  NAME.ref.safetensors   inputs ("input.<graph input>") and onnxruntime's
                         outputs on the CPU ("output.<graph output>"), batch 1
  NAME.ops.txt           the graph's operators (a histogram, then every node)

Models (torchvision and Hugging Face transformers architectures, random
weights, nothing downloaded):
  resnet50 mobilenetv2 vgg19       image [N, 3, 224, 224] -> logits
  bert-base                        input_ids [N, 128] -> pooler_output
  distilbert                       input_ids [N, 128] -> last_hidden_state
  tiny-cnn tiny-bert tiny-distilbert
                                   small versions of the same patterns
                                   (committed under models/testdata/onnx so
                                   CI checks the importer without torch)

Usage:
  python3 export.py OUT [--models a,b,...] [--opset 17] [--exporter legacy|dynamo]

Needs torch, torchvision, transformers, onnx and onnxruntime (the GPU machine
has them). The safetensors file is written here (no safetensors package).
"""
import argparse
import collections
import json
import os
import struct
import sys

import numpy as np
import torch


def write_safetensors(path, tensors, meta):
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dt = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.int32): "I32"}[a.dtype]
        b = a.tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class First(torch.nn.Module):
    """Returns one named output of a Hugging Face model (atoll serves one)."""

    def __init__(self, m, key):
        super().__init__()
        self.m, self.key = m, key

    def forward(self, input_ids):
        return getattr(self.m(input_ids=input_ids), self.key)


class TinyCNN(torch.nn.Module):
    """Conv-BN-ReLU stem, max pool, a residual block, a depthwise conv with
    ReLU6, global average pool, flatten, linear: the image patterns."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.c1 = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.c2 = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8))
        self.dw = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU6())
        self.pw = nn.Sequential(nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(self.stem(x))
        x = torch.relu(self.c2(self.c1(x)) + x)
        x = self.pw(self.dw(x))
        x = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


def build(name):
    """(module, example inputs {name: array}, output name)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    image = lambda h: {"input": rng.standard_normal((1, 3, h, h)).astype(np.float32)}
    if name in ("resnet50", "mobilenetv2", "vgg19"):
        import torchvision
        ctor = {"resnet50": torchvision.models.resnet50, "mobilenetv2": torchvision.models.mobilenet_v2,
                "vgg19": torchvision.models.vgg19}[name]
        m = ctor(weights=None)
        # Random BN statistics so that folding them is exercised.
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
        return m, image(224), "logits"
    if name == "tiny-cnn":
        m = TinyCNN()
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.data.uniform_(0.5, 1.5)
                mod.bias.data.uniform_(-0.1, 0.1)
        return m, image(32), "logits"
    import transformers
    if name in ("bert-base", "tiny-bert"):
        cfg = transformers.BertConfig() if name == "bert-base" else transformers.BertConfig(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64)
        m, key, seq = First(transformers.BertModel(cfg), "pooler_output"), "pooler_output", 128 if name == "bert-base" else 16
    elif name in ("distilbert", "tiny-distilbert"):
        cfg = transformers.DistilBertConfig() if name == "distilbert" else transformers.DistilBertConfig(
            vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64)
        m, key, seq = First(transformers.DistilBertModel(cfg), "last_hidden_state"), "last_hidden_state", 128 if name == "distilbert" else 16
    else:
        sys.exit(f"unknown model {name!r}")
    ids = rng.integers(0, cfg.vocab_size, size=(1, seq), dtype=np.int64)  # written as I32 (atoll reads I32)
    return m, {"input_ids": ids}, key


def ops_txt(model):
    g = model.graph
    hist = collections.Counter(n.op_type for n in g.node)
    lines = [f"{k} {v}" for k, v in sorted(hist.items())]
    lines.append("")
    lines.append("inputs: " + ", ".join(i.name for i in g.input))
    lines.append("outputs: " + ", ".join(o.name for o in g.output))
    lines.append("initializers: %d" % len(g.initializer))
    lines.append("")
    import onnx
    for n in g.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        attrs = {k: (v if not hasattr(v, "dims") else f"tensor{list(v.dims)}") for k, v in attrs.items()}
        lines.append(f"{n.op_type} {n.name} {list(n.input)} -> {list(n.output)} {attrs if attrs else ''}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--models", default="resnet50,mobilenetv2,vgg19,bert-base,distilbert")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--exporter", choices=["legacy", "dynamo"], default="legacy")
    a = ap.parse_args()
    import onnx
    import onnxruntime as ort
    os.makedirs(a.out, exist_ok=True)
    print(f"torch {torch.__version__}, onnx {onnx.__version__}, onnxruntime {ort.__version__}", flush=True)
    for name in a.models.split(","):
        m, inputs, out_name = build(name)
        m.eval()
        path = os.path.join(a.out, name + ".onnx")
        args = tuple(torch.from_numpy(v) for v in inputs.values())
        names = list(inputs)
        dyn = {k: {0: "batch"} for k in names}
        dyn[out_name] = {0: "batch"}
        with torch.no_grad():
            if a.exporter == "legacy":
                torch.onnx.export(m, args, path, input_names=names, output_names=[out_name],
                                  dynamic_axes=dyn, opset_version=a.opset, dynamo=False)
            else:
                torch.onnx.export(m, args, path, input_names=names, output_names=[out_name],
                                  dynamic_axes=dyn, opset_version=a.opset, dynamo=True)
        model = onnx.load(path)
        onnx.checker.check_model(model)
        with open(os.path.join(a.out, name + ".ops.txt"), "w") as f:
            f.write(ops_txt(model))
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        outs = sess.run(None, inputs)
        with torch.no_grad():
            want = m(*args)
        diff = float(np.abs(outs[0] - want.numpy()).max())
        tensors = {"input." + k: (v.astype(np.int32) if v.dtype == np.int64 else v) for k, v in inputs.items()}
        for o, v in zip(sess.get_outputs(), outs):
            tensors["output." + o.name] = v.astype(np.float32)
        write_safetensors(os.path.join(a.out, name + ".ref.safetensors"), tensors, {
            "model": name, "torch": torch.__version__, "onnxruntime": ort.__version__,
            "opset": str(a.opset), "exporter": a.exporter})
        print(f"{name}: {os.path.getsize(path) / 1e6:.1f} MB, {len(model.graph.node)} nodes, "
              f"outputs {[o.name for o in sess.get_outputs()]} {[list(v.shape) for v in outs]}, "
              f"onnxruntime vs torch max |diff| {diff:.2e}", flush=True)


if __name__ == "__main__":
    main()
