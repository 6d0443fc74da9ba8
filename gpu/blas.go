package gpu

import (
	"errors"
	"fmt"
	"strings"
)

// ElemType is the element type of a Matmul operand.
type ElemType uint8

const (
	BF16 ElemType = iota + 1
	F16
	F32
)

func (t ElemType) String() string {
	switch t {
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	case F32:
		return "f32"
	}
	return fmt.Sprintf("elem(%d)", t)
}

// Epilogue is the activation a Matmul applies to its result.
type Epilogue uint8

const (
	EpiNone Epilogue = iota
	EpiReLU
	EpiGELU // tanh approximation, as kernels' ActGELU
)

// Matmul describes one (batched) matrix product in row-major terms:
//
//	D[b][M][N] = act(op(A[b])[M][K] · op(B[b])[K][N] + bias[N] + C[b][M][N])
//
// where op(A) is A stored [M][K], or [K][M] when TransA; op(B) is B stored
// [K][N], or [N][K] when TransB. bias (of BiasType: F32, the zero value, or
// 16-bit) is added when Bias, C (of D's
// type; the launch may pass D itself) when Accumulate. Batches sit Stride*
// elements apart; a stride of 0 with Batch > 1 is refused. A BLAS may
// refuse a valid product (cuBLASLt: a bias not of the output's type).
type Matmul struct {
	M, N, K          int
	TransA, TransB   bool
	Batch            int // 0 or 1: one product
	StrideA, StrideB int64
	StrideD          int64
	In, Out          ElemType // In: BF16 or F16; Out: In or F32
	Bias             bool
	BiasType         ElemType // 0 (f32) or F32, BF16, F16
	Act              Epilogue
	Accumulate       bool
}

// Check reports why m is not a product a BLAS accepts.
func (m Matmul) Check() error {
	var bad []string
	if m.M <= 0 || m.N <= 0 || m.K <= 0 || m.Batch < 0 {
		bad = append(bad, "M, N and K must be positive and Batch non-negative")
	}
	if m.In != BF16 && m.In != F16 {
		bad = append(bad, "inputs must be bf16 or f16")
	}
	if m.Out != m.In && m.Out != F32 {
		bad = append(bad, "the output must be of the inputs' type or f32")
	}
	if m.BiasType != 0 && m.BiasType != F32 && m.BiasType != BF16 && m.BiasType != F16 {
		bad = append(bad, fmt.Sprintf("unknown bias type %d", m.BiasType))
	}
	if m.Act > EpiGELU {
		bad = append(bad, fmt.Sprintf("unknown epilogue %d", m.Act))
	}
	if m.Batch > 1 && (m.StrideA <= 0 || m.StrideB <= 0 || m.StrideD <= 0) {
		bad = append(bad, "a batched product needs positive strides")
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: matmul %s: %s", ErrInvalidLaunch, m, strings.Join(bad, "; "))
	}
	return nil
}

func (m Matmul) String() string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	s := fmt.Sprintf("M=%d N=%d K=%d %s%s %s->%s", m.M, m.N, m.K, t(m.TransA), t(m.TransB), m.In, m.Out)
	if m.Batch > 1 {
		s += fmt.Sprintf(" batch=%d", m.Batch)
	}
	if m.Bias {
		s += " +bias"
		if m.BiasType != 0 && m.BiasType != F32 {
			s += "(" + m.BiasType.String() + ")"
		}
	}
	if m.Accumulate {
		s += " +C"
	}
	switch m.Act {
	case EpiReLU:
		s += " relu"
	case EpiGELU:
		s += " gelu"
	}
	return s
}

// MatmulArgs packs a Matmul launch's operands, in the order every BLAS
// device reads them: A, B, D, bias (0 without Bias), C (0 without
// Accumulate).
func MatmulArgs(a *Args, A, B, D, bias, C Ptr) {
	a.Reset()
	a.Ptr(A).Ptr(B).Ptr(D).Ptr(bias).Ptr(C)
}

// MatmulArgBytes is the size of MatmulArgs's packing.
const MatmulArgBytes = 5 * 8

// BLAS is implemented by devices that run matrix products with a vendor
// library (gpu/cuda: cuBLASLt, loaded at run time; gpu/sim when configured
// to, timing them by Launch.Cost like any kernel). Matmul chooses how to
// run m once and returns a Func for it: a Plain launch of that Func with
// MatmulArgs computes m on the launch's stream (its Grid, Block and
// SharedMem serve schedulers and the simulator only; the library picks its
// own). Such a launch is one non-preemptible unit of work: it has no Reset,
// Resumable or Padded form. A device whose library cannot run m returns an
// error wrapping errors.ErrUnsupported; callers then use their own kernels.
type BLAS interface {
	Matmul(m Matmul) (Func, error)
	// BLASName names the library and its version ("cuBLASLt 13.0.2").
	BLASName() string
}

// MatmulOn asks dev for m's Func when dev is a BLAS, and answers
// errors.ErrUnsupported otherwise. Device wrappers forward Matmul with it.
func MatmulOn(dev Device, m Matmul) (Func, error) {
	b, ok := dev.(BLAS)
	if !ok {
		return 0, fmt.Errorf("%w: the %s device has no BLAS", errors.ErrUnsupported, dev.Info().Backend)
	}
	return b.Matmul(m)
}

// BLASNameOf is dev's BLASName, or "none" when dev is not a BLAS.
func BLASNameOf(dev Device) string {
	if b, ok := dev.(BLAS); ok {
		return b.BLASName()
	}
	return "none"
}
