package kernels

import (
	"slices"
	"strings"
)

// trainCheckOps are the correctness cases of the training kernels: every
// op and variant, channel counts off the 64-channel tile, pixel counts off
// the 256-pixel chunk, all float types.
func trainCheckOps() []Op {
	return []Op{
		BNStats{Pixels: 700, C: 80, In: BF16},
		BNStats{Pixels: 300, C: 24, In: F32},
		BNStats{Pixels: 513, C: 70, In: BF16, Backward: true, Act: ActReLU},
		BNStats{Pixels: 200, C: 16, In: F16, Backward: true},
		BNFinalize{Pixels: 5000, C: 70},
		BNFinalize{Pixels: 5000, C: 40, Grad: true},
		BNApply{Pixels: 300, C: 40, In: BF16, Act: ActReLU, Residual: true},
		BNApply{Pixels: 77, C: 24, In: F16},
		BNBackward{Pixels: 300, C: 40, In: BF16, Act: ActReLU, Residual: true},
		BNBackward{Pixels: 77, C: 24, In: F32},
		// Channels not a multiple of 4: the element-at-a-time path.
		BNApply{Pixels: 77, C: 6, In: BF16, Act: ActReLU, Residual: true},
		BNBackward{Pixels: 33, C: 6, In: F16, Act: ActReLU},
		XentLoss{Rows: 33, Classes: 1000, In: BF16},
		XentLoss{Rows: 5, Classes: 10, In: F32},
		XentBackward{Rows: 33, Classes: 1000, In: BF16},
		ColumnSum{Rows: 32, Cols: 1000, In: BF16},
		PoolBackward{Pool{N: 2, H: 15, W: 15, C: 16, R: 3, S: 3, Stride: 2, Pad: 1, Max: true, In: BF16}},
		PoolBackward{Pool{N: 2, H: 7, W: 7, C: 40, R: 7, S: 7, Stride: 1, In: BF16}},
		PoolBackward{Pool{N: 1, H: 8, W: 8, C: 8, R: 2, S: 2, Stride: 2, In: F32}},
		// Channels not a multiple of 4: an element a thread.
		PoolBackward{Pool{N: 3, H: 11, W: 11, C: 3, R: 3, S: 3, Stride: 2, Pad: 1, Max: true, In: BF16}},
		PoolBackward{Pool{N: 2, H: 9, W: 9, C: 6, R: 3, S: 3, Stride: 1, Pad: 1, In: F16}},
		SGD{Elems: 3000, In: BF16},
		SGD{Elems: 1000, In: F32, LR: 0.1, Momentum: 0.5},
		SplitSum{Parts: 5, Elems: 3000, Out: BF16},
		Conv2D{N: 4, H: 8, W: 8, C: 16, OutC: 24, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16, BackwardFilter: true, Split: 4},
		Conv2D{N: 6, H: 9, W: 9, C: 3, OutC: 16, R: 3, S: 3, Stride: 2, Pad: 1, In: F16, BackwardFilter: true, Split: 3},
	}
}

// selected says whether op's checks run under Options.Only (a
// comma-separated list of kernel-name substrings).
func (r *runner) selected(op Op) bool {
	if r.only == "" {
		return true
	}
	for _, s := range strings.Split(r.only, ",") {
		if s != "" && strings.Contains(op.Kernel(), s) {
			return true
		}
	}
	return false
}

// trainIdentityOps are the training kernels trainIdentity preempts
// (besides trainIdentitySGD, which updates in place).
func trainIdentityOps() []Op {
	return []Op{
		BNStats{Pixels: 1 << 17, C: 256, In: BF16},
		BNStats{Pixels: 1 << 17, C: 256, In: BF16, Backward: true, Act: ActReLU},
		XentLoss{Rows: 1 << 14, Classes: 1000, In: BF16},
		PoolBackward{Pool{N: 32, H: 56, W: 56, C: 64, R: 3, S: 3, Stride: 2, Pad: 1, Max: true, In: BF16}},
	}
}

var trainIdentitySGD = SGD{Elems: 1 << 24, In: BF16}

// trainIdentity preempts the training kernels whose results a re-run or a
// reordering could change: the partial sums (shared-memory reduction per
// logical block), the loss (one row per block) and in-place SGD with fp32
// momentum (a block run twice would apply its update twice).
func (r *runner) trainIdentity(rep *Report, minPreempt int, next func() uint64) error {
	for _, op := range trainIdentityOps() {
		if !r.selected(op) {
			continue
		}
		if err := r.identityOne(rep, op, nil, 8, minPreempt, next); err != nil {
			return err
		}
	}
	sgd := trainIdentitySGD
	if !r.selected(sgd) {
		return nil
	}
	inplace := func(b Buffers) Buffers {
		c := Buffers{T: slices.Clone(b.T)}
		w, m := c.T[0], c.T[2]
		w.Name, w.Role, w.Host = "w_out", Output, nil
		m.Name, m.Role, m.Host = "m_out", Output, nil
		c.T[3], c.T[4] = w, m
		return c
	}
	return r.identityOne(rep, sgd, inplace, 8, minPreempt, next)
}
