package gpu

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Spec describes a GPU model: the occupancy limits of one SM and the peaks
// the roofline needs. The simulator runs any Spec; the CUDA backend fills one
// from the driver's attributes (and the peaks from the table below, by name).
type Spec struct {
	Name string // short key: "H100-SXM", "H200", "A100-SXM"
	SMs  int

	// Per SM.
	MaxThreadsPerSM   int
	MaxBlocksPerSM    int
	RegistersPerSM    int
	SharedMemPerSM    int // bytes usable by blocks
	SharedMemReserved int // bytes the driver reserves per resident block (1 KiB since Ampere)

	// Per block.
	MaxThreadsPerBlock   int
	MaxSharedMemPerBlock int // bytes, opt-in maximum
	MaxRegistersPerThrd  int

	// Allocation granularities used by the occupancy calculation.
	WarpSize          int
	RegisterAllocUnit int // registers, allocated per warp
	SharedMemAlloc    int // bytes

	// Peaks. The simulator shares these among co-resident blocks.
	DRAMBandwidth float64 // bytes/s, sustained (measured copy rate where known)
	PeakFLOPS     float64 // FLOP/s, dense bf16 on tensor cores (sustained where measured)
	PeakFP32      float64 // FLOP/s, plain fp32 (CUDA cores)

	// LaunchLatency is the time from a host launch call to the kernel's
	// first block being eligible to run.
	LaunchLatency time.Duration

	// PartitionStep is the granularity of SM partitions (green contexts):
	// a partition's SMs are a multiple of it (8 on sm_90, 2 on sm_80).
	PartitionStep int
}

// CheckPartition says whether a partition of sms SMs can be made on spec:
// a positive multiple of PartitionStep, fewer than all SMs.
func CheckPartition(spec Spec, sms int) error {
	step := max(spec.PartitionStep, 1)
	if sms < step || sms >= spec.SMs || sms%step != 0 {
		return fmt.Errorf("%w: an SM partition of %d SMs on %s: want a multiple of %d in [%d, %d)",
			ErrInvalidLaunch, sms, spec.Name, step, step, spec.SMs)
	}
	return nil
}

// PartitionFloor rounds sms down to a partition size spec can make (0 if
// none is that small).
func PartitionFloor(spec Spec, sms int) int {
	step := max(spec.PartitionStep, 1)
	sms = min(sms, spec.SMs-1)
	return max(sms/step*step, 0)
}

// Hopper and Ampere limits shared by the built-in specs.
func hopperSM(s Spec) Spec {
	s.MaxThreadsPerSM = 2048
	s.MaxBlocksPerSM = 32
	s.RegistersPerSM = 65536
	s.SharedMemPerSM = 228 << 10
	s.SharedMemReserved = 1 << 10
	s.MaxThreadsPerBlock = 1024
	s.MaxSharedMemPerBlock = 227 << 10
	s.MaxRegistersPerThrd = 255
	s.WarpSize = 32
	s.RegisterAllocUnit = 256
	s.SharedMemAlloc = 128
	s.PartitionStep = 8
	return s
}

// Built-in GPU descriptions. Peaks are the sustained rates seen on this
// workplace's machines where measured (see docs/simulator.md), datasheet
// otherwise.
var (
	H100SXM = hopperSM(Spec{
		Name: "H100-SXM", SMs: 132,
		DRAMBandwidth: 3.0e12, // measured D2D copy, read+write
		PeakFLOPS:     798e12, // measured bf16 8192^3 torch.matmul
		PeakFP32:      67e12,
		LaunchLatency: 4 * time.Microsecond,
	})
	H200 = hopperSM(Spec{
		Name: "H200", SMs: 132,
		DRAMBandwidth: 4.3e12,
		PeakFLOPS:     788e12,
		PeakFP32:      67e12,
		LaunchLatency: 4 * time.Microsecond,
	})
	A100SXM = Spec{
		Name: "A100-SXM", SMs: 108,
		MaxThreadsPerSM: 2048, MaxBlocksPerSM: 32, RegistersPerSM: 65536,
		SharedMemPerSM: 164 << 10, SharedMemReserved: 1 << 10,
		MaxThreadsPerBlock: 1024, MaxSharedMemPerBlock: 163 << 10, MaxRegistersPerThrd: 255,
		WarpSize: 32, RegisterAllocUnit: 256, SharedMemAlloc: 128,
		DRAMBandwidth: 2.0e12, PeakFLOPS: 312e12, PeakFP32: 19.5e12,
		LaunchLatency: 5 * time.Microsecond,
		PartitionStep: 2,
	}
)

var specs = map[string]Spec{
	strings.ToLower(H100SXM.Name): H100SXM,
	strings.ToLower(H200.Name):    H200,
	strings.ToLower(A100SXM.Name): A100SXM,
}

