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
	M, N, K        int
	TransA, TransB bool
	Batch          int // 0 or 1: one product
	// LdA is the distance between A's stored rows in elements (0: packed,
	// K, or M when TransA); rows may be padded for alignment.
	LdA              int
	StrideA, StrideB int64
	StrideD          int64
	In, Out          ElemType // In: BF16 or F16; Out: In or F32
	Bias             bool
	BiasType         ElemType // 0 (f32) or F32, BF16, F16
	Act              Epilogue
	Accumulate       bool
}

// VendorMatmulPrefix and VendorConvPrefix begin the names of functions that
// stand for a vendor product and a vendor convolution on a device that
// times launches by their Cost (the simulator: its BLAS names its Funcs so,
// and sched.ProfileBinder resolves a profile's BLAS-tagged kernels so), which
// then charges a launch of one the host time of such a call.
const (
	VendorMatmulPrefix = "cublasLt "
	VendorConvPrefix   = "cublasLt conv "
)

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
	if packed := m.K; m.LdA != 0 && ((m.TransA && m.LdA < m.M) || (!m.TransA && m.LdA < packed)) {
		bad = append(bad, "LdA must be 0 or at least a stored row of A")
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
	if m.LdA != 0 {
		s += fmt.Sprintf(" lda=%d", m.LdA)
	}
	if m.Batch > 1 {
		s += fmt.Sprintf(" batch=%d", m.Batch)
	}
	return s + epilogueString(m.Bias, m.BiasType, m.Accumulate, m.Act)
}

