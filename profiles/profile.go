package profiles

import (
	"slices"
	"time"

	"atoll/gpu"
)

// APIVersion is the version of the profile format this package reads and
// writes. Files with another apiVersion are refused with an error naming it.
const APIVersion = "atoll/v1"

// Kernel classes, as Orion uses them.
const (
	ClassCompute = "compute" // compute-bound
	ClassMemory  = "memory"  // memory-bound
	ClassUnknown = "unknown" // neither dominates; Orion treats it as compatible with both
)

// Phases of a profile.
const (
	PhaseInference = "inference" // one request
	PhaseTraining  = "training"  // one training step
)

// Sources of a profile's numbers.
const (
	SourceEstimated = "estimated" // roofline estimate from FLOPs/bytes and the GPU's peaks
	SourceMeasured  = "measured"  // atoll profile: CUDA events on a real GPU
	SourceNcu       = "ncu"       // imported from Nsight Compute
)

// Profile is the per-kernel record of one model (at one batch size, in one
// phase) running alone on one GPU. The kernels are in launch order: kernel i
// of the profile describes launch i of one request (or one BE iteration).
type Profile struct {
	APIVersion string `json:"apiVersion"`
	GPU        string `json:"gpu"`   // spec name, e.g. "H100-SXM"
	Model      string `json:"model"` // zoo name, e.g. "resnet50"
	Batch      int    `json:"batch"`
	Phase      string `json:"phase"`  // PhaseInference or PhaseTraining
	Source     string `json:"source"` // SourceEstimated, SourceMeasured or SourceNcu
	// Device facts where measured: driver version, clocks seen, date, the
	// exact command. Free-form; shown by `atoll profile show`.
	Device  string            `json:"device,omitempty"`
	Notes   map[string]string `json:"notes,omitempty"`
	Kernels []Kernel          `json:"kernels"`
}

// Kernel is one launch of the model.
type Kernel struct {
	Name       string  `json:"name"`            // the model's layer name, e.g. "layer2.0.conv1"
	Kernel     string  `json:"kernel"`          // the CUDA function family (kernels.Op.Kernel), e.g. "conv2d_bf16_64x64"
	Shape      string  `json:"shape,omitempty"` // kernels.Op.Shape; checked against the model when present
	Grid       [3]int  `json:"grid"`
	Block      [3]int  `json:"block"`
	Registers  int     `json:"registers"`  // per thread
	SharedMem  int     `json:"sharedMem"`  // bytes per block (static + dynamic)
	DurationUs float64 `json:"durationUs"` // median, alone
	SpreadUs   float64 `json:"spreadUs,omitempty"`
	// GraphUs is the kernel's median duration inside a graph of the whole
	// pass with no event between kernels, as an HP request's graph runs
	// it (atoll profile --graph-passes): zero when not measured.
	GraphUs    float64 `json:"graphUs,omitempty"`
	FLOPs      float64 `json:"flops"`
	Bytes      float64 `json:"bytes"`
	ComputePct float64 `json:"computePct"` // achieved % of the SM issue (or tensor) peak
	MemoryPct  float64 `json:"memoryPct"`  // achieved % of DRAM bandwidth
	Class      string  `json:"class"`
	SMsNeeded  int     `json:"smsNeeded"`
	Scaling    []Point `json:"scaling,omitempty"` // duration at a given SM share (padding)
	// Partition is the plain launch's duration confined to an SM partition
	// (a green context) of each size, the last point the whole GPU.
	// Measured for vendor-library kernels (TagBLAS), whose grid the driver
	// does not report: their SMsNeeded then comes from it (PartitionSMs).
	Partition []Point `json:"partition,omitempty"`
	// Launches are, for a kernel tagged blas, the launches its vendor call
	// made on the GPU, in order, as Nsight Compute saw them (atoll profile
	// --launches): the library's products and atoll's gathers and scatters
	// around them, each with its geometry and share of the call's time.
	// The simulator runs the kernel's plain form as these, one after
	// another; without them, as one launch of the kernel's own geometry
	// (the geometry of atoll's kernel for the op, which its other forms use).
	Launches []Launch `json:"launches,omitempty"`
	Tags     []string `json:"tags,omitempty"`
}

// Launch is one launch of a vendor call (Kernel.Launches).
type Launch struct {
	Function  string `json:"function"` // the CUDA function, without template or parameter list
	Grid      int    `json:"grid"`     // blocks
	Block     int    `json:"block"`    // threads per block
	Registers int    `json:"registers"`
	SharedMem int    `json:"sharedMem"` // bytes per block (static + dynamic)
	// Share is its part of the call's time (Nsight Compute's durations,
	// serialised at base clocks: shares, not durations); the shares of a
	// kernel's launches add up to 1.
	Share float64 `json:"share"`
	// ComputePct and MemoryPct are its own throughputs as the kernel's
	// are (0: not measured; the kernel's apply).
	ComputePct float64 `json:"computePct,omitempty"`
	MemoryPct  float64 `json:"memoryPct,omitempty"`
}

