package kernels

import (
	"fmt"

	"atoll/gpu"
)

// DType is an element type.
type DType uint8

const (
	F32 DType = iota
	F16
	BF16
	I32 // indices (Gather)
)

// Size is the element size in bytes.
func (d DType) Size() int {
	if d == F32 || d == I32 {
		return 4
	}
	return 2
}

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	case I32:
		return "i32"
	}
	return fmt.Sprintf("dtype(%d)", d)
}

// Act is a fused activation.
type Act uint8

const (
	ActNone Act = iota
	ActReLU
	ActGELU
	ActReLU6
	ActTanh
)

func (a Act) String() string {
	if int(a) < 5 {
		return [...]string{"none", "relu", "gelu", "relu6", "tanh"}[a]
	}
	return fmt.Sprintf("act(%d)", a)
}

// Geometry is how an op is launched: its logical grid (one logical block
// per CUDA block in the Plain form), block shape, dynamic shared memory, and
// the registers per thread the kernel is expected to use (the profiler
// replaces the estimate with the driver's figure).
type Geometry struct {
	Grid      gpu.Dim3
	Block     gpu.Dim3
	SharedMem int
	Registers int
}

// Op is one kernel launch of a model: a kernel family of the CUDA library
// at a concrete shape. Every op knows its launch geometry, FLOPs and the
// DRAM bytes it must move at least (each input read once, each output
// written once), so achieved throughput falls out of a timed run.
type Op interface {
	// Kernel is the CUDA function family, e.g. "gemm_bf16" or "layernorm".
	Kernel() string
	Geometry() Geometry
	FLOPs() float64
	Bytes() float64
	// Shape describes the op's sizes, e.g. "M=3136 N=64 K=576".
	Shape() string
}

// GEMM tiles. Large problems use 128x128 tiles with 256 threads (8 warps,
// each a 64x32 warp tile on mma.sync); small ones 64x64 with 128 threads so
// batch-1 layers still spread over the SMs.
const (
	gemmAPad = 8 // elements of padding per shared-memory A row (cuda/gemm.cu GEMM_APAD)
	gemmBPad = 8 // per B row (GEMM_BPAD)
)

// gemmBK is the GEMM's K-tile. The module sources define GEMM_BK and
// GEMM_STAGES from gemmBK and gemmStages, so the Go geometry and the CUDA
// body cannot disagree (variables so that the GPU tuning test can try
// others). 64 with two stages measured fastest on an H200 (309 TFLOP/s
// bf16 at 4096^3 against 270 for K-tiles of 32 with 3 or 4 stages; see
// docs/kernels.md).
var gemmBK = 64

// gemmStages is the depth of the GEMM's cp.async shared-memory pipeline
// (cuda/gemm.cu GEMM_STAGES): 2 is double buffering.
var gemmStages = 2

// gemmSmem is the dynamic shared memory of a GEMM body: gemmStages stages of
// a BM x (BK+8) A tile and a BK x (BN+8) B tile of 16-bit elements (the
// padding avoids bank conflicts on ldmatrix): 71,680 bytes for 128x128
// tiles with BK 64 and 2 stages (two blocks fit on a Hopper SM), 36,864
// for 64x64. Above 48 KiB the device raises the function's dynamic
// shared-memory limit at launch.
func gemmSmem(bm, bn int) int {
	return gemmStages * (bm*(gemmBK+gemmAPad) + gemmBK*(bn+gemmBPad)) * 2
}

func gemmTile(m, n int) (bm, bn, threads int) {
	if ceilDiv(m, 128)*ceilDiv(n, 128) >= 132 {
		return 128, 128, gemmThreads128
	}
	return 64, 64, 128
}

// gemmThreads128 is the block size of the 128x128 tile (a variable so that
// the GPU tuning test can compare warp layouts).
var gemmThreads128 = 256

// GEMM is C[batch][M][N] = act(A[batch][M][K] · B[batch][K][N] + bias[N]) with
// 16-bit inputs and fp32 accumulation.
type GEMM struct {
	M, N, K int
	Batch   int   // batched GEMM (attention); 0 or 1 = one
	In      DType // BF16 or F16
	Out     DType // output type
	Bias    bool
	// BiasType is the bias's type: F32 (the zero value) or, with a 16-bit
	// output, the output's type (as PyTorch keeps it; a BLAS such as
	// cuBLASLt takes only that with a 16-bit output).
	BiasType DType
	Act      Act
	// SplitK cuts K into chunks computed by separate logical blocks (split-K):
	// 0 chooses from the shape (AutoSplitK), 1 never splits, n ≥ 2 asks for
	// n (at most one per K-tile and 32). Only an unbatched GEMM splits.
	SplitK int
}

