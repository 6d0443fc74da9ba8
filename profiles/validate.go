package profiles

import (
	"fmt"
	"math"
	"strings"
	"unicode"

	"atoll/gpu"
)

// CUDA launch limits (compute capability 3.0 and later).
const (
	maxGridX   = 1<<31 - 1
	maxGridYZ  = 65535
	maxBlockXY = 1024
	maxBlockZ  = 64
	maxBatch   = 1 << 20
)

// Validate checks every field of the profile against the format's rules
// (docs/profiles.md). The error is an *Error wrapping ErrInvalid or
// ErrVersion, naming the first offending field; it carries no line number
// (Parse adds those).
func (p *Profile) Validate() error {
	if p == nil {
		return &Error{Kernel: -1, Msg: "nil profile", Err: ErrInvalid}
	}
	if e := p.validate(); e != nil {
		return e
	}
	return nil
}

// validate returns nil or the first problem.
func (p *Profile) validate() *Error {
	bad := func(path, format string, args ...any) *Error {
		return &Error{Path: path, Kernel: -1, Msg: fmt.Sprintf(format, args...), Err: ErrInvalid}
	}
	if p.APIVersion != APIVersion {
		return &Error{Path: "apiVersion", Kernel: -1, Err: ErrVersion,
			Msg: fmt.Sprintf("%q is not supported; this build reads %q (regenerate the profile with this build's `atoll profile`)", p.APIVersion, APIVersion)}
	}
	spec, err := gpu.LookupSpec(p.GPU)
	if err != nil {
		return bad("gpu", "unknown GPU %q; known: %s", p.GPU, strings.Join(gpu.Specs(), ", "))
	}
	if p.GPU != spec.Name {
		return bad("gpu", "%q is not a spec name; write %q", p.GPU, spec.Name)
	}
	if !isName(p.Model) {
		return bad("model", "must be a zoo name (non-empty; letters, digits, '.', '_', '-'), got %q", p.Model)
	}
	if p.Batch < 1 || p.Batch > maxBatch {
		return bad("batch", "must be in 1..%d, got %d", maxBatch, p.Batch)
	}
	if p.Phase != PhaseInference && p.Phase != PhaseTraining {
		return bad("phase", "must be %q or %q, got %q", PhaseInference, PhaseTraining, p.Phase)
	}
	switch p.Source {
	case SourceEstimated, SourceMeasured, SourceNcu:
	default:
		return bad("source", "must be %q, %q or %q, got %q", SourceEstimated, SourceMeasured, SourceNcu, p.Source)
	}
	for k := range p.Notes {
		if k == "" {
			return bad("notes", "empty key")
		}
	}
	if len(p.Kernels) == 0 {
		return bad("kernels", "a profile needs at least one kernel")
	}
	for i := range p.Kernels {
		if e := p.Kernels[i].validate(spec); e != nil {
			e.Kernel = i
			e.KernelName = p.Kernels[i].Name
			if e.Path == "" {
				e.Path = fmt.Sprintf("kernels[%d]", i)
			} else {
				e.Path = fmt.Sprintf("kernels[%d].%s", i, e.Path)
			}
			return e
		}
	}
	return nil
}

