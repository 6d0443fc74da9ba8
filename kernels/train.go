package kernels

import (
	"errors"
	"fmt"
	"math"

	"atoll/gpu"
)

// Training ops: batch norm with batch statistics, softmax cross-entropy,
// column sums, pooling backward and SGD with fp32 momentum (cuda/train.cu,
// family "train", built on the misc family's block reductions). Every reduction is deterministic and
// preemption-safe: per-logical-block partial results go to a scratch
// tensor with plain stores and a second kernel finishes them in a fixed
// order (see cuda/train.cu), so a logical block that runs again stores the
// same bytes and every form gives bit-identical results.

// BNChunk is the number of pixels one partial of BNStats covers.
const BNChunk = 256

// bnEps is batch norm's epsilon (PyTorch's default).
const bnEps = 1e-5

func bnSplits(pixels int) int { return ceilDiv(pixels, BNChunk) }

// BNStats is the first, partial stage of a per-channel reduction over the
// Pixels rows of an NHWC tensor [Pixels, C]: for each chunk of BNChunk
// pixels it writes 2·C fp32 sums to part [splits][2][C].
//
// Operands: X, then for the backward dY, Y (ReLU only) and the forward
// statistics. Forward (Backward false): (Σx, Σx²) of X. Backward: (Σdz, Σdz·x̂) with
// dz = dY·[Y > 0] when Act is ReLU (dY when none) and x̂ = (X − mean)·rstd
// from the forward statistics [mean[C], rstd[C]]. BNFinalize finishes
// either. Logical block: 256 pixels x 64 channels, 256 threads.
type BNStats struct {
	Pixels, C int
	In        DType
	Backward  bool
	Act       Act // backward: ActReLU or ActNone (the unit's activation)
}

// Partials is the element count of the partial-sum tensor.
func (s BNStats) Partials() int { return bnSplits(s.Pixels) * 2 * s.C }

func (s BNStats) Kernel() string {
	if s.Backward {
		return "bn_bwd_stats_" + s.In.String()
	}
	return "bn_stats_" + s.In.String()
}
func (s BNStats) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(bnSplits(s.Pixels) * ceilDiv(s.C, 64)), Block: gpu.D1(256), Registers: 32}
}
func (s BNStats) FLOPs() float64 {
	if s.Backward {
		return 5 * float64(s.Pixels*s.C)
	}
	return 3 * float64(s.Pixels*s.C)
}
func (s BNStats) Bytes() float64 {
	reads := 1
	if s.Backward {
		reads = 2
		if s.Act == ActReLU {
			reads = 3
		}
	}
	return float64(reads*s.Pixels*s.C)*float64(s.In.Size()) + float64(s.Partials()*4)
}
func (s BNStats) Shape() string {
	return fmt.Sprintf("pixels=%d c=%d splits=%d act=%s", s.Pixels, s.C, bnSplits(s.Pixels), s.Act)
}

// BNFinalize sums BNStats' partials over the chunks in a fixed order (in
// double). Forward: stats [2·C] = [mean[C], rstd[C]] with the biased
// variance and ε = 1e-5. Grad: dγ [C] = Σdz·x̂ and dβ [C] = Σdz. One logical
// block per 8 channels, 256 threads (32 lanes over the chunks).
type BNFinalize struct {
	Pixels, C int
	Grad      bool
}

func (f BNFinalize) Kernel() string {
	if f.Grad {
		return "bn_finalize_grad"
	}
	return "bn_finalize"
}
func (f BNFinalize) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(f.C, 8)), Block: gpu.D1(256), Registers: 40}
}
func (f BNFinalize) FLOPs() float64 { return float64(bnSplits(f.Pixels) * 2 * f.C) }
func (f BNFinalize) Bytes() float64 {
	return float64(bnSplits(f.Pixels)*2*f.C*4 + 2*f.C*4)
}
func (f BNFinalize) Shape() string {
	return fmt.Sprintf("pixels=%d c=%d splits=%d", f.Pixels, f.C, bnSplits(f.Pixels))
}

// BNApply is y = act(γ·(x − mean)·rstd + β [+ resid]) over [Pixels, C]
// with the statistics of BNFinalize; 1024 elements per logical block.
type BNApply struct {
	Pixels, C int
	In        DType
	Act       Act // ActNone or ActReLU
	Residual  bool
}

