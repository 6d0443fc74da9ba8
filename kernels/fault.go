package kernels

import (
	"fmt"

	"atoll/gpu"
)

// FaultKind is how a Fault kernel faults.
type FaultKind uint8

const (
	FaultTrap    FaultKind = iota // a trap instruction (__trap)
	FaultAddress                  // a store 2^40 bytes past its buffer (an illegal address)
)

func (k FaultKind) String() string {
	switch k {
	case FaultTrap:
		return "trap"
	case FaultAddress:
		return "address"
	}
	return fmt.Sprintf("fault(%d)", k)
}

// ParseFaultKind is the inverse of FaultKind.String.
func ParseFaultKind(s string) (FaultKind, error) {
	for _, k := range []FaultKind{FaultTrap, FaultAddress} {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown fault kind %q (want trap or address)", ErrShape, s)
}

// Fault is a kernel that faults on purpose, for fault drills: on a GPU it
// leaves the CUDA context's sticky error, so every later call of the
// process fails, as a faulting BE kernel would (the simulator models the
// same for functions named sim.FaultPrefix + ..., which Kernel's names are). One logical block of 32 threads; its one-element buffer
// is never written. Never part of a model; it has no CPU reference.
type Fault struct{ Kind FaultKind }

func (f Fault) Kernel() string { return "fault_" + f.Kind.String() }
func (f Fault) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(1), Block: gpu.D1(32), Registers: 16}
}
func (f Fault) FLOPs() float64 { return 0 }
func (f Fault) Bytes() float64 { return 0 }
func (f Fault) Shape() string  { return "kind=" + f.Kind.String() }
