package profiler

import (
	"fmt"
	"strings"

	"atoll/gpu"
	"atoll/profiles"
)

// ApplyLaunches records in p's vendor kernels (tagged blas) the launches
// their calls made, from one pass of the model under Nsight Compute
// (ParseNCU; the command NCUCommand prints, or tools/gpu/vendor-launches.sh):
// each blas kernel's Launches become the products, helpers and gathers its
// call launched, with their geometry and share of the call's time. Nothing
// else in p changes, and p changes only on success.
//
// The driver does not say which launch belongs to which call, so the
// launches are matched by kind, in order: a function named *_plain is
// atoll's own kernel for one kernel not tagged blas; one named atoll_* is
// a gather or scatter of a vendor convolution (LaunchRole); one named
// cublasLt::* is the library's helper after a product (a split-K
// reduction); any other is a vendor product. Between two of atoll's own
// kernels, the run of blas kernels and the run of launches must hold as
// many products as kernels, and kernel i gets product i with the helpers
// that belong to it. Errors (wrapping ErrNCU) name the kernel and the
// launch where the pass and the profile part.
func ApplyLaunches(p *profiles.Profile, launches []NCULaunch, file string) error {
	for _, l := range launches {
		for _, m := range []string{MetricDuration, MetricGrid, MetricBlock, MetricRegisters, MetricSharedMem} {
			if !l.Has[m] {
				return fmt.Errorf("%w: %s has no %s (collect the CSV with tools/gpu/vendor-launches.sh, or the command atoll profile --print-ncu-command prints)", ErrNCU, l.at(file), m)
			}
		}
	}
	spec, err := gpu.LookupSpec(p.GPU)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNCU, err)
	}
	ks := make([]profiles.Kernel, len(p.Kernels))
	copy(ks, p.Kernels)
	j := 0
	for i := 0; i < len(ks); {
		if !ks[i].HasTag(profiles.TagBLAS) {
			if j == len(launches) {
				return fmt.Errorf("%w: the CSV ends before kernels[%d] (%s) of %s bs%d: it is not one whole pass of the model", ErrNCU, i, ks[i].Name, p.Model, p.Batch)
			}
			if l := launches[j]; LaunchRole(l.Func()) != RoleOwn {
				return fmt.Errorf("%w: %s is a vendor launch where kernels[%d] (%s, not tagged %s) should run atoll's own kernel: the profile was measured without cuBLASLt, or the CSV is of another model or batch (profile and collect both the same way)",
					ErrNCU, l.at(file), i, ks[i].Name, profiles.TagBLAS)
			}
			j++
			i++
			continue
		}
		// The run of blas kernels [i, end) and its launches [j, stop).
		end := i
		for end < len(ks) && ks[end].HasTag(profiles.TagBLAS) {
			end++
		}
		stop := j
		for stop < len(launches) && LaunchRole(launches[stop].Func()) != RoleOwn {
			stop++
		}
		groups, err := splitCalls(launches[j:stop], end-i, spec.SharedMemReserved)
		if err != nil {
			at := fmt.Sprintf("the CSV's launches from line %d", lineOf(launches, j))
			if file != "" {
				at = file + ": " + at
			}
			return fmt.Errorf("%w: %s, for kernels[%d] (%s) to kernels[%d] (%s) of %s bs%d: %v", ErrNCU, at, i, ks[i].Name, end-1, ks[end-1].Name, p.Model, p.Batch, err)
		}
		for g, calls := range groups {
			ks[i+g].Launches = calls
		}
		i, j = end, stop
	}
	if j != len(launches) {
		return fmt.Errorf("%w: %s and %d more come after the model's last kernel: the CSV holds more than one pass of %s bs%d (collect it with --ncu-pass)", ErrNCU, launches[j].at(file), len(launches)-j-1, p.Model, p.Batch)
	}
	p.Kernels = ks
	if p.Notes == nil {
		p.Notes = map[string]string{}
	}
	src := "an Nsight Compute CSV"
	if file != "" {
		src += " (" + file + ")"
	}
	p.Notes["launches"] = fmt.Sprintf("the launches of each vendor call (tagged %s) from %s of one pass: geometry as launched, share of the call's time from ncu's durations (serialised, base clocks), computePct and memoryPct from ncu's sm__throughput and gpu__compute_memory_throughput where collected", profiles.TagBLAS, src)
	return nil
}