func (a BNApply) Kernel() string { return "bn_apply_" + a.In.String() }
func (a BNApply) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(a.Pixels*a.C, 1024)), Block: gpu.D1(256), Registers: 24}
}
func (a BNApply) FLOPs() float64 { return 5 * float64(a.Pixels*a.C) }
func (a BNApply) Bytes() float64 {
	n := 2
	if a.Residual {
		n = 3
	}
	return float64(n*a.Pixels*a.C)*float64(a.In.Size()) + float64(4*a.C*4)
}
func (a BNApply) Shape() string {
	return fmt.Sprintf("pixels=%d c=%d act=%s residual=%t", a.Pixels, a.C, a.Act, a.Residual)
}

// BNBackward is batch norm's data gradient: dz = dY·[Y > 0] (ReLU) or dY,
// dX = γ·rstd·(dz − dβ/P − x̂·dγ/P); with Residual it also writes dz as the
// shortcut's gradient. 1024 elements per logical block.
type BNBackward struct {
	Pixels, C int
	In        DType
	Act       Act
	Residual  bool
}

func (b BNBackward) Kernel() string { return "bn_bwd_" + b.In.String() }
func (b BNBackward) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(b.Pixels*b.C, 1024)), Block: gpu.D1(256), Registers: 32}
}
func (b BNBackward) FLOPs() float64 { return 8 * float64(b.Pixels*b.C) }
func (b BNBackward) Bytes() float64 {
	n := 3 // dy, x, dx
	if b.Act == ActReLU {
		n++
	}
	if b.Residual {
		n++
	}
	return float64(n*b.Pixels*b.C)*float64(b.In.Size()) + float64(5*b.C*4)
}
func (b BNBackward) Shape() string {
	return fmt.Sprintf("pixels=%d c=%d act=%s residual=%t", b.Pixels, b.C, b.Act, b.Residual)
}

// XentLoss is softmax cross-entropy per row from the logits [Rows,
// Classes]: loss[r] = log Σ exp(x[r]) − x[r][label[r]] in fp32 (the batch
// loss is their mean). Labels must lie in [0, Classes): the reference
// refuses others, the kernel writes NaN. One row per logical block, 128
// threads.
type XentLoss struct {
	Rows, Classes int
	In            DType
}

func (x XentLoss) Kernel() string { return "xent_" + x.In.String() }
func (x XentLoss) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(x.Rows), Block: gpu.D1(128), Registers: 32}
}
func (x XentLoss) FLOPs() float64 { return 4 * float64(x.Rows*x.Classes) }
func (x XentLoss) Bytes() float64 {
	return float64(x.Rows*x.Classes)*float64(x.In.Size()) + float64(8*x.Rows)
}
func (x XentLoss) Shape() string { return fmt.Sprintf("rows=%d classes=%d", x.Rows, x.Classes) }

// XentBackward is the gradient of the mean cross-entropy with respect to
// the logits: (softmax − onehot(label)) / Rows, from the softmax output.
// 1024 elements per logical block.
type XentBackward struct {
	Rows, Classes int
	In            DType
}

func (x XentBackward) Kernel() string { return "xent_bwd_" + x.In.String() }
func (x XentBackward) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(x.Rows*x.Classes, 1024)), Block: gpu.D1(256), Registers: 24}
}
func (x XentBackward) FLOPs() float64 { return 2 * float64(x.Rows*x.Classes) }
func (x XentBackward) Bytes() float64 {
	return 2*float64(x.Rows*x.Classes)*float64(x.In.Size()) + float64(4*x.Rows)
}
func (x XentBackward) Shape() string { return fmt.Sprintf("rows=%d classes=%d", x.Rows, x.Classes) }

// ColumnSum is out[j] = Σ_r x[r][j] in fp32 over a [Rows, Cols] tensor,
// one thread per column summing in row order (bias gradients over a
// batch). Meant for short columns: its work per thread grows with Rows.
type ColumnSum struct {
	Rows, Cols int
	In         DType
}

func (c ColumnSum) Kernel() string { return "colsum_" + c.In.String() }
func (c ColumnSum) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(c.Cols, 256)), Block: gpu.D1(256), Registers: 24}
}
func (c ColumnSum) FLOPs() float64 { return float64(c.Rows * c.Cols) }
func (c ColumnSum) Bytes() float64 {
	return float64(c.Rows*c.Cols)*float64(c.In.Size()) + float64(4*c.Cols)
}
func (c ColumnSum) Shape() string { return fmt.Sprintf("rows=%d cols=%d", c.Rows, c.Cols) }

