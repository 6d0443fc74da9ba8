package profiler

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/models"
	"atoll/profiles"
)

// ErrEstimate wraps every error of Estimate.
var ErrEstimate = errors.New("profiler: cannot estimate")

// Efficiencies of the roofline estimate: the fraction of a peak that a
// well-tuned kernel sustains, and the fixed cost of any kernel.
const (
	// TensorEfficiency applies to GEMMs and convolutions (tensor cores),
	// against Spec.PeakFLOPS.
	TensorEfficiency = 0.70
	// CUDACoreEfficiency applies to every other op (depthwise conv,
	// elementwise, normalisation, softmax, pooling, reductions, gathers),
	// against Spec.PeakFP32.
	CUDACoreEfficiency = 0.70
	// MemoryEfficiency applies to DRAM traffic, against Spec.DRAMBandwidth.
	MemoryEfficiency = 0.80
	// FloorUs is added to every kernel: block scheduling, prologue and the
	// drain of the last wave that no roofline sees.
	FloorUs = 2.0
	// ClassThresholdPct is the utilisation (% of peak) above which a kernel
	// counts as compute- or memory-bound.
	ClassThresholdPct = 60.0
)

// ScalingSMs are the SM shares at which Estimate records a kernel's
// duration (for padding); shares above the GPU's SM count are dropped and
// the full count is always included.
var ScalingSMs = []int{8, 16, 33, 66, 99, 132}

// Estimate builds a roofline profile of a model's launches on a GPU.
//
// Per kernel: blocks per SM from spec.Occupancy; waves = ceil(grid / (SMs ×
// blocks per SM)); each SM gets 1/SMs of the (derated) compute peak and of
// DRAM bandwidth, shared evenly by the blocks resident on it, so one block
// takes max(FLOPs, bytes over its share); duration = waves × block time +
// FloorUs. computePct and memoryPct are the achieved fractions of the
// undiminished peaks (tensor or fp32 compute; DRAM) over that duration. Class:
// "compute" if computePct ≥ 60 and computePct > memoryPct, else "memory"
// if memoryPct ≥ 60, else "unknown". The phase comes from the zoo model's
// name (a "-train" suffix for models outside the zoo).
func Estimate(spec gpu.Spec, model string, batch int, layers []models.Layer) (*profiles.Profile, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEstimate, err)
	}
	if spec.PeakFP32 <= 0 {
		return nil, fmt.Errorf("%w: spec %q has no PeakFP32", ErrEstimate, spec.Name)
	}
	if len(layers) == 0 {
		return nil, fmt.Errorf("%w: %s: no layers", ErrEstimate, model)
	}
	phase := profiles.PhaseInference
	if m, err := models.Get(model); err == nil {
		phase = m.Phase()
		model = m.Name()
	} else if strings.HasSuffix(model, "-train") {
		phase = profiles.PhaseTraining
	}
	p := &profiles.Profile{
		APIVersion: profiles.APIVersion,
		GPU:        spec.Name,
		Model:      model,
		Batch:      batch,
		Phase:      phase,
		Source:     profiles.SourceEstimated,
		Notes:      notes(spec),
		Kernels:    make([]profiles.Kernel, 0, len(layers)),
	}
	for i, l := range layers {
		if l.Op == nil {
			return nil, fmt.Errorf("%w: %s: layer %d (%s) has no op", ErrEstimate, model, i, l.Name)
		}
		k, err := estimateKernel(spec, l)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: layer %d (%s): %w", ErrEstimate, model, i, l.Name, err)
		}
		p.Kernels = append(p.Kernels, k)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEstimate, err)
	}
	return p, nil
}

// tensorOp reports whether the op runs on tensor cores.
func tensorOp(op kernels.Op) bool {
	switch op.(type) {
	case kernels.GEMM, kernels.Conv2D:
		return true
	}
	return false
}

func estimateKernel(spec gpu.Spec, l models.Layer) (profiles.Kernel, error) {
	op := l.Op
	g := op.Geometry()
	threads := g.Block.Count()
	perSM, _, err := spec.Occupancy(threads, g.Registers, g.SharedMem)
	if err != nil {
		return profiles.Kernel{}, err
	}
	blocks := g.Grid.Count()
	flops, bytes := op.FLOPs(), op.Bytes()
	peak, eff := spec.PeakFP32, CUDACoreEfficiency
	if tensorOp(op) {
		peak, eff = spec.PeakFLOPS, TensorEfficiency
	}
	dur := func(sms int) float64 {
		return roofline(spec, sms, blocks, perSM, flops, bytes, peak*eff)
	}
	d := dur(spec.SMs)
	k := profiles.Kernel{
		Name:       l.Name,
		Kernel:     op.Kernel(),
		Shape:      op.Shape(),
		Grid:       [3]int{g.Grid.X, max(g.Grid.Y, 1), max(g.Grid.Z, 1)},
		Block:      [3]int{g.Block.X, max(g.Block.Y, 1), max(g.Block.Z, 1)},
		Registers:  g.Registers,
		SharedMem:  g.SharedMem,
		DurationUs: round(d, 1e3),
		FLOPs:      flops,
		Bytes:      bytes,
		ComputePct: min(round(100*flops/(d*1e-6)/peak, 100), 100),
		MemoryPct:  min(round(100*bytes/(d*1e-6)/spec.DRAMBandwidth, 100), 100),
		SMsNeeded:  spec.SMsNeeded(blocks, perSM),
	}
	k.Class = Classify(k.ComputePct, k.MemoryPct)
	if l.InPlace() {
		k.Tags = append(k.Tags, profiles.TagInPlace)
	}
	for _, n := range scalingSMs(spec) {
		k.Scaling = append(k.Scaling, profiles.Point{SMs: n, DurationUs: round(dur(n), 1e3)})
	}
	return k, nil
}