// epilogueString names a product's epilogue: bias (and its type when not
// f32), accumulation, activation.
func epilogueString(bias bool, biasType ElemType, accumulate bool, act Epilogue) string {
	s := ""
	if bias {
		s += " +bias"
		if biasType != 0 && biasType != F32 {
			s += "(" + biasType.String() + ")"
		}
	}
	if accumulate {
		s += " +C"
	}
	switch act {
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

// ConvPass is the pass of a convolution a Conv computes.
type ConvPass uint8

const (
	ConvForward ConvPass = iota // Y = conv(X, W)
	ConvData                    // dX from dY and W
	ConvFilter                  // dW from X and dY
)

func (p ConvPass) String() string {
	switch p {
	case ConvForward:
		return "fwd"
	case ConvData:
		return "dgrad"
	case ConvFilter:
		return "wgrad"
	}
	return fmt.Sprintf("pass(%d)", p)
}

// Conv describes one pass of a 2-D convolution over NHWC tensors with
// filters stored [R][S][C][OutC] (a [R·S·C][OutC] matrix):
//
//	forward: Y[n][oh][ow][o] = act(Σ X[n][oh·st−pad+r][ow·st−pad+s][c]·W[r][s][c][o] + bias[o] + C)
//	data:    dX = the adjoint of the forward pass applied to dY
//	filter:  dW[r][s][c][o] = Σ over images and output pixels of X·dY
//
// Operands are packed as MatmulArgs: forward A = X, B = W, D = Y, bias, C
// (the residual, of Y's shape, when Accumulate); data A = dY, B = W, D = dX;
// filter A = X, B = dY, D = dW. A filter pass with Split > 0 writes Split
// f32 partial sums [Split][R][S][C][OutC], each over N/Split images; without
// it dW has the inputs' type. Bias, Act and Accumulate belong to the
// forward pass only.
type Conv struct {
	N, H, W, C  int
	OutC, R, S  int
	Stride, Pad int
	Pass        ConvPass
	In          ElemType // BF16 or F16
	Split       int
	Bias        bool
	BiasType    ElemType
	Act         Epilogue
	Accumulate  bool
}

// Out is the output's spatial size.
func (c Conv) Out() (oh, ow int) {
	st := max(c.Stride, 1)
	return (c.H+2*c.Pad-c.R)/st + 1, (c.W+2*c.Pad-c.S)/st + 1
}

// OutType is the type of the pass's result.
func (c Conv) OutType() ElemType {
	if c.Pass == ConvFilter && c.Split > 0 {
		return F32
	}
	return c.In
}

// Check reports why c is not a convolution a BLAS accepts.
func (c Conv) Check() error {
	var bad []string
	oh, ow := c.Out()
	if c.N <= 0 || c.H <= 0 || c.W <= 0 || c.C <= 0 || c.OutC <= 0 || c.R <= 0 || c.S <= 0 || c.Stride < 0 || c.Pad < 0 || oh <= 0 || ow <= 0 {
		bad = append(bad, "sizes must be positive and the filter must fit the padded input")
	}
	if c.In != BF16 && c.In != F16 {
		bad = append(bad, "inputs must be bf16 or f16")
	}
	if c.Pass > ConvFilter {
		bad = append(bad, fmt.Sprintf("unknown pass %d", c.Pass))
	}
	if c.Split < 0 || (c.Split > 0 && (c.Pass != ConvFilter || c.N%c.Split != 0)) {
		bad = append(bad, "Split belongs to the filter pass and must divide N")
	}
	if c.Pass != ConvForward && (c.Bias || c.Act != EpiNone || c.Accumulate) {
		bad = append(bad, "bias, activation and accumulation belong to the forward pass")
	}
	if c.BiasType != 0 && c.BiasType != F32 && c.BiasType != BF16 && c.BiasType != F16 {
		bad = append(bad, fmt.Sprintf("unknown bias type %d", c.BiasType))
	}
	if c.Act > EpiGELU {
		bad = append(bad, fmt.Sprintf("unknown epilogue %d", c.Act))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: conv %s: %s", ErrInvalidLaunch, c, strings.Join(bad, "; "))
	}
	return nil
}

func (c Conv) String() string {
	s := fmt.Sprintf("%s N=%d %dx%dx%d -> %d %dx%d/%d pad %d %s", c.Pass, c.N, c.H, c.W, c.C, c.OutC, c.R, c.S, max(c.Stride, 1), c.Pad, c.In)
	if c.Split > 0 {
		s += fmt.Sprintf(" split=%d", c.Split)
	}
	return s + epilogueString(c.Bias, c.BiasType, c.Accumulate, c.Act)
}

// BLAS is implemented by devices that run matrix products with a vendor
// library (gpu/cuda: cuBLASLt, loaded at run time; gpu/sim when configured
// to, timing them by Launch.Cost like any kernel). Matmul chooses how to
// run m once and returns a Func for it: a Plain launch of that Func with
// MatmulArgs computes m on the launch's stream (its Grid, Block and
// SharedMem serve schedulers and the simulator only; the library picks its
// own). Such a launch is one non-preemptible unit of work: it has no Reset,
// Resumable or Padded form. A device whose library cannot run m returns an
// error wrapping errors.ErrUnsupported; callers then use their own kernels.
//
// Conv is the same for a convolution pass (gpu/cuda: the patches gathered
// into a workspace of the stream's, im2col, then products on cuBLASLt; the
// data pass's patch gradients summed back, col2im): one Plain,
// non-preemptible launch of several device calls.
type BLAS interface {
	Matmul(m Matmul) (Func, error)
	Conv(c Conv) (Func, error)
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

// ConvOn asks dev for c's Func when dev is a BLAS, and answers
// errors.ErrUnsupported otherwise. Device wrappers forward Conv with it.
func ConvOn(dev Device, c Conv) (Func, error) {
	b, ok := dev.(BLAS)
	if !ok {
		return 0, fmt.Errorf("%w: the %s device has no BLAS", errors.ErrUnsupported, dev.Info().Backend)
	}
	return b.Conv(c)
}

// BLASNameOf is dev's BLASName, or "none" when dev is not a BLAS.
func BLASNameOf(dev Device) string {
	if b, ok := dev.(BLAS); ok {
		return b.BLASName()
	}
	return "none"
}