func (g GEMM) batch() int { return max(g.Batch, 1) }

// splitKTiles is the number of output tiles from which a GEMM is not split:
// about one per SM of the largest GPUs (132 on an H100 SXM).
const splitKTiles = 128

// splitKTarget is the number of logical blocks split-K aims for: about four
// 64x64 tiles per SM (132 on an H100 SXM), so that a batch-1 layer with a
// few output tiles and a long K is neither one short wave on a handful of
// SMs nor, when it streams its weights (a GEMV), short of loads in flight.
const splitKTarget = 512

// maxSplitK is the most splits of one GEMM.
const maxSplitK = 32

// splitKMinTiles is the shortest K chunk of an automatic split, in K-tiles:
// shorter chunks spend more on the pipeline's start and the partials than
// they save.
const splitKMinTiles = 4

// AutoSplitK is the split a GEMM of tiles output tiles and reduction length
// k gets by default: 1 (none) from splitKTiles tiles or with fewer than two
// chunks of splitKMinTiles K-tiles; otherwise enough splits to reach
// splitKTarget blocks (at most maxSplitK), evened out so that no chunk is
// shorter than needed.
func AutoSplitK(tiles, k int) int {
	kt := ceilDiv(k, gemmBK)
	if tiles <= 0 || tiles >= splitKTiles {
		return 1
	}
	s := min(ceilDiv(splitKTarget, tiles), kt/splitKMinTiles, maxSplitK)
	if s < 2 {
		return 1
	}
	return ceilDiv(kt, ceilDiv(kt, s))
}

// tiles is the number of output tiles of one batch entry.
func (g GEMM) tiles() int {
	bm, bn, _ := gemmTile(g.M, g.N)
	return ceilDiv(g.M, bm) * ceilDiv(g.N, bn)
}

// splits is the number of K chunks the GEMM runs in (1: not split).
func (g GEMM) splits() int {
	if g.batch() > 1 || g.SplitK == 1 || g.K <= 0 {
		return 1
	}
	if g.SplitK == 0 {
		return AutoSplitK(g.tiles(), g.K)
	}
	kt := ceilDiv(g.K, gemmBK)
	return ceilDiv(kt, ceilDiv(kt, min(g.SplitK, kt))) // no empty chunk
}

// kChunk is the K range of one split, a whole number of K-tiles.
func (g GEMM) kChunk() int {
	kt := ceilDiv(g.K, gemmBK)
	return ceilDiv(kt, g.splits()) * gemmBK
}

// Splits is the number of K chunks the op runs in (split-K; 1: not split).
// A split op keeps f32 partial tiles and per-tile tags in a Scratch tensor;
// it runs whole in one launch or one resumable instance (no sliced
// launches), and a Reset re-run must be a new Library.Launch.
func Splits(op Op) int {
	switch o := op.(type) {
	case GEMM:
		return o.splits()
	case Conv2D:
		return o.gemm().splits() // only the forward pass's GEMM may split
	}
	return 1
}

func (g GEMM) Kernel() string {
	bm, bn, _ := gemmTile(g.M, g.N)
	return fmt.Sprintf("gemm_%s_%dx%d", g.In, bm, bn)
}

func (g GEMM) Geometry() Geometry {
	bm, bn, th := gemmTile(g.M, g.N)
	smem := gemmSmem(bm, bn) // pipelined A and B tiles
	regs := 128
	if th == 128 {
		regs = 96
	}
	return Geometry{
		Grid:      gpu.Dim3{X: ceilDiv(g.N, bn), Y: ceilDiv(g.M, bm), Z: g.batch() * g.splits()},
		Block:     gpu.D1(th),
		SharedMem: smem,
		Registers: regs,
	}
}

func (g GEMM) FLOPs() float64 {
	return 2 * float64(g.M) * float64(g.N) * float64(g.K) * float64(g.batch())
}

func (g GEMM) Bytes() float64 {
	b := float64(g.batch())
	in := float64(g.In.Size())
	bytes := b * (float64(g.M*g.K)*in + float64(g.K*g.N)*in + float64(g.M*g.N)*float64(g.Out.Size()))
	if g.Bias {
		bytes += float64(g.N * g.BiasType.Size())
	}
	return bytes
}

