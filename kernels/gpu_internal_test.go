package kernels

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"atoll/gpu"
	"atoll/gpu/cuda"
)

// TestGPUGemmTune compares warp layouts of the 128x128 GEMM tile on GPU 0
// (8 warps of 64x32 vs 4 warps of 64x64): correctness against the CPU at
// 1536x1536x256 and 4096^3 bf16 throughput. Skipped without a GPU.
func TestGPUGemmTune(t *testing.T) {
	if os.Getenv("ATOLL_GEMM_TUNE") == "" {
		t.Skip("set ATOLL_GEMM_TUNE=1 to run")
	}
	defer func(th, bk, st int) { gemmThreads128, gemmBK, gemmStages = th, bk, st }(gemmThreads128, gemmBK, gemmStages)
	type variant struct{ threads, bk, stages int }
	variants := []variant{{256, 32, 4}, {256, 32, 3}, {256, 64, 3}, {256, 64, 2}, {128, 32, 4}}
	if os.Getenv("ATOLL_GEMM_TUNE") == "256" {
		variants = variants[:1]
	}
	err := cuda.Run(0, func(d *cuda.Device) error {
		r, err := newRunner(context.Background(), d, New(d))
		if err != nil {
			return err
		}
		defer r.close()
		for _, v := range variants {
			gemmThreads128, gemmBK, gemmStages = v.threads, v.bk, v.stages
			r.lib = New(d)
			small := GEMM{M: 1536, N: 1536, K: 264, In: BF16, Out: BF16, Bias: true}
			b, err := Alloc(d, small, 7)
			if err != nil {
				return err
			}
			l, err := r.lib.Launch(small, gpu.Plain, b, Control{})
			if err != nil {
				return err
			}
			if _, err := r.timed(l, nil); err != nil {
				return err
			}
			ref, _ := Reference(small, b)
			got, _, err := Read(d, b.Outputs()[0])
			if err != nil {
				return err
			}
			e := RelErr(got, ref[0])
			_ = b.Free(d)
			for _, in := range []DType{BF16, F16} {
				g := GEMM{M: 4096, N: 4096, K: 4096, In: in, Out: in}
				gb, err := Alloc(d, g, 9)
				if err != nil {
					return err
				}
				gl, err := r.lib.Launch(g, gpu.Plain, gb, Control{})
				if err != nil {
					return err
				}
				var ts []float64
				for i := 0; i < 13; i++ {
					x, err := r.timed(gl, nil)
					if err != nil {
						return err
					}
					if i >= 3 {
						ts = append(ts, us(x))
					}
				}
				regs, _, _, _ := d.FuncAttributes(gl.Func)
				m := median(ts)
				fmt.Printf("gemm 128x128 threads=%d BK=%d stages=%d smem=%d %s: relerr(1536x1536x264)=%.2e 4096^3 %.1f us %.1f TFLOP/s regs=%d\n",
					v.threads, v.bk, v.stages, gl.SharedMem, in, e, m, g.FLOPs()/(m*1e-6)/1e12, regs)
				_ = gb.Free(d)
			}
		}
		return nil
	})
	if errors.Is(err, gpu.ErrNoDevice) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}