// Point is the kernel's duration when it is confined to SMs multiprocessors.
type Point struct {
	SMs        int     `json:"sms"`
	DurationUs float64 `json:"durationUs"`
}

// TagInPlace marks a kernel that updates operands in place (an optimizer
// step): running it twice, or re-running it after part of it ran, changes
// the result. Schedulers must never launch it in Reset form, nor where a
// cut of an earlier launch would make it run again (sched enforces both).
// The profiler sets it from the model (models.Layer.InPlace).
const TagInPlace = "in-place"

// TagBLAS marks a kernel whose Plain form ran on the device's BLAS
// (cuBLASLt on a GPU; kernels.IsBLAS) when it was measured: its duration
// is the library's, and its other forms run atoll's own kernel.
const TagBLAS = "blas"

// TagBLASConv marks a TagBLAS kernel whose Plain form is a vendor
// convolution (gathers, products and scatters: several calls; a pointwise
// convolution is one product instead; kernels.BLASConv). Its launch costs
// the host more than a product's (the simulator's HostConvCost).
const TagBLASConv = "blas-conv"

// HasTag reports whether the kernel carries tag.
func (k *Kernel) HasTag(tag string) bool { return slices.Contains(k.Tags, tag) }

// InPlace reports whether the kernel carries TagInPlace.
func (k *Kernel) InPlace() bool { return k.HasTag(TagInPlace) }

// Duration is the kernel's median solo duration.
func (k *Kernel) Duration() time.Duration {
	return time.Duration(k.DurationUs * float64(time.Microsecond))
}

// GridDim and BlockDim return the shapes as gpu.Dim3.
func (k *Kernel) GridDim() gpu.Dim3  { return gpu.Dim3{X: k.Grid[0], Y: k.Grid[1], Z: k.Grid[2]} }
func (k *Kernel) BlockDim() gpu.Dim3 { return gpu.Dim3{X: k.Block[0], Y: k.Block[1], Z: k.Block[2]} }

// Cost is what the simulator needs to replay the kernel.
func (k *Kernel) Cost() gpu.Cost {
	c := gpu.Cost{
		Duration:      k.Duration(),
		FLOPs:         k.FLOPs,
		Bytes:         k.Bytes,
		ComputeFrac:   k.ComputePct / 100,
		MemoryFrac:    k.MemoryPct / 100,
		GraphDuration: time.Duration(k.GraphUs * float64(time.Microsecond)),
	}
	for _, p := range k.Partition {
		c.Partition = append(c.Partition, gpu.CostPoint{SMs: p.SMs, Duration: time.Duration(p.DurationUs * float64(time.Microsecond))})
	}
	return c
}

// VendorLaunches are the kernel's vendor launches (Launches) as a launch
// carries them (gpu.Launch.Vendor); nil without.
func (k *Kernel) VendorLaunches() []gpu.VendorLaunch {
	if len(k.Launches) == 0 {
		return nil
	}
	out := make([]gpu.VendorLaunch, len(k.Launches))
	for i, l := range k.Launches {
		out[i] = gpu.VendorLaunch{Name: l.Function, Grid: l.Grid, Block: l.Block, Registers: l.Registers, SharedMem: l.SharedMem,
			Share: l.Share, ComputeFrac: l.ComputePct / 100, MemoryFrac: l.MemoryPct / 100}
	}
	return out
}

// PartitionSlack is how much slower than on the whole GPU a kernel may run
// on the SMs PartitionSMs says it needs.
const PartitionSlack = 1.1

// PartitionSMs is the SMs the kernel needs by its Partition points: the
// smallest partition on which it runs within PartitionSlack of its
// duration on the whole GPU (the last point), or 0 without points.
func (k *Kernel) PartitionSMs() int {
	if len(k.Partition) == 0 {
		return 0
	}
	full := k.Partition[len(k.Partition)-1]
	for _, p := range k.Partition {
		if p.DurationUs > 0 && p.DurationUs <= PartitionSlack*full.DurationUs {
			return p.SMs
		}
	}
	return full.SMs
}

// Total is the sum of the kernels' solo durations.
func (p *Profile) Total() time.Duration {
	var d time.Duration
	for i := range p.Kernels {
		d += p.Kernels[i].Duration()
	}
	return d
}
