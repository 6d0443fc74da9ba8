package profiler_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/models"
	"atoll/profiler"
	"atoll/profiles"
)

func estimate(t *testing.T, spec gpu.Spec, ops ...kernels.Op) *profiles.Profile {
	t.Helper()
	var layers []models.Layer
	for i, op := range ops {
		layers = append(layers, models.Layer{Name: string(rune('a' + i)), Op: op})
	}
	p, err := profiler.Estimate(spec, "custom", 1, layers)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A large GEMM is compute-bound at the stated tensor efficiency (less wave
// quantisation); a large elementwise op is memory-bound at the stated
// DRAM efficiency.
func TestRooflineLimits(t *testing.T) {
	spec := gpu.H100SXM
	p := estimate(t, spec,
		kernels.GEMM{M: 8192, N: 8192, K: 8192, In: kernels.BF16, Out: kernels.BF16},
		kernels.Elementwise{Name: "add", Elems: 1 << 28, Inputs: 2, Outputs: 1, In: kernels.BF16},
	)
	gemm, ew := p.Kernels[0], p.Kernels[1]
	achieved := gemm.FLOPs / (gemm.DurationUs * 1e-6) / spec.PeakFLOPS
	if achieved > profiler.TensorEfficiency || achieved < 0.9*profiler.TensorEfficiency {
		t.Errorf("8192³ GEMM at %.1f%% of peak, want just under %.0f%%", 100*achieved, 100*profiler.TensorEfficiency)
	}
	if gemm.Class != profiles.ClassCompute {
		t.Errorf("GEMM class %s (compute %.1f%%, memory %.1f%%)", gemm.Class, gemm.ComputePct, gemm.MemoryPct)
	}
	bw := ew.Bytes / (ew.DurationUs * 1e-6) / spec.DRAMBandwidth
	if bw > profiler.MemoryEfficiency || bw < 0.95*profiler.MemoryEfficiency {
		t.Errorf("large add at %.1f%% of DRAM bandwidth, want just under %.0f%%", 100*bw, 100*profiler.MemoryEfficiency)
	}
	if ew.Class != profiles.ClassMemory {
		t.Errorf("add class %s", ew.Class)
	}
	if math.Abs(ew.MemoryPct-100*bw) > 0.01 {
		t.Errorf("memoryPct %.2f, derived %.2f", ew.MemoryPct, 100*bw)
	}
}

// A kernel of fewer blocks than SMs uses only as many SMs as it has blocks.
func TestPartialWave(t *testing.T) {
	spec := gpu.H100SXM
	small := kernels.GEMM{M: 64, N: 64, K: 4096, Batch: 8, In: kernels.BF16, Out: kernels.BF16} // 8 blocks
	full := kernels.GEMM{M: 64, N: 64, K: 4096, Batch: spec.SMs, In: kernels.BF16, Out: kernels.BF16}
	double := kernels.GEMM{M: 64, N: 64, K: 4096, Batch: 2 * spec.SMs, In: kernels.BF16, Out: kernels.BF16}
	p := estimate(t, spec, small, full, double)
	s, f, d := p.Kernels[0], p.Kernels[1], p.Kernels[2]
	g := small.Geometry()
	perSM, _, _ := spec.Occupancy(g.Block.Count(), g.Registers, g.SharedMem)
	if want := (8 + perSM - 1) / perSM; s.SMsNeeded != want { // Orion: ceil(grid / blocks per SM)
		t.Errorf("8 blocks need %d SMs, want %d", s.SMsNeeded, want)
	}
	// Two blocks share each SM: twice the block time.
	if perSM >= 2 && math.Abs((d.DurationUs-profiler.FloorUs)-2*(f.DurationUs-profiler.FloorUs)) > 0.002 {
		t.Errorf("264 blocks %.3f µs, 132 blocks %.3f µs: want twice the time above the floor", d.DurationUs, f.DurationUs)
	}
	// Same work per block, one block per SM in both: same duration.
	if s.DurationUs != f.DurationUs {
		t.Errorf("8-block kernel %.3f µs, 132-block kernel %.3f µs; want equal", s.DurationUs, f.DurationUs)
	}
	if want := (spec.SMs + perSM - 1) / perSM; f.SMsNeeded != want {
		t.Errorf("132 blocks need %d SMs, want %d", f.SMsNeeded, want)
	}
}

func TestScalingAndFields(t *testing.T) {
	spec := gpu.H100SXM
	m, _ := models.Get("bert-base")
	layers, err := m.Ops(4)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profiler.Estimate(spec, "bert-base", 4, layers)
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != profiles.SourceEstimated || p.Phase != profiles.PhaseInference || p.GPU != spec.Name || p.Notes["method"] == "" {
		t.Errorf("header %+v", p)
	}
	for i, k := range p.Kernels {
		if k.DurationUs < profiler.FloorUs {
			t.Errorf("%s: %.3f µs below the floor", k.Name, k.DurationUs)
		}
		last := k.Scaling[len(k.Scaling)-1]
		if last.SMs != spec.SMs || last.DurationUs != k.DurationUs {
			t.Errorf("%s: scaling ends at %+v, duration %.3f", k.Name, last, k.DurationUs)
		}
		for j := 1; j < len(k.Scaling); j++ {
			if k.Scaling[j].DurationUs > k.Scaling[j-1].DurationUs {
				t.Errorf("%s: slower with more SMs: %+v", k.Name, k.Scaling)
			}
		}
		if want := profiler.Classify(k.ComputePct, k.MemoryPct); k.Class != want {
			t.Errorf("%s: class %s, rule says %s", k.Name, k.Class, want)
		}
		g := layers[i].Op.Geometry()
		per, _, _ := spec.Occupancy(g.Block.Count(), g.Registers, g.SharedMem)
		if k.SMsNeeded != spec.SMsNeeded(g.Grid.Count(), per) {
			t.Errorf("%s: smsNeeded %d", k.Name, k.SMsNeeded)
		}
	}
	if err := profiles.Check(p, models.Ops(layers), spec); err != nil {
		t.Error(err)
	}
	// A GPU with fewer SMs gets its own count as the last scaling point.
	a, err := profiler.Estimate(gpu.A100SXM, "bert-base", 4, layers)
	if err != nil {
		t.Fatal(err)
	}
	sc := a.Kernels[0].Scaling
	if sc[len(sc)-1].SMs != 108 || sc[len(sc)-2].SMs != 99 {
		t.Errorf("A100 scaling points %+v", sc)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		c, m float64
		want string
	}{
		{60, 10, profiles.ClassCompute},
		{59.9, 10, profiles.ClassUnknown},
		{70, 80, profiles.ClassMemory},
		{80, 80, profiles.ClassMemory},
		{10, 60, profiles.ClassMemory},
		{30, 30, profiles.ClassUnknown},
	} {
		if got := profiler.Classify(tc.c, tc.m); got != tc.want {
			t.Errorf("Classify(%v, %v) = %s, want %s", tc.c, tc.m, got, tc.want)
		}
	}
}

func TestEstimateErrors(t *testing.T) {
	ok := []models.Layer{{Name: "x", Op: kernels.Softmax{Rows: 4, Cols: 4, In: kernels.BF16}}}
	bad := gpu.H100SXM
	bad.SMs = 0
	huge := []models.Layer{{Name: "big", Op: kernels.GEMM{M: 1 << 24, N: 64, K: 64, In: kernels.BF16}}}
	unfit := []models.Layer{{Name: "unfit", Op: fatOp{}}}
	for name, tc := range map[string]struct {
		spec   gpu.Spec
		layers []models.Layer
	}{
		"bad spec":     {bad, ok},
		"no layers":    {gpu.H100SXM, nil},
		"nil op":       {gpu.H100SXM, []models.Layer{{Name: "nil"}}},
		"grid limits":  {gpu.H100SXM, huge},
		"does not fit": {gpu.H100SXM, unfit},
	} {
		if _, err := profiler.Estimate(tc.spec, "m", 1, tc.layers); !errors.Is(err, profiler.ErrEstimate) {
			t.Errorf("%s: err = %v, want ErrEstimate", name, err)
		}
	}
}

// fatOp needs more shared memory than an SM has.
type fatOp struct{ kernels.Softmax }

func (fatOp) Geometry() kernels.Geometry {
	return kernels.Geometry{Grid: gpu.D1(1), Block: gpu.D1(128), SharedMem: 1 << 20}
}

// The estimates against published H100 figures. These bound the GPU time
// of one request or step; frameworks add host overhead on top (eager
// PyTorch ResNet-50 bs1 is ~1-2 ms, launch-bound; TensorRT-class engines
// ~0.3-0.8 ms), so the estimates must sit at or below the eager figures.
func TestPublishedSanity(t *testing.T) {
	for _, tc := range []struct {
		model    string
		batch    int
		min, max time.Duration
		source   string
	}{
		{"resnet50", 1, 150 * time.Microsecond, 2 * time.Millisecond, "eager 1-2 ms; TensorRT fp16 ~0.4-0.8 ms"},
		{"bert-base", 1, 150 * time.Microsecond, 2 * time.Millisecond, "TensorRT fp16 seq128 ~0.4-0.6 ms; eager ~5 ms (launch-bound)"},
		{"resnet50-train", 32, 5 * time.Millisecond, 40 * time.Millisecond, "~3000 img/s mixed precision: ~11 ms per 32 images"},
	} {
		m, _ := models.Get(tc.model)
		layers, err := m.Ops(tc.batch)
		if err != nil {
			t.Fatal(err)
		}
		p, err := profiler.Estimate(gpu.H100SXM, tc.model, tc.batch, layers)
		if err != nil {
			t.Fatal(err)
		}
		if d := p.Total(); d < tc.min || d > tc.max {
			t.Errorf("%s bs%d: estimate %v outside [%v, %v] (published: %s)", tc.model, tc.batch, d, tc.min, tc.max, tc.source)
		}
	}
}
