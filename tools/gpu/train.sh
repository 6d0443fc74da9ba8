#!/usr/bin/env bash
# Runs on the GPU machine (repo root; no Go there). Needs, built here by the
# lead:
#   GOOS=linux GOARCH=amd64 go build -o bin/atoll ./cmd/atoll
#   GOOS=linux GOARCH=amd64 go test -c -o bin/kernels.test ./kernels
#   GOOS=linux GOARCH=amd64 go test -c -o bin/run.test ./models/run
#
# 1. the training kernels' GPU self-test (every form against the CPU
#    references, bit identity after preemption; no latency measurements);
# 2. training steps wholly on the GPU (TestGPUTrainStep): a reduced ResNet
#    step against the CPU reference (loss, weights, momenta), then
#    resnet50-train at batch 32: per-layer spot checks of the training
#    kernels at full size and the median step time;
# 3. PyTorch's ResNet-50 training step with the same shapes (batch 32,
#    224x224, bf16 autocast, channels_last, SGD momentum), if torch is there;
# 4. atoll profile of resnet50-train at batch 32, written to
#    $OUT/resnet50-train-bs32.json for the lead to commit under profiles/H200/.
#
# Writes at most 3 files to $OUT: train-logs.tgz, resnet50-train-bs32.json,
# summary.txt. Budget: under 5 minutes (step timeouts 75+120+35+70 s; NVRTC
# modules are cached on disk after the first step, so later steps reuse them).
set -u
R=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
W=/tmp/train-work; rm -rf $W; mkdir -p $W
S=$W/summary.txt
log() { echo "== $(date +%T) $*" | tee -a $W/steps.log; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $W/gpu.txt 2>&1

log "kernels self-test (training kernels)"
( cd $R/kernels && OUT=$W timeout 75 $R/bin/kernels.test -test.run 'TestGPUSelfTest$' -test.v \
    -gpu.only bn_,xent,colsum,pool_bwd,sgd_,wgrad_split,splitsum ) > $W/selftest.txt 2>&1
echo "selftest rc=$?" >> $W/steps.log

log "training steps on the GPU"
( cd $R/models/run && OUT=$W timeout 120 $R/bin/run.test -test.run 'TestGPUTrainStep$' -test.v \
    -train.model resnet50-train -train.batch 32 -train.runs 10 ) > $W/trainstep.txt 2>&1
echo "trainstep rc=$?" >> $W/steps.log

log "pytorch training step"
PY=${ATOLL_PYTHON:-python3}
timeout 35 $PY - > $W/torch.txt 2>&1 <<'EOF'
import torch, torch.nn as nn
torch.backends.cudnn.benchmark = True
class Bottleneck(nn.Module):
    def __init__(s, cin, w, stride):
        super().__init__()
        s.c1, s.b1 = nn.Conv2d(cin, w, 1, bias=False), nn.BatchNorm2d(w)
        s.c2, s.b2 = nn.Conv2d(w, w, 3, stride, 1, bias=False), nn.BatchNorm2d(w)
        s.c3, s.b3 = nn.Conv2d(w, 4 * w, 1, bias=False), nn.BatchNorm2d(4 * w)
        s.down = None
        if stride != 1 or cin != 4 * w:
            s.down = nn.Sequential(nn.Conv2d(cin, 4 * w, 1, stride, bias=False), nn.BatchNorm2d(4 * w))
    def forward(s, x):
        y = torch.relu(s.b1(s.c1(x)))
        y = torch.relu(s.b2(s.c2(y)))
        y = s.b3(s.c3(y))
        return torch.relu(y + (x if s.down is None else s.down(x)))
def resnet50():
    layers, cin = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)], 64
    for stage, n in enumerate([3, 4, 6, 3]):
        w = 64 << stage
        for i in range(n):
            layers.append(Bottleneck(cin, w, 2 if (i == 0 and stage > 0) else 1)); cin = 4 * w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    return nn.Sequential(*layers)
dev = "cuda"
m = resnet50().to(dev).to(memory_format=torch.channels_last)
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(32, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (32,), device=dev)
def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(m(x), y)
    loss.backward()
    opt.step()
    return loss
for _ in range(5): step()
torch.cuda.synchronize()
ts = []
for _ in range(20):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); l = step(); b.record(); torch.cuda.synchronize()
    ts.append(a.elapsed_time(b))
ts.sort()
print(f"torch {torch.__version__} {torch.cuda.get_device_name()}: resnet50 training step bs32 bf16-autocast channels_last: median {ts[len(ts)//2]:.2f} ms, min {ts[0]:.2f} ms, loss {l.item():.4f}")
EOF
echo "torch rc=$?" >> $W/steps.log

log "atoll profile resnet50-train bs32"
timeout 70 $R/bin/atoll profile --model resnet50-train --batch 32 --substitute \
  --out $OUT/resnet50-train-bs32.json > $W/profile.txt 2>&1
echo "profile rc=$?" >> $W/steps.log
log done

{
  cat $W/gpu.txt
  cat $W/steps.log
  echo "--- self-test (failures and summary)"
  grep -E "FAIL|false|PASS|ok |SelfTest|panic" $W/selftest.txt | tail -15
  grep -A30 -i "identity" $W/selftest.txt | tail -14
  echo "--- training steps"
  cat $W/train_gpu.txt 2>/dev/null || tail -25 $W/trainstep.txt
  grep -E "^(--- |FAIL|ok|PASS)|train_gpu_test" $W/trainstep.txt | tail -8
  echo "--- pytorch"
  tail -3 $W/torch.txt
  echo "--- profile"
  tail -6 $W/profile.txt
} > $S 2>&1
cp $S $OUT/summary.txt
tar czf $OUT/train-logs.tgz -C $W .
echo
cat $S