func (g GEMM) Shape() string {
	sh := fmt.Sprintf("M=%d N=%d K=%d batch=%d act=%s", g.M, g.N, g.K, g.batch(), g.Act)
	if s := g.splits(); s > 1 {
		sh += fmt.Sprintf(" splitk=%d", s)
	}
	return sh
}

// Conv2D is a convolution in NHWC as an implicit GEMM: M = N·OH·OW output
// pixels, N = output channels, K = R·S·C. Bias and activation are fused.
type Conv2D struct {
	N, H, W, C     int // input
	OutC, R, S     int // filters
	Stride, Pad    int
	In             DType
	Bias           bool
	BiasType       DType // F32 (the zero value) or In, as GEMM.BiasType
	Act            Act
	Residual       bool // adds a residual input of the output's shape before the activation
	BackwardData   bool // the dX pass of training (same GEMM shape, transposed roles)
	BackwardFilter bool // the dW pass of training: M = OutC, N = R·S·C, K = N·OH·OW
	// Split > 0 (BackwardFilter only; N a multiple of Split) splits dW's
	// sum over the images into Split partial sums (split-K: grid z = Split,
	// K = (N/Split)·OH·OW each), written as f32 [Split][R][S][C][OutC] and
	// added up by SplitSum: layers with few output tiles and a long K
	// (early ResNet stages) then fill the GPU. Split 1 is one f32 partial.
	Split int
	// SplitK is the forward pass's split-K, as GEMM.SplitK (0: from the
	// shape; 1: none).
	SplitK int
}

func (c Conv2D) forward() bool { return !c.BackwardData && !c.BackwardFilter }

// Pointwise reports whether c is a 1x1, stride-1, unpadded convolution:
// in NHWC a GEMM over the pixels, with no patches to gather.
func (c Conv2D) Pointwise() bool {
	return c.R == 1 && c.S == 1 && max(c.Stride, 1) == 1 && c.Pad == 0
}

// Out is the output's spatial size.
func (c Conv2D) Out() (oh, ow int) {
	s := max(c.Stride, 1)
	return (c.H+2*c.Pad-c.R)/s + 1, (c.W+2*c.Pad-c.S)/s + 1
}

// gemm is the implicit GEMM the kernel runs (see cuda/gemm.cu):
// forward M = N·OH·OW, N = OutC, K = R·S·C; backward data (dX) M = N·H·W,
// N = C, K = R·S·OutC; backward filter (dW) M = R·S·C, N = OutC, K = N·OH·OW.
func (c Conv2D) gemm() GEMM {
	oh, ow := c.Out()
	m, n, k := c.N*oh*ow, c.OutC, c.R*c.S*c.C
	switch {
	case c.BackwardData:
		m, n, k = c.N*c.H*c.W, c.C, c.R*c.S*c.OutC
	case c.BackwardFilter:
		m, n, k = c.R*c.S*c.C, c.OutC, c.N*oh*ow
		if c.Split > 0 { // its own split over the images: never split-K
			return GEMM{M: m, N: n, K: c.N / c.Split * oh * ow, Batch: c.Split, In: c.In, Out: F32, SplitK: 1}
		}
	}
	split := 1
	if c.forward() {
		split = c.SplitK
	}
	return GEMM{M: m, N: n, K: k, In: c.In, Out: c.In, Bias: c.Bias, BiasType: c.BiasType, Act: c.Act, SplitK: split}
}

func (c Conv2D) Kernel() string {
	bm, bn, _ := gemmTile(c.gemm().M, c.gemm().N)
	kind := "conv2d"
	switch {
	case c.BackwardData:
		kind = "conv2d_dgrad"
	case c.BackwardFilter && c.Split > 0:
		kind = "conv2d_wgrad_split"
	case c.BackwardFilter:
		kind = "conv2d_wgrad"
	}
	return fmt.Sprintf("%s_%s_%dx%d", kind, c.In, bm, bn)
}

func (c Conv2D) Geometry() Geometry { return c.gemm().Geometry() }

// FLOPs counts the useful multiply-adds of the convolution (the forward
// count for all three passes; with stride > 1 the dX kernel also multiplies
// the zeros between strided taps, which this does not count).
func (c Conv2D) FLOPs() float64 {
	oh, ow := c.Out()
	return 2 * float64(c.N*oh*ow) * float64(c.OutC) * float64(c.R*c.S*c.C)
}