// roofline is the estimated duration in µs of a kernel of blocks blocks
// (perSM resident per SM at most) confined to sms SMs.
func roofline(spec gpu.Spec, sms, blocks, perSM int, flops, bytes, compute float64) float64 {
	resident := min(perSM, ceilDiv(blocks, sms)) // blocks sharing one SM in a wave
	waves := ceilDiv(blocks, sms*perSM)
	smCompute := compute / float64(spec.SMs)
	smBandwidth := MemoryEfficiency * spec.DRAMBandwidth / float64(spec.SMs)
	perBlockFLOPs := flops / float64(blocks)
	perBlockBytes := bytes / float64(blocks)
	block := math.Max(perBlockFLOPs*float64(resident)/smCompute, perBlockBytes*float64(resident)/smBandwidth)
	return float64(waves)*block*1e6 + FloorUs
}

// Classify is the estimate's class rule (see Estimate).
func Classify(computePct, memoryPct float64) string {
	switch {
	case computePct >= ClassThresholdPct && computePct > memoryPct:
		return profiles.ClassCompute
	case memoryPct >= ClassThresholdPct:
		return profiles.ClassMemory
	}
	return profiles.ClassUnknown
}

func scalingSMs(spec gpu.Spec) []int {
	var out []int
	for _, n := range ScalingSMs {
		if n < spec.SMs {
			out = append(out, n)
		}
	}
	return append(out, spec.SMs)
}

func notes(spec gpu.Spec) map[string]string {
	return map[string]string{
		"method": "roofline estimate: blocks/SM from occupancy; waves = ceil(grid / (SMs x blocks/SM)); " +
			"each SM gets 1/SMs of compute and DRAM bandwidth, shared by its resident blocks; " +
			"duration = waves x max(block FLOPs, block bytes over its share) + floor",
		"efficiency": fmt.Sprintf("GEMM/conv at %.0f%% of PeakFLOPS (%.0f TFLOP/s); other ops at %.0f%% of PeakFP32 (%.0f TFLOP/s); DRAM at %.0f%% of %.2f TB/s",
			100*TensorEfficiency, spec.PeakFLOPS/1e12, 100*CUDACoreEfficiency, spec.PeakFP32/1e12, 100*MemoryEfficiency, spec.DRAMBandwidth/1e12),
		"floorUs":   fmt.Sprint(FloorUs),
		"class":     "compute if computePct >= 60 and > memoryPct; memory if memoryPct >= 60; else unknown",
		"scaling":   "linear in SMs for compute and bandwidth (pessimistic for memory-bound kernels)",
		"ignores":   "launch gaps and host overhead, L2 reuse, clocks and power, tile and pipeline efficiency, split-K, fusion beyond the op list",
		"generator": "go test ./profiler -run TestGolden -update",
		"replace":   "with a measured profile (atoll profile on the GPU) as soon as one exists",
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// round rounds x to 1/scale, so that committed profiles do not depend on
// the last bits of floating-point arithmetic (e.g. FMA on arm64).
func round(x, scale float64) float64 { return math.Round(x*scale) / scale }

// Lookup is a model's profile for spec at batch through lookup (profiles.Lookup
// or a test's); an imported model (models.Model.Weights set) that nobody has
// profiled on this GPU kind gets its roofline estimate, marked Source
// estimated, so the simulator can time it at once (the GPU backends refuse
// estimated profiles and say to run atoll profile).
func Lookup(spec gpu.Spec, m models.Model, batch int, lookup func(gpu, model string, batch int, phase string) (*profiles.Profile, error)) (*profiles.Profile, error) {
	p, err := lookup(spec.Name, m.Name(), batch, "")
	if err == nil || m.Weights() == nil {
		return p, err
	}
	g, gerr := m.Graph(batch)
	if gerr != nil {
		return nil, gerr
	}
	return Estimate(spec, m.Name(), batch, g.Layers)
}