// PoolBackward is the input gradient of Pool: average pooling spreads each
// output's gradient over its window (divided by R·S, as the forward
// divides); max pooling gives it to the window's first maximum in scan
// order (PyTorch's tie rule), found again from the forward input X. A
// gather (no atomics), 256 threads a block: with channels a multiple of 4
// a thread takes four channels of a tile of pixels (2×2 for stride 2,
// where every window's maxima are found once for four pixels; else one
// pixel), otherwise an element a thread, 1024 a block.
type PoolBackward struct {
	Pool Pool
}

func (p PoolBackward) inputs() int { return p.Pool.N * p.Pool.H * p.Pool.W * p.Pool.C }
func (p PoolBackward) Kernel() string {
	if p.Pool.Max {
		return "maxpool_bwd_" + p.Pool.In.String()
	}
	return "avgpool_bwd_" + p.Pool.In.String()
}
func (p PoolBackward) Geometry() Geometry {
	q := p.Pool
	if q.C%4 != 0 {
		return Geometry{Grid: gpu.D1(ceilDiv(p.inputs(), 1024)), Block: gpu.D1(256), Registers: 64}
	}
	t := 1 // the tile's side (train.cu, body_pool_bwd)
	if q.Stride == 2 {
		t = 2
	}
	tiles := q.N * ceilDiv(q.H, t) * ceilDiv(q.W, t) * (q.C / 4)
	return Geometry{Grid: gpu.D1(ceilDiv(tiles, 256)), Block: gpu.D1(256), Registers: 64}
}
func (p PoolBackward) FLOPs() float64 { return float64(p.Pool.outputs() * p.Pool.R * p.Pool.S) }
func (p PoolBackward) Bytes() float64 {
	n := p.inputs() + p.Pool.outputs()
	if p.Pool.Max {
		n += p.inputs()
	}
	return float64(n) * float64(p.Pool.In.Size())
}
func (p PoolBackward) Shape() string { return p.Pool.Shape() }

// SGD is one SGD-with-momentum update of one parameter tensor, weights and
// gradient in In, momentum in fp32: m' = Momentum·m + g; w' = w − LR·m'
// (PyTorch's SGD; at the first step m = 0 gives m' = g). It may run in
// place (w_out = w, m_out = m). LR and Momentum 0 mean 0.01 and 0.9.
type SGD struct {
	Elems        int
	In           DType
	LR, Momentum float32
}

func (s SGD) lrMomentum() (float32, float32) {
	return Elementwise{LR: s.LR, Momentum: s.Momentum}.lrMomentum()
}
func (s SGD) Kernel() string { return "sgd_" + s.In.String() }
func (s SGD) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(s.Elems, 1024)), Block: gpu.D1(256), Registers: 24}
}
func (s SGD) FLOPs() float64 { return 4 * float64(s.Elems) }
func (s SGD) Bytes() float64 {
	return float64(s.Elems) * float64(3*s.In.Size()+8)
}
func (s SGD) Shape() string { return fmt.Sprintf("n=%d", s.Elems) }

// SplitSum adds Parts f32 partial results [Parts][Elems] in order into an
// Elems-element tensor of type Out (the partial dW of a split convolution
// wgrad, Conv2D.Split); 1024 elements per logical block.
type SplitSum struct {
	Parts, Elems int
	Out          DType
}

func (s SplitSum) Kernel() string { return "splitsum_" + s.Out.String() }
func (s SplitSum) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(s.Elems, 1024)), Block: gpu.D1(256), Registers: 24}
}
func (s SplitSum) FLOPs() float64 { return float64(s.Parts * s.Elems) }
func (s SplitSum) Bytes() float64 {
	return float64(s.Parts*s.Elems*4) + float64(s.Elems*s.Out.Size())
}
func (s SplitSum) Shape() string { return fmt.Sprintf("parts=%d n=%d", s.Parts, s.Elems) }