func (k *Kernel) validate(spec gpu.Spec) *Error {
	bad := func(path, format string, args ...any) *Error {
		return &Error{Path: path, Kernel: -1, Msg: fmt.Sprintf(format, args...), Err: ErrInvalid}
	}
	if strings.TrimSpace(k.Name) == "" {
		return bad("name", "must not be empty")
	}
	if strings.TrimSpace(k.Kernel) == "" {
		return bad("kernel", "must not be empty (the CUDA function family, e.g. \"gemm_bf16_64x64\")")
	}
	for d, lim := range [3]int{maxGridX, maxGridYZ, maxGridYZ} {
		if v := k.Grid[d]; v < 1 || v > lim {
			return bad(fmt.Sprintf("grid[%d]", d), "must be in 1..%d, got %d", lim, v)
		}
	}
	for d, lim := range [3]int{maxBlockXY, maxBlockXY, maxBlockZ} {
		if v := k.Block[d]; v < 1 || v > lim {
			return bad(fmt.Sprintf("block[%d]", d), "must be in 1..%d, got %d", lim, v)
		}
	}
	threads := k.Block[0] * k.Block[1] * k.Block[2]
	if threads > spec.MaxThreadsPerBlock {
		return bad("block", "%d threads per block, %s allows at most %d", threads, spec.Name, spec.MaxThreadsPerBlock)
	}
	if k.Registers < 0 || k.Registers > 255 {
		return bad("registers", "must be in 0..255, got %d", k.Registers)
	}
	if k.SharedMem < 0 {
		return bad("sharedMem", "must be >= 0, got %d", k.SharedMem)
	}
	if k.SharedMem > spec.MaxSharedMemPerBlock {
		return bad("sharedMem", "%d bytes per block, %s allows at most %d", k.SharedMem, spec.Name, spec.MaxSharedMemPerBlock)
	}
	if _, limit, err := spec.Occupancy(threads, k.Registers, k.SharedMem); err != nil {
		path := map[string]string{"registers": "registers", "shared memory": "sharedMem"}[limit]
		return bad(path, "the launch does not fit one SM of %s: %v", spec.Name, err)
	}
	if !(k.DurationUs > 0) || math.IsInf(k.DurationUs, 0) {
		return bad("durationUs", "must be > 0, got %v", k.DurationUs)
	}
	if !(k.SpreadUs >= 0) || math.IsInf(k.SpreadUs, 0) {
		return bad("spreadUs", "must be >= 0, got %v", k.SpreadUs)
	}
	if !(k.GraphUs >= 0) || math.IsInf(k.GraphUs, 0) {
		return bad("graphUs", "must be >= 0, got %v", k.GraphUs)
	}
	if !(k.FLOPs >= 0) || math.IsInf(k.FLOPs, 0) {
		return bad("flops", "must be >= 0, got %v", k.FLOPs)
	}
	if !(k.Bytes >= 0) || math.IsInf(k.Bytes, 0) {
		return bad("bytes", "must be >= 0, got %v", k.Bytes)
	}
	if !(k.ComputePct >= 0 && k.ComputePct <= 100) {
		return bad("computePct", "must be in [0,100], got %v", k.ComputePct)
	}
	if !(k.MemoryPct >= 0 && k.MemoryPct <= 100) {
		return bad("memoryPct", "must be in [0,100], got %v", k.MemoryPct)
	}
	switch k.Class {
	case ClassCompute, ClassMemory, ClassUnknown:
	default:
		return bad("class", "must be %q, %q or %q, got %q", ClassCompute, ClassMemory, ClassUnknown, k.Class)
	}
	if k.SMsNeeded < 1 || k.SMsNeeded > spec.SMs {
		return bad("smsNeeded", "must be in 1..%d (the SMs of %s), got %d", spec.SMs, spec.Name, k.SMsNeeded)
	}
	prev := 0
	for j, pt := range k.Scaling {
		if pt.SMs <= prev || pt.SMs > spec.SMs {
			return bad(fmt.Sprintf("scaling[%d].sms", j), "must increase and be in 1..%d, got %d after %d", spec.SMs, pt.SMs, prev)
		}
		prev = pt.SMs
		if !(pt.DurationUs > 0) || math.IsInf(pt.DurationUs, 0) {
			return bad(fmt.Sprintf("scaling[%d].durationUs", j), "must be > 0, got %v", pt.DurationUs)
		}
	}
	for j, t := range k.Tags {
		if strings.TrimSpace(t) == "" {
			return bad(fmt.Sprintf("tags[%d]", j), "must not be empty")
		}
	}
	if len(k.Launches) > 0 && !k.HasTag(TagBLAS) {
		return bad("launches", "only a kernel tagged %q (a vendor call) has launches of its own", TagBLAS)
	}
	sum := 0.0
	for j, l := range k.Launches {
		at := func(f string) string { return fmt.Sprintf("launches[%d].%s", j, f) }
		switch {
		case strings.TrimSpace(l.Function) == "":
			return bad(at("function"), "must not be empty")
		case l.Grid < 1 || l.Grid > maxGridX:
			return bad(at("grid"), "must be in 1..%d, got %d", maxGridX, l.Grid)
		case l.Block < 1 || l.Block > spec.MaxThreadsPerBlock:
			return bad(at("block"), "must be in 1..%d (threads per block on %s), got %d", spec.MaxThreadsPerBlock, spec.Name, l.Block)
		case l.Registers < 0 || l.Registers > 255:
			return bad(at("registers"), "must be in 0..255, got %d", l.Registers)
		case l.SharedMem < 0 || l.SharedMem > spec.MaxSharedMemPerBlock:
			return bad(at("sharedMem"), "must be in 0..%d (bytes per block on %s), got %d", spec.MaxSharedMemPerBlock, spec.Name, l.SharedMem)
		case !(l.Share > 0 && l.Share <= 1):
			return bad(at("share"), "must be in (0,1], got %v", l.Share)
		case !(l.ComputePct >= 0 && l.ComputePct <= 100):
			return bad(at("computePct"), "must be in [0,100], got %v", l.ComputePct)
		case !(l.MemoryPct >= 0 && l.MemoryPct <= 100):
			return bad(at("memoryPct"), "must be in [0,100], got %v", l.MemoryPct)
		}
		if _, limit, err := spec.Occupancy(l.Block, l.Registers, l.SharedMem); err != nil {
			return bad(at(map[string]string{"registers": "registers", "shared memory": "sharedMem"}[limit]), "the launch does not fit one SM of %s: %v", spec.Name, err)
		}
		sum += l.Share
	}
	if len(k.Launches) > 0 && math.Abs(sum-1) > LaunchShareSlack {
		return bad("launches", "the shares add up to %v, not 1", sum)
	}
	return nil
}

// LaunchShareSlack is how far from 1 a kernel's launch shares may add up
// (they are rounded when written).
const LaunchShareSlack = 0.01

// isName reports whether s can name a model in a file name.
func isName(s string) bool {
	if s == "" || len(s) > 100 {
		return false
	}
	for _, r := range s {
		if !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-')) {
			return false
		}
	}
	return s != "." && s != ".."
}