// Specs lists the names of the built-in GPU descriptions.
func Specs() []string {
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	return names
}

// LookupSpec finds a built-in description by name, case-insensitively.
// Device names as the driver reports them ("NVIDIA H100 80GB HBM3",
// "NVIDIA H200") are matched too.
func LookupSpec(name string) (Spec, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if s, ok := specs[n]; ok {
		return s, nil
	}
	switch {
	case strings.Contains(n, "h200"):
		return H200, nil
	case strings.Contains(n, "h100"):
		return H100SXM, nil
	case strings.Contains(n, "a100"):
		return A100SXM, nil
	}
	return Spec{}, fmt.Errorf("gpu: unknown GPU %q (known: %s)", name, strings.Join(Specs(), ", "))
}

// Validate checks that the description is usable.
func (s Spec) Validate() error {
	bad := func(f string) error { return fmt.Errorf("gpu: spec %q: %s must be positive", s.Name, f) }
	switch {
	case s.SMs <= 0:
		return bad("SMs")
	case s.MaxThreadsPerSM <= 0:
		return bad("MaxThreadsPerSM")
	case s.MaxBlocksPerSM <= 0:
		return bad("MaxBlocksPerSM")
	case s.RegistersPerSM <= 0:
		return bad("RegistersPerSM")
	case s.SharedMemPerSM <= 0:
		return bad("SharedMemPerSM")
	case s.MaxThreadsPerBlock <= 0:
		return bad("MaxThreadsPerBlock")
	case s.WarpSize <= 0:
		return bad("WarpSize")
	case s.DRAMBandwidth <= 0:
		return bad("DRAMBandwidth")
	case s.PeakFLOPS <= 0:
		return bad("PeakFLOPS")
	}
	return nil
}

// Occupancy is the number of blocks of the given shape that fit on one SM
// at once, and which limit binds. It returns an error wrapping
// ErrInvalidLaunch when not even one block fits.
func (s Spec) Occupancy(threadsPerBlock, registersPerThread, sharedMemPerBlock int) (blocks int, limit string, err error) {
	if threadsPerBlock <= 0 || threadsPerBlock > s.MaxThreadsPerBlock {
		return 0, "", fmt.Errorf("%w: %d threads per block (this GPU allows 1..%d)", ErrInvalidLaunch, threadsPerBlock, s.MaxThreadsPerBlock)
	}
	if registersPerThread < 0 || (s.MaxRegistersPerThrd > 0 && registersPerThread > s.MaxRegistersPerThrd) {
		return 0, "", fmt.Errorf("%w: %d registers per thread (this GPU allows at most %d)", ErrInvalidLaunch, registersPerThread, s.MaxRegistersPerThrd)
	}
	maxSmem := s.MaxSharedMemPerBlock
	if maxSmem == 0 {
		maxSmem = s.SharedMemPerSM
	}
	if sharedMemPerBlock < 0 || sharedMemPerBlock > maxSmem {
		return 0, "", fmt.Errorf("%w: %d bytes of shared memory per block (this GPU allows at most %d)", ErrInvalidLaunch, sharedMemPerBlock, maxSmem)
	}
	warps := ceilDiv(threadsPerBlock, s.WarpSize)
	blocks, limit = s.MaxBlocksPerSM, "blocks"
	if b := (s.MaxThreadsPerSM / s.WarpSize) / warps; b < blocks {
		blocks, limit = b, "threads"
	}
	if registersPerThread > 0 {
		unit := max(s.RegisterAllocUnit, 1)
		perWarp := ceilDiv(registersPerThread*s.WarpSize, unit) * unit
		if b := (s.RegistersPerSM / perWarp) / warps; b < blocks {
			blocks, limit = b, "registers"
		}
	}
	if sharedMemPerBlock > 0 {
		unit := max(s.SharedMemAlloc, 1)
		per := ceilDiv(sharedMemPerBlock, unit)*unit + s.SharedMemReserved
		if b := s.SharedMemPerSM / per; b < blocks {
			blocks, limit = b, "shared memory"
		}
	}
	if blocks < 1 {
		return 0, limit, fmt.Errorf("%w: a block of %d threads, %d registers/thread, %d B shared memory does not fit on one SM (%s)",
			ErrInvalidLaunch, threadsPerBlock, registersPerThread, sharedMemPerBlock, limit)
	}
	return blocks, limit, nil
}

// SMsNeeded is Orion's "SMs needed": ceil(grid / blocks per SM), capped at
// the SM count.
func (s Spec) SMsNeeded(gridBlocks, blocksPerSM int) int {
	if blocksPerSM <= 0 {
		return s.SMs
	}
	return min(ceilDiv(gridBlocks, blocksPerSM), s.SMs)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