// TrainOps are the training ops' types, for documentation and tests.
var TrainOps = []Op{BNStats{}, BNFinalize{}, BNApply{}, BNBackward{}, XentLoss{}, XentBackward{}, ColumnSum{}, PoolBackward{}, SGD{}, SplitSum{}}

func bnAct(a Act) bool { return a == ActNone || a == ActReLU }

// trainSpec fills k for a training op; ok is false for other ops.
func trainSpec(op Op, k *kspec) (ok bool, err error) {
	k.family = "train"
	switch o := op.(type) {
	case BNStats:
		return true, bnStatsSpec(o, k)
	case BNFinalize:
		return true, bnFinalizeSpec(o, k)
	case BNApply:
		return true, bnApplySpec(o, k)
	case BNBackward:
		return true, bnBackwardSpec(o, k)
	case XentLoss:
		return true, xentLossSpec(o, k)
	case XentBackward:
		return true, xentBackwardSpec(o, k)
	case ColumnSum:
		return true, columnSumSpec(o, k)
	case PoolBackward:
		return true, poolBackwardSpec(o, k)
	case SGD:
		return true, sgdSpec(o, k)
	case SplitSum:
		return true, splitSumSpec(o, k)
	}
	return false, nil
}

// setNoSync marks k's body as using no shared memory, with chunk logical
// blocks per resumable ticket.
func (k *kspec) setNoSync(chunk int) { k.noSync, k.chunk = true, chunk }

// f32Tensor is an f32 tensor of n elements.
func f32Tensor(name string, n int, r Role) TensorSpec {
	return TensorSpec{Name: name, DType: F32, Elems: n, Role: r}
}

// bnStatsSpec fills k for a BNStats op.
func bnStatsSpec(o BNStats, k *kspec) error {
	if !positive(o.Pixels, o.C) || !validFloat(o.In) || !bnAct(o.Act) {
		return shapeErr(o, "Pixels and C must be positive, the type f32/f16/bf16, the activation none or relu")
	}
	k.param, k.body = "BnPartP", fmt.Sprintf("body_bn_partial<%s>", dtC(o.In))
	t := func(name string, r Role) TensorSpec {
		return TensorSpec{Name: name, DType: o.In, Elems: o.Pixels * o.C, Role: r}
	}
	mode, relu := 0, o.Backward && o.Act == ActReLU
	k.tensors = []TensorSpec{t("X", Input)}
	if o.Backward {
		mode = 1
		k.tensors = append(k.tensors, t("dY", Input))
		if relu {
			k.tensors = append(k.tensors, t("Y", Input))
		}
		k.tensors = append(k.tensors, f32Tensor("stats", 2*o.C, Input))
	}
	k.tensors = append(k.tensors, f32Tensor("part", o.Partials(), Output))
	tiles := ceilDiv(o.C, 64)
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		var dy, y, st gpu.Ptr
		x := p[0]
		switch {
		case relu:
			dy, y, st = p[1], p[2], p[3]
		case o.Backward:
			dy, st = p[1], p[2]
		}
		a.Ptr(x).Ptr(dy).Ptr(y).Ptr(st).Ptr(p[len(p)-1])
		a.I32(int32(o.Pixels)).I32(int32(o.C)).I32(int32(tiles)).I32(int32(mode)).I32(int32(o.Act))
	}
	return nil
}

// bnFinalizeSpec fills k for a BNFinalize op.
func bnFinalizeSpec(o BNFinalize, k *kspec) error {
	if !positive(o.Pixels, o.C) {
		return shapeErr(o, "Pixels and C must be positive")
	}
	k.param, k.body = "BnFinP", "body_bn_final<DT_F32>"
	k.tensors = []TensorSpec{f32Tensor("part", bnSplits(o.Pixels)*2*o.C, Input)}
	if o.Grad {
		k.tensors = append(k.tensors, f32Tensor("dgamma", o.C, Output), f32Tensor("dbeta", o.C, Output))
	} else {
		k.tensors = append(k.tensors, f32Tensor("stats", 2*o.C, Output))
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		var out1 gpu.Ptr
		if o.Grad {
			out1 = p[2]
		}
		a.Ptr(p[0]).Ptr(p[1]).Ptr(out1)
		a.I32(int32(o.Pixels)).I32(int32(o.C)).I32(int32(bnSplits(o.Pixels))).I32(b2i(o.Grad)).F32(bnEps)
	}
	return nil
}

