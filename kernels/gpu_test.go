package kernels_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/cuda"
	"atoll/kernels"
)

var (
	gpuQuick  = flag.Bool("gpu.quick", false, "SelfTest on the GPU: correctness checks only")
	gpuTrials = flag.Int("gpu.trials", 100, "SelfTest on the GPU: latency trials per form and block length")
	gpuSeed   = flag.Uint64("gpu.seed", uint64(time.Now().UnixNano()), "SelfTest on the GPU: input seed (fresh by default)")
	gpuOnly   = flag.String("gpu.only", "", "SelfTest on the GPU: only kernels whose name contains one of these comma-separated substrings (no measurements)")
)

// TestGPUSelfTest runs kernels.SelfTest on GPU 0 through gpu/cuda. Without
// a GPU it checks that SelfTest's caller gets gpu.ErrNoDevice and skips.
// With $OUT set, the report is also written to $OUT/kernels_selftest.json.
func TestGPUSelfTest(t *testing.T) {
	var rep kernels.Report
	err := cuda.Run(0, func(d *cuda.Device) error {
		var err error
		t.Logf("device: %s, %s", d.Info().Name, d.Info().Driver)
		rep, err = kernels.SelfTest(context.Background(), d, kernels.Options{
			Seed: *gpuSeed, Out: os.Stdout, Quick: *gpuQuick, LatencyTrials: *gpuTrials, Only: *gpuOnly,
		})
		return err
	})
	if errors.Is(err, gpu.ErrNoDevice) {
		t.Skipf("no GPU: %v", err)
	}
	if out := os.Getenv("OUT"); out != "" && rep.Device != "" {
		b, _ := json.MarshalIndent(rep, "", " ")
		if werr := os.WriteFile(filepath.Join(out, "kernels_selftest.json"), b, 0o644); werr != nil {
			t.Errorf("writing report: %v", werr)
		}
	}
	if err != nil {
		t.Fatalf("SelfTest: %v (seed %d)", err, *gpuSeed)
	}
	t.Logf("SelfTest passed in %v (seed %d)", rep.Elapsed, *gpuSeed)
}