func lineOf(ls []NCULaunch, j int) int {
	if j < len(ls) {
		return ls[j].Line
	}
	return 0
}

// Role is what a launch of a vendor call's pass is (LaunchRole).
type Role uint8

const (
	RoleOwn     Role = iota // atoll's own kernel for a kernel not tagged blas (*_plain)
	RoleProduct             // a vendor product (cuBLASLt's GEMM)
	RoleBefore              // a gather before its product (atoll_im2col*, atoll_padrows)
	RoleAfter               // a scatter or library helper after its product (atoll_col2im*, atoll_unpadrows, cublasLt::*)
)

// LaunchRole classifies a launch by its function's name: the kernel
// library names its kernels' plain form KERNEL_plain, the convolution's
// gathers and scatters atoll_* (gpu/cuda's conv.go), and cuBLASLt its
// helpers cublasLt::*; any other function is a vendor product.
func LaunchRole(function string) Role {
	switch {
	case strings.HasSuffix(function, "_plain"):
		return RoleOwn
	case strings.HasPrefix(function, "atoll_col2im"), function == "atoll_unpadrows", strings.HasPrefix(function, "cublasLt::"):
		return RoleAfter
	case strings.HasPrefix(function, "atoll_"):
		return RoleBefore
	}
	return RoleProduct
}

// splitCalls cuts a run of launches into n calls of one product each: the
// gathers before a product and the helpers and scatters after it go with it.
func splitCalls(ls []NCULaunch, n, reserved int) ([][]profiles.Launch, error) {
	var products []int
	for k, l := range ls {
		if LaunchRole(l.Func()) == RoleProduct {
			products = append(products, k)
		}
	}
	if len(products) != n {
		names := make([]string, 0, min(len(ls), 8))
		for _, l := range ls[:min(len(ls), 8)] {
			names = append(names, shortName(l.Func()))
		}
		more := ""
		if len(ls) > 8 {
			more = fmt.Sprintf(" and %d more", len(ls)-8)
		}
		return nil, fmt.Errorf("%d vendor products among its %d launches (%s%s) for %d kernels tagged %s: the CSV is not one pass of this model and batch as the profile ran it (collect it with --ncu-pass), or a call made several products, which atoll cannot assign yet",
			len(products), len(ls), strings.Join(names, ", "), more, n, profiles.TagBLAS)
	}
	// A gather opens the next call once this one has its product, and so
	// does a product; helpers and scatters close the call of the product
	// before them.
	calls := make([][]profiles.Launch, n)
	g, has := 0, false // the call being filled, and whether it has its product
	first := 0         // its first launch
	for k, l := range ls {
		role := LaunchRole(l.Func())
		if has && (role == RoleBefore || role == RoleProduct) {
			calls[g] = vendorLaunches(ls[first:k], reserved)
			g, has, first = g+1, false, k
		}
		switch role {
		case RoleProduct:
			has = true
		case RoleAfter:
			if !has {
				return nil, fmt.Errorf("line %d: %s comes after a product, but none precedes it in its call", l.Line, l.Func())
			}
		}
	}
	if !has {
		l := ls[len(ls)-1]
		return nil, fmt.Errorf("line %d: %s gathers for a product that does not follow", l.Line, l.Func())
	}
	calls[g] = vendorLaunches(ls[first:], reserved)
	return calls, nil
}

// vendorLaunches are one call's launches as a profile records them.
// Nsight Compute's shared memory per block includes what the driver
// reserves for each block (reserved); the profile's, as the driver
// reports a function's, does not.
func vendorLaunches(calls []NCULaunch, reserved int) []profiles.Launch {
	total := 0.0
	for _, l := range calls {
		total += l.DurationUs
	}
	out := make([]profiles.Launch, len(calls))
	for k, l := range calls {
		out[k] = profiles.Launch{Function: shortName(l.Func()), Grid: l.Grid, Block: l.Block, Registers: l.Registers, SharedMem: max(l.SharedMem-reserved, 0),
			Share: max(round(l.DurationUs/total, 1e4), 1e-4), ComputePct: round(l.SMPct, 100), MemoryPct: round(l.MemoryPct, 100)}
	}
	return out
}

// shortName is a function's name without its template arguments.
func shortName(fn string) string {
	if i := strings.IndexByte(fn, '<'); i > 0 {
		return fn[:i]
	}
	return fn
}