// bnApplySpec fills k for a BNApply op.
func bnApplySpec(o BNApply, k *kspec) error {
	if !positive(o.Pixels, o.C) || !validFloat(o.In) || !bnAct(o.Act) {
		return shapeErr(o, "Pixels and C must be positive, the type f32/f16/bf16, the activation none or relu")
	}
	k.setNoSync(8)
	k.param, k.body = "BnApP", fmt.Sprintf("body_bn_apply<%s>", dtC(o.In))
	t := func(name string, r Role) TensorSpec {
		return TensorSpec{Name: name, DType: o.In, Elems: o.Pixels * o.C, Role: r}
	}
	k.tensors = []TensorSpec{t("X", Input), f32Tensor("stats", 2*o.C, Input)}
	if o.Residual {
		k.tensors = append(k.tensors, t("resid", Input))
	}
	k.tensors = append(k.tensors, f32Tensor("gamma", o.C, Weight), f32Tensor("beta", o.C, Weight), t("Y", Output))
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		var r gpu.Ptr
		i := 2
		if o.Residual {
			r = p[2]
			i = 3
		}
		a.Ptr(p[0]).Ptr(p[1]).Ptr(r).Ptr(p[i]).Ptr(p[i+1]).Ptr(p[i+2])
		a.U64(uint64(o.Pixels * o.C)).I32(int32(o.C)).I32(int32(o.Act))
	}
	return nil
}

// bnBackwardSpec fills k for a BNBackward op.
func bnBackwardSpec(o BNBackward, k *kspec) error {
	if !positive(o.Pixels, o.C) || !validFloat(o.In) || !bnAct(o.Act) {
		return shapeErr(o, "Pixels and C must be positive, the type f32/f16/bf16, the activation none or relu")
	}
	k.setNoSync(8)
	k.param, k.body = "BnBwP", fmt.Sprintf("body_bn_bwd<%s>", dtC(o.In))
	t := func(name string, r Role) TensorSpec {
		return TensorSpec{Name: name, DType: o.In, Elems: o.Pixels * o.C, Role: r}
	}
	relu := o.Act == ActReLU
	k.tensors = []TensorSpec{t("dY", Input)}
	if relu {
		k.tensors = append(k.tensors, t("Y", Input))
	}
	k.tensors = append(k.tensors, t("X", Input), f32Tensor("stats", 2*o.C, Input), f32Tensor("dgamma", o.C, Input), f32Tensor("dbeta", o.C, Input),
		f32Tensor("gamma", o.C, Weight), t("dX", Output))
	if o.Residual {
		k.tensors = append(k.tensors, t("dShort", Output))
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		var y, dshort gpu.Ptr
		i := 1
		if relu {
			y = p[1]
			i = 2
		}
		if o.Residual {
			dshort = p[i+6]
		}
		a.Ptr(p[0]).Ptr(y).Ptr(p[i]).Ptr(p[i+1]).Ptr(p[i+2]).Ptr(p[i+3]).Ptr(p[i+4]).Ptr(p[i+5]).Ptr(dshort)
		a.U64(uint64(o.Pixels * o.C)).I32(int32(o.C)).I32(int32(o.Act)).F32(float32(1 / float64(o.Pixels)))
	}
	return nil
}

// xentLossSpec fills k for a XentLoss op.
func xentLossSpec(o XentLoss, k *kspec) error {
	if !positive(o.Rows, o.Classes) || !validFloat(o.In) {
		return shapeErr(o, "Rows and Classes must be positive, the type f32/f16/bf16")
	}
	k.param, k.body = "XentP", fmt.Sprintf("body_xent<%s>", dtC(o.In))
	k.tensors = []TensorSpec{
		{Name: "logits", DType: o.In, Elems: o.Rows * o.Classes, Role: Input},
		{Name: "labels", DType: I32, Elems: o.Rows, Role: Input, IntRange: o.Classes},
		f32Tensor("loss", o.Rows, Output),
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).I32(int32(o.Rows)).I32(int32(o.Classes))
	}
	return nil
}

