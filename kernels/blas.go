package kernels

import (
	"errors"
	"fmt"
	"strings"

	"atoll/gpu"
)

// BLASSuffix ends the Name of a launch that runs on the device's BLAS
// (gpu.BLAS: cuBLASLt on a GPU) instead of the library's own kernel.
const BLASSuffix = "/blas"

// IsBLAS reports whether ln runs on the device's BLAS.
func IsBLAS(ln *gpu.Launch) bool { return ln != nil && strings.HasSuffix(ln.Name, BLASSuffix) }

// blasUse is what the library knows of an op's BLAS form.
type blasUse uint8

const (
	blasUnknown blasUse = iota
	blasYes
	blasNo
)

// elemType maps a 16-bit or f32 DType to the BLAS's element type.
func elemType(d DType) (gpu.ElemType, bool) {
	switch d {
	case BF16:
		return gpu.BF16, true
	case F16:
		return gpu.F16, true
	case F32:
		return gpu.F32, true
	}
	return 0, false
}

func blasEpilogue(a Act) (gpu.Epilogue, bool) {
	switch a {
	case ActNone:
		return gpu.EpiNone, true
	case ActReLU:
		return gpu.EpiReLU, true
	case ActGELU:
		return gpu.EpiGELU, true
	}
	return 0, false
}

// matmulOf is the product a BLAS computes for op, and where its operands
// are among op's tensors (A, B, D, bias, C; -1: none). ok is false for ops
// a BLAS does not cover: everything but GEMMs and 1x1, stride-1 unpadded
// convolutions (forward, data and filter gradients), which in NHWC are
// GEMMs over the pixels; and activations other than ReLU and GELU.
func matmulOf(op Op) (m gpu.Matmul, at [5]int, ok bool) {
	at = [5]int{0, 1, 2, -1, -1}
	switch o := op.(type) {
	case GEMM:
		in, ok1 := elemType(o.In)
		out, ok2 := elemType(o.Out)
		act, ok3 := blasEpilogue(o.Act)
		if !ok1 || !ok2 || !ok3 || in == gpu.F32 || (out != in && out != gpu.F32) {
			return m, at, false
		}
		bt, _ := elemType(o.BiasType)
		m = gpu.Matmul{M: o.M, N: o.N, K: o.K, In: in, Out: out, Bias: o.Bias, BiasType: bt, Act: act}
		if b := o.batch(); b > 1 {
			m.Batch, m.StrideA, m.StrideB, m.StrideD = b, int64(o.M*o.K), int64(o.K*o.N), int64(o.M*o.N)
		}
		if o.Bias {
			at[3] = 3
		}
		return m, at, true
	case Conv2D:
		if !o.Pointwise() {
			return m, at, false
		}
		in, ok1 := elemType(o.In)
		act, ok2 := blasEpilogue(o.Act)
		if !ok1 || !ok2 || in == gpu.F32 {
			return m, at, false
		}
		pixels := o.N * o.H * o.W
		switch {
		case o.BackwardData: // dX[P][C] = dY[P][OutC] · Wᵀ, W stored [C][OutC]
			return gpu.Matmul{M: pixels, N: o.C, K: o.OutC, TransB: true, In: in, Out: in}, at, true
		case o.BackwardFilter && o.Split > 0: // f32 dW partials [Split][C][OutC], each over N/Split images
			k := pixels / o.Split
			return gpu.Matmul{M: o.C, N: o.OutC, K: k, TransA: true, In: in, Out: gpu.F32,
				Batch: o.Split, StrideA: int64(k * o.C), StrideB: int64(k * o.OutC), StrideD: int64(o.C * o.OutC)}, at, true
		case o.BackwardFilter: // dW[C][OutC] = Xᵀ · dY
			return gpu.Matmul{M: o.C, N: o.OutC, K: pixels, TransA: true, In: in, Out: in}, at, true
		}
		bt, _ := elemType(o.BiasType)
		m = gpu.Matmul{M: pixels, N: o.OutC, K: o.C, In: in, Out: in, Bias: o.Bias, BiasType: bt, Act: act, Accumulate: o.Residual}
		return m, epilogueOperands(o.Bias, o.Residual), true
	}
	return m, at, false
}

// convOf is the convolution pass a BLAS computes for op, and where its
// operands are among op's tensors (as matmulOf's): Conv2D passes that
// matmulOf does not cover (filters larger than 1x1, strides, padding).
// Bias, activation and residual belong to the forward pass.
func convOf(op Op) (c gpu.Conv, at [5]int, ok bool) {
	at = [5]int{0, 1, 2, -1, -1}
	o, isConv := op.(Conv2D)
	if !isConv {
		return c, at, false
	}
	in, ok1 := elemType(o.In)
	act, ok2 := blasEpilogue(o.Act)
	if !ok1 || !ok2 || in == gpu.F32 {
		return c, at, false
	}
	c = gpu.Conv{N: o.N, H: o.H, W: o.W, C: o.C, OutC: o.OutC, R: o.R, S: o.S, Stride: max(o.Stride, 1), Pad: o.Pad, In: in}
	switch {
	case o.BackwardData || o.BackwardFilter:
		if o.Bias || o.Residual || o.Act != ActNone {
			return c, at, false
		}
		c.Pass = gpu.ConvData
		if o.BackwardFilter {
			c.Pass, c.Split = gpu.ConvFilter, o.Split
		}
		return c, at, true
	}
	c.BiasType, _ = elemType(o.BiasType)
	c.Bias, c.Act, c.Accumulate = o.Bias, act, o.Residual
	return c, epilogueOperands(o.Bias, o.Residual), true
}