func (c Conv2D) Bytes() float64 {
	oh, ow := c.Out()
	e := float64(c.In.Size())
	in := float64(c.N*c.H*c.W*c.C) * e
	w := float64(c.OutC*c.R*c.S*c.C) * e
	if c.BackwardFilter && c.Split > 0 {
		w = float64(c.Split*c.OutC*c.R*c.S*c.C) * 4 // f32 partial dW
	}
	out := float64(c.N*oh*ow*c.OutC) * e
	b := in + w + out
	if c.Residual {
		b += out
	}
	if c.Bias {
		b += float64(c.OutC * c.BiasType.Size())
	}
	return b
}

func (c Conv2D) Shape() string {
	oh, ow := c.Out()
	sh := fmt.Sprintf("N=%d %dx%dx%d -> %dx%dx%d k=%dx%d s=%d", c.N, c.H, c.W, c.C, oh, ow, c.OutC, c.R, c.S, max(c.Stride, 1))
	if c.BackwardFilter && c.Split > 0 {
		sh += fmt.Sprintf(" split=%d", c.Split)
	}
	if s := Splits(c); s > 1 {
		sh += fmt.Sprintf(" splitk=%d", s)
	}
	return sh
}

// Depthwise is a depthwise convolution in NHWC: one thread per output
// element, 256 threads per block.
type Depthwise struct {
	N, H, W, C  int
	R, S        int
	Stride, Pad int
	In          DType
	Act         Act
}

func (d Depthwise) Out() (oh, ow int) {
	s := max(d.Stride, 1)
	return (d.H+2*d.Pad-d.R)/s + 1, (d.W+2*d.Pad-d.S)/s + 1
}

func (d Depthwise) outputs() int { oh, ow := d.Out(); return d.N * oh * ow * d.C }

func (d Depthwise) Kernel() string { return "depthwise_" + d.In.String() }
func (d Depthwise) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(d.outputs(), 256)), Block: gpu.D1(256), Registers: 32}
}
func (d Depthwise) FLOPs() float64 { return 2 * float64(d.outputs()*d.R*d.S) }
func (d Depthwise) Bytes() float64 {
	e := float64(d.In.Size())
	return float64(d.N*d.H*d.W*d.C)*e + float64(d.C*d.R*d.S)*e + float64(d.outputs())*e
}
func (d Depthwise) Shape() string {
	oh, ow := d.Out()
	return fmt.Sprintf("N=%d %dx%dx%d -> %dx%d k=%dx%d s=%d", d.N, d.H, d.W, d.C, oh, ow, d.R, d.S, max(d.Stride, 1))
}

// Elementwise is out = act(a [+ b] [+ bias]) over Elems elements, 4
// elements per thread, 256 threads per block. Inputs counts the tensors
// read (1 or 2); it also covers optimizer updates (Inputs = 3 for SGD with
// momentum: weight, grad, momentum; Outputs = 2).
//
// Names the library runs: "bias_act" (out = act(a + bias[i mod Cols])),
// "add" (out = act(a + b)), "act", "relu", "gelu", "relu6" (out = act(a)),
// "tanh" (out = tanh(a)), "sgd" (m' = Momentum·m + g; w' = w − LR·m'). Other names describe ops for
// costing only; Library.Launch rejects them with ErrUnsupported.
type Elementwise struct {
	Name    string // "bias_act", "add", "sgd", "adam", "gelu", ...
	Elems   int
	Inputs  int
	Outputs int
	In      DType
	Act     Act
	// Cols is the bias period of "bias_act" (the channel count); 0 means
	// Elems (one bias value per element).
	Cols int
	// LR and Momentum of "sgd"; 0 means 0.01 and 0.9.
	LR, Momentum float32
}

func (e Elementwise) outs() int { return max(e.Outputs, 1) }
func (e Elementwise) Kernel() string {
	return "ew_" + e.Name + "_" + e.In.String()
}
func (e Elementwise) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(e.Elems, 1024)), Block: gpu.D1(256), Registers: 24}
}
func (e Elementwise) FLOPs() float64 { return float64(e.Elems * max(e.Inputs, 1) * 2) }
func (e Elementwise) Bytes() float64 {
	return float64(e.Elems*(max(e.Inputs, 1)+e.outs())) * float64(e.In.Size())
}
func (e Elementwise) Shape() string {
	return fmt.Sprintf("n=%d in=%d out=%d act=%s", e.Elems, max(e.Inputs, 1), e.outs(), e.Act)
}

// LayerNorm normalises Rows rows of Cols elements: one block of 256 threads
// per row (warp-shuffle reductions), 8 rows per block when rows are short.
type LayerNorm struct {
	Rows, Cols int
	In         DType
}