// xentBackwardSpec fills k for a XentBackward op.
func xentBackwardSpec(o XentBackward, k *kspec) error {
	if !positive(o.Rows, o.Classes) || !validFloat(o.In) {
		return shapeErr(o, "Rows and Classes must be positive, the type f32/f16/bf16")
	}
	k.setNoSync(8)
	k.param, k.body = "XentBwP", fmt.Sprintf("body_xent_bwd<%s>", dtC(o.In))
	k.tensors = []TensorSpec{
		{Name: "probs", DType: o.In, Elems: o.Rows * o.Classes, Role: Input},
		{Name: "labels", DType: I32, Elems: o.Rows, Role: Input, IntRange: o.Classes},
		{Name: "dlogits", DType: o.In, Elems: o.Rows * o.Classes, Role: Output},
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).U64(uint64(o.Rows * o.Classes)).I32(int32(o.Classes)).F32(float32(1 / float64(o.Rows)))
	}
	return nil
}

// columnSumSpec fills k for a ColumnSum op.
func columnSumSpec(o ColumnSum, k *kspec) error {
	if !positive(o.Rows, o.Cols) || !validFloat(o.In) {
		return shapeErr(o, "Rows and Cols must be positive, the type f32/f16/bf16")
	}
	k.setNoSync(8)
	k.param, k.body = "ColSumP", fmt.Sprintf("body_colsum<%s>", dtC(o.In))
	k.tensors = []TensorSpec{{Name: "X", DType: o.In, Elems: o.Rows * o.Cols, Role: Input}, f32Tensor("out", o.Cols, Output)}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) { a.Ptr(p[0]).Ptr(p[1]).I32(int32(o.Rows)).I32(int32(o.Cols)) }
	return nil
}

// poolBackwardSpec fills k for a PoolBackward op.
func poolBackwardSpec(o PoolBackward, k *kspec) error {
	q := o.Pool
	oh, ow := q.Out()
	if !positive(q.N, q.H, q.W, q.C, q.R, q.S) || q.Stride < 0 || q.Pad < 0 || oh <= 0 || ow <= 0 {
		return shapeErr(o, "sizes must be positive and the output non-empty")
	}
	if !validFloat(q.In) {
		return shapeErr(o, "input must be f32, f16 or bf16")
	}
	if q.Pad >= q.R || q.Pad >= q.S {
		return shapeErr(o, "padding must be smaller than the window (a window of padding only has no input)")
	}
	k.setNoSync(8)
	k.param, k.body = "PoolBwP", fmt.Sprintf("body_pool_bwd<%s>", dtC(q.In))
	k.tensors = []TensorSpec{{Name: "dY", DType: q.In, Elems: q.outputs(), Role: Input}}
	if q.Max {
		k.tensors = append(k.tensors, TensorSpec{Name: "X", DType: q.In, Elems: o.inputs(), Role: Input})
	}
	k.tensors = append(k.tensors, TensorSpec{Name: "dX", DType: q.In, Elems: o.inputs(), Role: Output})
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		var x gpu.Ptr
		if q.Max {
			x = p[1]
		}
		a.Ptr(p[0]).Ptr(x).Ptr(p[len(p)-1])
		for _, v := range []int{q.N, q.H, q.W, q.C, oh, ow, q.R, q.S, max(q.Stride, 1), q.Pad} {
			a.I32(int32(v))
		}
		a.I32(b2i(q.Max))
	}
	return nil
}

// sgdSpec fills k for a SGD op.
func sgdSpec(o SGD, k *kspec) error {
	if !positive(o.Elems) || !validFloat(o.In) || o.LR < 0 || o.Momentum < 0 {
		return shapeErr(o, "Elems must be positive, the type f32/f16/bf16, LR and Momentum non-negative")
	}
	k.setNoSync(8)
	k.param, k.body = "SgdP", fmt.Sprintf("body_sgd<%s>", dtC(o.In))
	t := func(name string, r Role) TensorSpec {
		return TensorSpec{Name: name, DType: o.In, Elems: o.Elems, Role: r}
	}
	k.tensors = []TensorSpec{t("w", Weight), t("g", Input), f32Tensor("m", o.Elems, Input), t("w_out", Output), f32Tensor("m_out", o.Elems, Output)}
	lr, mu := o.lrMomentum()
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).Ptr(p[3]).Ptr(p[4]).U64(uint64(o.Elems)).F32(lr).F32(mu)
	}
	return nil
}