// epilogueOperands is where a forward convolution's operands are among its
// tensors (X, W, Y, then the bias and the residual when it has them).
func epilogueOperands(bias, residual bool) [5]int {
	at, i := [5]int{0, 1, 2, -1, -1}, 3
	if bias {
		at[3] = i
		i++
	}
	if residual {
		at[4] = i
	}
	return at
}

// BLASConv reports whether op's Plain launches, where the device's BLAS
// takes them, are a vendor convolution — its gathers, products and
// scatters, several calls — rather than one product: a convolution that is
// not pointwise (larger filters, strides, padding).
func BLASConv(op Op) bool {
	_, _, mm := matmulOf(op)
	_, _, cv := convOf(op)
	return cv && !mm
}

// blasCovers reports whether a BLAS may run op's whole Plain launches (as
// a product or a convolution).
func blasCovers(op Op) bool {
	_, _, mm := matmulOf(op)
	_, _, cv := convOf(op)
	return mm || cv
}

// BLASName is the BLAS the library hands products to ("none" when it
// does not: NoBLAS set, or the device has none).
func (l *Library) BLASName() string {
	if l.NoBLAS {
		return "none (turned off)"
	}
	return gpu.BLASNameOf(l.dev)
}

// BLASOps counts the ops the library has run on the device's BLAS so far,
// and the first reason one could not.
func (l *Library) BLASOps() (n int, refused error) {
	for _, e := range l.specs {
		if e.blas == blasYes {
			n++
		}
	}
	return n, l.blasErr
}

// BLASRefusal is why the device's BLAS refused op's product (nil when it
// took it, was not asked, or the op is not a product).
func (l *Library) BLASRefusal(op Op) error {
	if e, ok := l.specs[op]; ok {
		return e.blasWhy
	}
	return nil
}

// resolveBLAS decides once whether op's whole Plain launches run on the
// device's BLAS, asking the device for the product's or the convolution's
// plan (cuBLASLt's descriptors and algorithms, host work worth keeping off
// the launch path).
// A device that refuses a product (errors.ErrUnsupported) is not asked for
// it again.
func (l *Library) resolveBLAS(e *kentry, op Op) (bool, error) {
	if l.NoBLAS || e.blas == blasNo {
		return false, nil
	}
	if e.blas == blasUnknown {
		var f gpu.Func
		var err error
		m, at, cover := matmulOf(op)
		if cover {
			f, err = gpu.MatmulOn(l.dev, m)
		} else {
			var c gpu.Conv
			if c, at, cover = convOf(op); !cover {
				e.blas = blasNo
				return false, nil
			}
			f, err = gpu.ConvOn(l.dev, c)
		}
		if err != nil {
			if errors.Is(err, errors.ErrUnsupported) {
				e.blas, e.blasWhy = blasNo, err
				if l.blasErr == nil {
					l.blasErr = err
				}
				return false, nil
			}
			return false, fmt.Errorf("kernels: %s (%s) on the BLAS: %w", e.k.name, op.Shape(), err)
		}
		e.blas, e.blasFunc, e.blasAt = blasYes, f, at
	}
	return true, nil
}

// launchBLAS builds op's whole Plain launch on the device's BLAS, when the
// library may use it and the device runs the op's product (ok false
// otherwise: the caller uses the library's own kernel). A device that
// refuses a product (errors.ErrUnsupported) is not asked for it again.
func (l *Library) launchBLAS(e *kentry, op Op, bufs Buffers) (ln *gpu.Launch, ok bool, err error) {
	if ok, err := l.resolveBLAS(e, op); !ok || err != nil {
		return nil, false, err
	}
	k := e.k
	ptr := func(i int) gpu.Ptr {
		if i < 0 {
			return 0
		}
		return bufs.T[i].Ptr
	}
	ln = &gpu.Launch{
		Name:      k.name + BLASSuffix,
		Func:      e.blasFunc,
		Grid:      k.grid,
		Block:     gpu.D1(k.threads),
		SharedMem: k.smem,
		Registers: k.regs,
		Cost:      cost(op),
		Form:      gpu.Plain,
	}
	at := &e.blasAt
	gpu.MatmulArgs(&ln.Args, ptr(at[0]), ptr(at[1]), ptr(at[2]), ptr(at[3]), ptr(at[4]))
	return ln, true, nil
}