func (l LayerNorm) Kernel() string { return "layernorm_" + l.In.String() }
func (l LayerNorm) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(l.Rows), Block: gpu.D1(256), Registers: 32}
}
func (l LayerNorm) FLOPs() float64 { return 8 * float64(l.Rows*l.Cols) }
func (l LayerNorm) Bytes() float64 {
	return 2*float64(l.Rows*l.Cols)*float64(l.In.Size()) + 2*float64(l.Cols*4)
}
func (l LayerNorm) Shape() string { return fmt.Sprintf("rows=%d cols=%d", l.Rows, l.Cols) }

// Softmax over the last axis: one block of 128 threads per row.
type Softmax struct {
	Rows, Cols int
	In         DType
}

func (s Softmax) Kernel() string { return "softmax_" + s.In.String() }
func (s Softmax) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(s.Rows), Block: gpu.D1(128), Registers: 32}
}
func (s Softmax) FLOPs() float64 { return 5 * float64(s.Rows*s.Cols) }
func (s Softmax) Bytes() float64 { return 2 * float64(s.Rows*s.Cols) * float64(s.In.Size()) }
func (s Softmax) Shape() string  { return fmt.Sprintf("rows=%d cols=%d", s.Rows, s.Cols) }

// Pool is max or average pooling in NHWC, 1024 outputs per block of 256
// threads (four channels of an output a thread where channels allow).
type Pool struct {
	N, H, W, C  int
	R, S        int
	Stride, Pad int
	Max         bool
	In          DType
}

func (p Pool) Out() (oh, ow int) {
	s := max(p.Stride, 1)
	return (p.H+2*p.Pad-p.R)/s + 1, (p.W+2*p.Pad-p.S)/s + 1
}
func (p Pool) outputs() int { oh, ow := p.Out(); return p.N * oh * ow * p.C }
func (p Pool) Kernel() string {
	if p.Max {
		return "maxpool_" + p.In.String()
	}
	return "avgpool_" + p.In.String()
}
func (p Pool) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(p.outputs(), 1024)), Block: gpu.D1(256), Registers: 32}
}
func (p Pool) FLOPs() float64 { return float64(p.outputs() * p.R * p.S) }
func (p Pool) Bytes() float64 {
	return float64(p.N*p.H*p.W*p.C+p.outputs()) * float64(p.In.Size())
}
func (p Pool) Shape() string {
	oh, ow := p.Out()
	return fmt.Sprintf("N=%d %dx%dx%d -> %dx%d k=%dx%d s=%d", p.N, p.H, p.W, p.C, oh, ow, p.R, p.S, max(p.Stride, 1))
}

// Reduce sums (or averages) Cols elements of each of Rows rows: one block of
// 256 threads per 32 rows-of-output tile; used for global average pooling,
// bias gradients and losses.
type Reduce struct {
	Name       string // "mean", "sum", "xent"
	Rows, Cols int    // reduce over Cols for each of Rows outputs
	In         DType
}

func (r Reduce) Kernel() string { return "reduce_" + r.Name + "_" + r.In.String() }
func (r Reduce) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(max(ceilDiv(r.Rows, 32), 1)), Block: gpu.D1(256), Registers: 32}
}
func (r Reduce) FLOPs() float64 { return float64(r.Rows * r.Cols) }
func (r Reduce) Bytes() float64 {
	return float64(r.Rows*r.Cols)*float64(r.In.Size()) + float64(r.Rows*4)
}
func (r Reduce) Shape() string { return fmt.Sprintf("rows=%d cols=%d", r.Rows, r.Cols) }

// Gather reads Rows rows of Cols elements from a table by index (embedding
// lookups); 256 threads per block, 4 elements per thread.
type Gather struct {
	Rows, Cols int
	In         DType
	// Vocab is the table's row count; 0 means Rows. Indices outside
	// [0, Vocab) produce zero rows.
	Vocab int
}

func (g Gather) Kernel() string { return "gather_" + g.In.String() }
func (g Gather) Geometry() Geometry {
	return Geometry{Grid: gpu.D1(ceilDiv(g.Rows*g.Cols, 1024)), Block: gpu.D1(256), Registers: 24}
}
func (g Gather) FLOPs() float64 { return 0 }
func (g Gather) Bytes() float64 { return 2 * float64(g.Rows*g.Cols) * float64(g.In.Size()) }
func (g Gather) Shape() string  { return fmt.Sprintf("rows=%d cols=%d", g.Rows, g.Cols) }

func ceilDiv(a, b int) int { return (a + b - 1) / b }