// splitSumSpec fills k for a SplitSum op.
func splitSumSpec(o SplitSum, k *kspec) error {
	if !positive(o.Parts, o.Elems) || !validFloat(o.Out) {
		return shapeErr(o, "Parts and Elems must be positive, the output f32/f16/bf16")
	}
	k.setNoSync(8)
	k.param, k.body = "SplitSumP", fmt.Sprintf("body_splitsum<%s>", dtC(o.Out))
	k.tensors = []TensorSpec{f32Tensor("parts", o.Parts*o.Elems, Input), {Name: "out", DType: o.Out, Elems: o.Elems, Role: Output}}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).U64(uint64(o.Elems)).I32(int32(o.Parts))
	}
	return nil
}

// ErrLabels: a cross-entropy label outside [0, classes).
var ErrLabels = errors.New("kernels: cross-entropy label out of range")

// trainReference computes a training op on the CPU (float64; ok false for
// other ops).
func trainReference(op Op, in func(int) []float64) (out [][]float64, ok bool, err error) {
	switch o := op.(type) {
	case BNStats:
		splits := bnSplits(o.Pixels)
		part := make([]float64, o.Partials())
		var dy, y, st []float64
		x := in(0)
		if o.Backward {
			dy = in(1)
			i := 2
			if o.Act == ActReLU {
				y, i = in(2), 3
			}
			st = in(i)
		}
		for s := range splits {
			for px := s * BNChunk; px < min((s+1)*BNChunk, o.Pixels); px++ {
				for ch := range o.C {
					i := px*o.C + ch
					if !o.Backward {
						part[2*s*o.C+ch] += x[i]
						part[(2*s+1)*o.C+ch] += x[i] * x[i]
						continue
					}
					dz := dy[i]
					if y != nil && !(y[i] > 0) {
						dz = 0
					}
					part[2*s*o.C+ch] += dz
					part[(2*s+1)*o.C+ch] += dz * (x[i] - st[ch]) * st[o.C+ch]
				}
			}
		}
		return [][]float64{part}, true, nil
	case BNFinalize:
		part := in(0)
		a, b := make([]float64, o.C), make([]float64, o.C)
		for s := range bnSplits(o.Pixels) {
			for ch := range o.C {
				a[ch] += part[2*s*o.C+ch]
				b[ch] += part[(2*s+1)*o.C+ch]
			}
		}
		if o.Grad {
			return [][]float64{b, a}, true, nil
		}
		st := make([]float64, 2*o.C)
		for ch := range o.C {
			mean := a[ch] / float64(o.Pixels)
			v := max(b[ch]/float64(o.Pixels)-mean*mean, 0)
			st[ch], st[o.C+ch] = mean, 1/math.Sqrt(v+bnEps)
		}
		return [][]float64{st}, true, nil
	case BNApply:
		x, st := in(0), in(1)
		var r []float64
		i := 2
		if o.Residual {
			r, i = in(2), 3
		}
		gamma, beta := in(i), in(i+1)
		y := make([]float64, o.Pixels*o.C)
		for j := range y {
			ch := j % o.C
			v := (x[j]-st[ch])*st[o.C+ch]*gamma[ch] + beta[ch]
			if r != nil {
				v += r[j]
			}
			y[j] = act(v, o.Act)
		}
		return [][]float64{y}, true, nil
	case BNBackward:
		dy := in(0)
		var y []float64
		i := 1
		if o.Act == ActReLU {
			y, i = in(1), 2
		}
		x, st, dg, db, gamma := in(i), in(i+1), in(i+2), in(i+3), in(i+4)
		n := o.Pixels * o.C
		dx := make([]float64, n)
		var ds []float64
		if o.Residual {
			ds = make([]float64, n)
		}
		inv := 1 / float64(o.Pixels)
		for j := range dx {
			ch := j % o.C
			dz := dy[j]
			if y != nil && !(y[j] > 0) {
				dz = 0
			}
			rstd := st[o.C+ch]
			xh := (x[j] - st[ch]) * rstd
			dx[j] = gamma[ch] * rstd * (dz - db[ch]*inv - xh*dg[ch]*inv)
			if ds != nil {
				ds[j] = dz
			}
		}
		if ds != nil {
			return [][]float64{dx, ds}, true, nil
		}
		return [][]float64{dx}, true, nil
	case XentLoss:
		x, lab := in(0), in(1)
		loss := make([]float64, o.Rows)
		for r := range o.Rows {
			l := int(lab[r])
			if l < 0 || l >= o.Classes {
				return nil, true, fmt.Errorf("%w: %s: row %d has label %d, want [0, %d)", ErrLabels, op.Kernel(), r, l, o.Classes)
			}
			row := x[r*o.Classes : (r+1)*o.Classes]
			mx := math.Inf(-1)
			for _, v := range row {
				mx = math.Max(mx, v)
			}
			s := 0.0
			for _, v := range row {
				s += math.Exp(v - mx)
			}
			loss[r] = math.Log(s) + mx - row[l]
		}
		return [][]float64{loss}, true, nil
	case XentBackward:
		p, lab := in(0), in(1)
		d := make([]float64, o.Rows*o.Classes)
		scale := 1 / float64(o.Rows)
		for r := range o.Rows {
			l := int(lab[r])
			if l < 0 || l >= o.Classes {
				return nil, true, fmt.Errorf("%w: %s: row %d has label %d, want [0, %d)", ErrLabels, op.Kernel(), r, l, o.Classes)
			}
			for j := range o.Classes {
				v := p[r*o.Classes+j]
				if j == l {
					v--
				}
				d[r*o.Classes+j] = v * scale
			}
		}
		return [][]float64{d}, true, nil
	case ColumnSum:
		x := in(0)
		out := make([]float64, o.Cols)
		for r := range o.Rows {
			for j := range o.Cols {
				out[j] += x[r*o.Cols+j]
			}
		}
		return [][]float64{out}, true, nil
	case PoolBackward:
		return [][]float64{refPoolBackward(o.Pool, in)}, true, nil
	case SplitSum:
		part := in(0)
		out := make([]float64, o.Elems)
		for s := range o.Parts {
			for i := range out {
				out[i] += part[s*o.Elems+i]
			}
		}
		return [][]float64{out}, true, nil
	case SGD:
		w, g, m := in(0), in(1), in(2)
		lr, mu := o.lrMomentum()
		wo, mo := make([]float64, o.Elems), make([]float64, o.Elems)
		for i := range wo {
			// The kernel computes in fp32: round as it does.
			mm := float64(float32(float64(mu)*m[i] + g[i]))
			mo[i] = mm
			wo[i] = w[i] - float64(lr)*mm
		}
		return [][]float64{wo, mo}, true, nil
	}
	return nil, false, nil
}

