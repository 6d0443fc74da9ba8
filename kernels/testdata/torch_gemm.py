# torch.matmul baseline for the GEMM throughput row of docs/kernels.md:
# median of 20 timed products (CUDA events) after 3 warm-ups, random inputs.
import sys, torch
n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
for dt in (torch.bfloat16, torch.float16):
    a = torch.randn(n, n, dtype=dt, device="cuda")
    b = torch.randn(n, n, dtype=dt, device="cuda")
    for _ in range(3):
        a @ b
    ts = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); a @ b; e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    ts.sort()
    m = ts[len(ts) // 2]
    print(f"torch.matmul {dt} {n}^3: median {m:.1f} us, {2*n**3/(m*1e-6)/1e12:.1f} TFLOP/s")