// refPoolBackward scatters each output's gradient onto its window (average)
// or its first maximum (max).
func refPoolBackward(q Pool, in func(int) []float64) []float64 {
	oh, ow := q.Out()
	st := max(q.Stride, 1)
	dy := in(0)
	var x []float64
	if q.Max {
		x = in(1)
	}
	dx := make([]float64, q.N*q.H*q.W*q.C)
	at := func(n, iy, ix, ch int) int { return ((n*q.H+iy)*q.W+ix)*q.C + ch }
	for n := range q.N {
		for oy := range oh {
			for ox := range ow {
				for ch := range q.C {
					g := dy[((n*oh+oy)*ow+ox)*q.C+ch]
					by, bx := -1, -1
					best := 0.0
					for ry := range q.R {
						for sx := range q.S {
							iy, ix := oy*st-q.Pad+ry, ox*st-q.Pad+sx
							if iy < 0 || iy >= q.H || ix < 0 || ix >= q.W {
								continue
							}
							if !q.Max {
								dx[at(n, iy, ix, ch)] += g / float64(q.R*q.S)
								continue
							}
							if v := x[at(n, iy, ix, ch)]; by < 0 || v > best {
								best, by, bx = v, iy, ix
							}
						}
					}
					if q.Max && by >= 0 {
						dx[at(n, by, bx, ch)] += g
					}
				}
			}
		}
	}
	return dx
}

// refConvWgradSplit is the split wgrad's partial dW: one refConvWgrad per
// chunk of N/split images, concatenated.
func refConvWgradSplit(g convGeom, split int, x, dy []float64) []float64 {
	imgs := g.n / split
	c := g
	c.n = imgs
	xs, ys := imgs*g.h*g.w*g.c, imgs*g.oh*g.ow*g.oc
	var out []float64
	for s := range split {
		out = append(out, refConvWgrad(c, x[s*xs:(s+1)*xs], dy[s*ys:(s+1)*ys])...)
	}
	return out
}
