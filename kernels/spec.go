package kernels

import (
	"errors"
	"fmt"

	"atoll/gpu"
)

// Sentinel errors.
var (
	// ErrShape: an op whose sizes or types the kernel cannot run (zero or
	// negative sizes, an empty output, an input type the kernel lacks).
	ErrShape = errors.New("kernels: bad shape")
	// ErrUnsupported: an op the library describes for costing but has no
	// kernel for (e.g. Elementwise "adam"), or a form it cannot take.
	ErrUnsupported = errors.New("kernels: unsupported")
	// ErrBuffers: buffers that do not belong to the op (missing or
	// mis-sized tensors).
	ErrBuffers = errors.New("kernels: bad buffers")
)

// Role says what a kernel does with a tensor.
type Role uint8

const (
	Input  Role = iota // read; filled with seeded random data
	Weight             // read; filled with seeded random data
	Output             // written; poisoned with NaN before checked runs
	// Scratch is the kernel's own device memory between its blocks (split-K
	// partials and counts): zeroed when allocated, then left to the kernel.
	// It belongs to one op instance and is no model tensor.
	Scratch
)

func (r Role) String() string {
	switch r {
	case Input:
		return "input"
	case Weight:
		return "weight"
	case Output:
		return "output"
	case Scratch:
		return "scratch"
	}
	return fmt.Sprintf("role(%d)", r)
}

// TensorSpec is one buffer of an op.
type TensorSpec struct {
	Name  string
	DType DType
	Elems int
	Role  Role
	// IntRange, for I32 tensors, is the exclusive upper bound of the random
	// indices (the gather vocabulary).
	IntRange int
}

// Bytes is the tensor's size.
func (t TensorSpec) Bytes() int64 { return int64(t.Elems) * int64(t.DType.Size()) }

// kspec is everything the library needs to compile and launch an op.
type kspec struct {
	name    string // C identifier of the kernel instance (op.Kernel())
	family  string // source file: "gemm" or "misc"
	param   string // C parameter struct
	body    string // C++ callable taking (int lb, const P&)
	threads int
	smem    int
	grid    gpu.Dim3 // logical grid (Plain/Reset launch grid)
	regs    int
	chunk   int  // default logical blocks per resumable ticket
	noSync  bool // the body uses no shared memory (no barrier between a ticket's blocks)
	tensors []TensorSpec
	// pack appends the parameter struct, given the tensors' device pointers
	// in the order of tensors.
	pack func(a *gpu.Args, ptr []gpu.Ptr)
}

func (k *kspec) logical() int { return k.grid.Count() }

// split reports a split-K kernel (its last tensor the Scratch): it runs
// whole, one launch or one resumable instance, never sliced.
func (k *kspec) split() bool {
	return len(k.tensors) > 0 && k.tensors[len(k.tensors)-1].Role == Scratch
}

// runTail reports a parameter struct that ends with the run's identity,
// which the library appends (GemmP's progress and epoch; packRunTail).
func (k *kspec) runTail() bool { return k.param == "GemmP" }

func dtC(d DType) string {
	switch d {
	case F16:
		return "DT_F16"
	case BF16:
		return "DT_BF16"
	}
	return "DT_F32"
}

func shapeErr(op Op, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s: %s", ErrShape, op.Kernel(), op.Shape(), fmt.Sprintf(format, args...))
}

func positive(vals ...int) bool {
	for _, v := range vals {
		if v <= 0 {
			return false
		}
	}
	return true
}

func validFloat(d DType) bool { return d == F32 || d == F16 || d == BF16 }
func valid16(d DType) bool    { return d == F16 || d == BF16 }
func validAct(a Act) bool     { return a <= ActTanh }

// Elementwise op codes (cuda/misc.cu EW_*).
const (
	ewBiasAct = 0
	ewAdd     = 1
	ewAct     = 2
	ewSGD     = 3
)

func ewCode(e Elementwise) (code int, act Act, err error) {
	switch e.Name {
	case "bias_act":
		return ewBiasAct, e.Act, nil
	case "add":
		return ewAdd, e.Act, nil
	case "act":
		return ewAct, e.Act, nil
	case "relu":
		return ewAct, ActReLU, nil
	case "gelu":
		return ewAct, ActGELU, nil
	case "relu6":
		return ewAct, ActReLU6, nil
	case "tanh":
		return ewAct, ActTanh, nil
	case "sgd":
		return ewSGD, ActNone, nil
	}
	return 0, 0, fmt.Errorf("%w: elementwise %q has no kernel (have bias_act, add, act, relu, gelu, relu6, tanh, sgd)", ErrUnsupported, e.Name)
}

func (e Elementwise) lrMomentum() (float32, float32) {
	lr, mu := e.LR, e.Momentum
	if lr == 0 {
		lr = 0.01
	}
	if mu == 0 {
		mu = 0.9
	}
	return lr, mu
}

func (e Elementwise) cols() int {
	if e.Cols > 0 {
		return e.Cols
	}
	return e.Elems
}

func (g Gather) vocab() int {
	if g.Vocab > 0 {
		return g.Vocab
	}
	return g.Rows
}

// gemmParams is the C struct GemmP (cuda/gemm.cu) in Go.
type gemmParams struct {
	a, b, c, bias, resid            gpu.Ptr
	sA, sB, sC                      int64
	m, n, k, batch, act             int
	vecA, vecB                      bool
	img, h, w, ch, oh, ow, oc, r, s int
	stride, pad                     int
	ws, tags, runs                  gpu.Ptr // split-K partials, per-tile tags, run counter (Scratch)
	splits, kchunk                  int
	biasDT                          DType // the bias's type (F32 or 16-bit), packed above act's byte
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

func dtCode(d DType) int32 {
	switch d {
	case F16:
		return 1
	case BF16:
		return 2
	}
	return 0
}

func (g gemmParams) pack(a *gpu.Args, outDT DType) {
	a.Ptr(g.a).Ptr(g.b).Ptr(g.c).Ptr(g.bias).Ptr(g.resid)
	a.U64(uint64(g.sA)).U64(uint64(g.sB)).U64(uint64(g.sC))
	for _, v := range []int32{int32(g.m), int32(g.n), int32(g.k), int32(g.batch), int32(g.act) | dtCode(g.biasDT)<<8, dtCode(outDT), b2i(g.vecA), b2i(g.vecB),
		int32(g.img), int32(g.h), int32(g.w), int32(g.ch), int32(g.oh), int32(g.ow), int32(g.oc), int32(g.r), int32(g.s), int32(g.stride), int32(g.pad)} {
		a.I32(v)
	}
	a.Ptr(g.ws).Ptr(g.tags).Ptr(g.runs).I32(int32(max(g.splits, 1))).I32(int32(g.kchunk))
	// the library appends the run's identity (progress, epoch): runTail
}

// splitScratch is the Scratch tensor of a split-K GEMM: f32 partial tiles
// [splits][M][N] (padded to 16 bytes), one uint64 tag per output tile, and
// a uint32 run counter (padded to 8 bytes).
func splitScratch(g GEMM) TensorSpec {
	return TensorSpec{Name: "splitk", DType: F32, Elems: splitPart(g) + 2*g.tiles() + 2, Role: Scratch}
}

// splitPart is the f32 elements of a split GEMM's partial tiles, padded to
// 16 bytes.
func splitPart(g GEMM) int { return (g.splits()*g.M*g.N + 3) &^ 3 }

// withSplit adds the split-K fields to g for the Scratch tensor at ws.
func (q gemmParams) withSplit(g GEMM, ws gpu.Ptr) gemmParams {
	s := g.splits()
	if s <= 1 {
		return q
	}
	q.ws, q.tags = ws, ws+gpu.Ptr(splitPart(g)*4)
	q.runs = q.tags + gpu.Ptr(8*g.tiles())
	q.splits, q.kchunk = s, g.kChunk()
	q.sA, q.sB, q.batch = 0, 0, 1
	return q
}

func gemmBody(prob string, in DType, bm, bn, th int) string {
	return fmt.Sprintf("body_gemm<%s, %s, %d, %d, %d>", prob, dtC(in), bm, bn, th)
}

// checkSplitK refuses an explicit split-K the GEMM g cannot take.
func checkSplitK(op Op, g GEMM) error {
	switch s := g.SplitK; {
	case s < 0:
		return shapeErr(op, "SplitK %d must not be negative", s)
	case s > 1 && g.batch() > 1:
		return shapeErr(op, "SplitK %d: a batched GEMM does not split K", s)
	case s > maxSplitK || s > ceilDiv(g.K, gemmBK):
		return shapeErr(op, "SplitK %d: at most %d and one per K-tile of %d (K = %d)", s, maxSplitK, gemmBK, g.K)
	}
	return nil
}

// spec returns the kernel description of op, or an error wrapping ErrShape
// or ErrUnsupported.
func spec(op Op) (*kspec, error) {
	if op == nil {
		return nil, fmt.Errorf("%w: nil op", ErrShape)
	}
	geo := op.Geometry()
	k := &kspec{name: op.Kernel(), threads: geo.Block.Count(), smem: geo.SharedMem, grid: geo.Grid, regs: geo.Registers, chunk: 1}
	switch op.(type) {
	case Elementwise, Gather, Pool, Depthwise, Reduce:
		k.chunk = 8 // ~1 µs logical blocks: amortise the ticket and the flag check
		k.noSync = true
	}
	var err error
	switch o := op.(type) {
	case GEMM:
		err = gemmSpec(o, k)
	case Conv2D:
		err = conv2dSpec(o, k)
	case Depthwise:
		err = depthwiseSpec(o, k)
	case Elementwise:
		err = elementwiseSpec(o, k)
	case LayerNorm:
		err = layerNormSpec(o, k)
	case Softmax:
		err = softmaxSpec(o, k)
	case Pool:
		err = poolSpec(o, k)
	case Fault:
		err = faultSpec(o, k)
	case Reduce:
		err = reduceSpec(o, k)
	case StridedGEMM:
		err = sgemmSpec(o, k)
	case Gather:
		err = gatherSpec(o, k)
	default:
		var ok bool
		if ok, err = trainSpec(op, k); !ok { // training ops: train.go
			if ok, err = bertTrainSpec(op, k); !ok { // BERT training ops: bert_train.go
				return nil, fmt.Errorf("%w: op type %T", ErrUnsupported, op)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if k.grid.Count() <= 0 || k.threads <= 0 {
		return nil, shapeErr(op, "empty launch grid")
	}
	return k, nil
}

// gemmSpec fills k for a GEMM op.
func gemmSpec(o GEMM, k *kspec) error {
	if !positive(o.M, o.N, o.K) || o.Batch < 0 {
		return shapeErr(o, "M, N, K must be positive and Batch non-negative")
	}
	if !valid16(o.In) || !validFloat(o.Out) || !validAct(o.Act) {
		return shapeErr(o, "inputs must be bf16 or f16, output f32/f16/bf16, act known")
	}
	if o.BiasType != F32 && (!o.Bias || o.BiasType != o.Out) {
		return shapeErr(o, "BiasType %s: a bias is f32 or of the output's type (%s)", o.BiasType, o.Out)
	}
	if err := checkSplitK(o, o); err != nil {
		return err
	}
	bm, bn, th := gemmTile(o.M, o.N)
	k.family, k.param, k.body = "gemm", "GemmP", gemmBody("ProbGemm", o.In, bm, bn, th)
	b := o.batch()
	k.tensors = []TensorSpec{
		{Name: "A", DType: o.In, Elems: b * o.M * o.K, Role: Input},
		{Name: "B", DType: o.In, Elems: b * o.K * o.N, Role: Weight},
		{Name: "C", DType: o.Out, Elems: b * o.M * o.N, Role: Output},
	}
	if o.Bias {
		k.tensors = append(k.tensors, TensorSpec{Name: "bias", DType: o.BiasType, Elems: o.N, Role: Weight})
	}
	split := o.splits() > 1
	if split {
		k.tensors = append(k.tensors, splitScratch(o))
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		g := gemmParams{a: p[0], b: p[1], c: p[2], sA: int64(o.M * o.K), sB: int64(o.K * o.N), sC: int64(o.M * o.N),
			m: o.M, n: o.N, k: o.K, batch: b, act: int(o.Act), vecA: o.K%8 == 0, vecB: o.N%8 == 0}
		if o.Bias {
			g.bias, g.biasDT = p[3], o.BiasType
		}
		if split {
			g = g.withSplit(o, p[len(p)-1])
		}
		g.pack(a, o.Out)
	}
	return nil
}

// conv2dSpec fills k for a Conv2D op.
func conv2dSpec(o Conv2D, k *kspec) error {
	oh, ow := o.Out()
	if !positive(o.N, o.H, o.W, o.C, o.OutC, o.R, o.S) || o.Stride < 0 || o.Pad < 0 || oh <= 0 || ow <= 0 {
		return shapeErr(o, "sizes must be positive and the output non-empty")
	}
	if !valid16(o.In) || !validAct(o.Act) {
		return shapeErr(o, "input must be bf16 or f16")
	}
	if o.BackwardData && o.BackwardFilter {
		return shapeErr(o, "BackwardData and BackwardFilter are exclusive")
	}
	if o.BiasType != F32 && (!o.Bias || o.BiasType != o.In || !o.forward()) {
		return shapeErr(o, "BiasType %s: a forward convolution's bias is f32 or of its type (%s)", o.BiasType, o.In)
	}
	if o.Split < 0 || (o.Split > 0 && (!o.BackwardFilter || o.N%o.Split != 0)) {
		return shapeErr(o, "Split %d: only BackwardFilter splits, into a divisor of the batch N", o.Split)
	}
	if o.SplitK > 1 && !o.forward() {
		return shapeErr(o, "SplitK %d: only the forward pass splits K", o.SplitK)
	}
	g := o.gemm()
	if err := checkSplitK(o, g); err != nil {
		return err
	}
	bm, bn, th := gemmTile(g.M, g.N)
	st := max(o.Stride, 1)
	base := gemmParams{m: g.M, n: g.N, k: g.K, batch: 1, img: o.N, h: o.H, w: o.W, ch: o.C, oh: oh, ow: ow, oc: o.OutC, r: o.R, s: o.S, stride: st, pad: o.Pad}
	x := TensorSpec{Name: "X", DType: o.In, Elems: o.N * o.H * o.W * o.C}
	w := TensorSpec{Name: "W", DType: o.In, Elems: o.R * o.S * o.C * o.OutC}
	y := TensorSpec{Name: "Y", DType: o.In, Elems: o.N * oh * ow * o.OutC}
	k.family, k.param = "gemm", "GemmP"
	switch {
	case o.BackwardData:
		k.body = gemmBody("ProbConvDgrad", o.In, bm, bn, th)
		y.Name, y.Role, w.Role, x.Name, x.Role = "dY", Input, Weight, "dX", Output
		k.tensors = []TensorSpec{y, w, x}
		k.pack = func(a *gpu.Args, p []gpu.Ptr) {
			q := base
			q.a, q.b, q.c = p[0], p[1], p[2]
			q.vecA, q.vecB = o.OutC%8 == 0, o.OutC%8 == 0 // dY's and W's runs of output channels
			q.pack(a, o.In)
		}
	case o.BackwardFilter && o.Split > 0: // split-K over the images: f32 partial dW per split
		k.body = gemmBody("ProbConvWgradSplit", o.In, bm, bn, th)
		x.Role, y.Name, y.Role = Input, "dY", Input
		w.Name, w.Role, w.DType, w.Elems = "dW_partial", Output, F32, o.Split*w.Elems
		k.tensors = []TensorSpec{x, y, w}
		k.pack = func(a *gpu.Args, p []gpu.Ptr) {
			q := base
			q.a, q.b, q.c = p[0], p[1], p[2]
			q.vecA, q.vecB = o.C%8 == 0, o.OutC%8 == 0 // X's runs of channels, dY's of output channels
			q.batch, q.sB, q.sC = o.Split, int64(g.K)*int64(g.N), int64(g.M)*int64(g.N)
			q.pack(a, F32)
		}
	case o.BackwardFilter:
		k.body = gemmBody("ProbConvWgrad", o.In, bm, bn, th)
		x.Role, y.Name, y.Role, w.Name, w.Role = Input, "dY", Input, "dW", Output
		k.tensors = []TensorSpec{x, y, w}
		k.pack = func(a *gpu.Args, p []gpu.Ptr) {
			q := base
			q.a, q.b, q.c = p[0], p[1], p[2]
			q.vecA, q.vecB = o.C%8 == 0, o.OutC%8 == 0 // X's runs of channels, dY's of output channels
			q.pack(a, o.In)
		}
	default:
		k.body = gemmBody("ProbConvFwd", o.In, bm, bn, th)
		x.Role, w.Role, y.Role = Input, Weight, Output
		k.tensors = []TensorSpec{x, w, y}
		if o.Bias {
			k.tensors = append(k.tensors, TensorSpec{Name: "bias", DType: o.BiasType, Elems: o.OutC, Role: Weight})
		}
		if o.Residual {
			k.tensors = append(k.tensors, TensorSpec{Name: "resid", DType: o.In, Elems: y.Elems, Role: Input})
		}
		split := g.splits() > 1
		if split {
			k.tensors = append(k.tensors, splitScratch(g))
		}
		k.pack = func(a *gpu.Args, p []gpu.Ptr) {
			q := base
			q.a, q.b, q.c, q.act = p[0], p[1], p[2], int(o.Act)
			q.vecA, q.vecB = o.C%8 == 0, o.OutC%8 == 0
			i := 3
			if o.Bias {
				q.bias, q.biasDT = p[i], o.BiasType
				i++
			}
			if o.Residual {
				q.resid = p[i]
			}
			if split {
				q = q.withSplit(g, p[len(p)-1])
			}
			q.pack(a, o.In)
		}
	}
	return nil
}

// depthwiseSpec fills k for a Depthwise op.
func depthwiseSpec(o Depthwise, k *kspec) error {
	oh, ow := o.Out()
	if !positive(o.N, o.H, o.W, o.C, o.R, o.S) || o.Stride < 0 || o.Pad < 0 || oh <= 0 || ow <= 0 {
		return shapeErr(o, "sizes must be positive and the output non-empty")
	}
	if !validFloat(o.In) || !validAct(o.Act) {
		return shapeErr(o, "input must be f32, f16 or bf16")
	}
	k.family, k.param, k.body = "misc", "DwP", fmt.Sprintf("body_depthwise<%s>", dtC(o.In))
	k.tensors = []TensorSpec{
		{Name: "X", DType: o.In, Elems: o.N * o.H * o.W * o.C, Role: Input},
		{Name: "W", DType: o.In, Elems: o.R * o.S * o.C, Role: Weight},
		{Name: "Y", DType: o.In, Elems: o.outputs(), Role: Output},
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).Ptr(p[2])
		for _, v := range []int{o.N, o.H, o.W, o.C, oh, ow, o.R, o.S, max(o.Stride, 1), o.Pad, int(o.Act)} {
			a.I32(int32(v))
		}
	}
	return nil
}

// elementwiseSpec fills k for an Elementwise op.
func elementwiseSpec(o Elementwise, k *kspec) error {
	code, act, err := ewCode(o)
	if err != nil {
		return err
	}
	if !positive(o.Elems) || !validFloat(o.In) || !validAct(o.Act) || o.Cols < 0 {
		return shapeErr(o, "Elems must be positive, the type f32/f16/bf16")
	}
	k.family, k.param, k.body = "misc", "EwP", fmt.Sprintf("body_ew<%s>", dtC(o.In))
	n := o.Elems
	t := func(name string, r Role) TensorSpec { return TensorSpec{Name: name, DType: o.In, Elems: n, Role: r} }
	switch code {
	case ewBiasAct:
		k.tensors = []TensorSpec{t("a", Input), {Name: "bias", DType: F32, Elems: o.cols(), Role: Weight}, t("out", Output)}
	case ewAdd:
		k.tensors = []TensorSpec{t("a", Input), t("b", Input), t("out", Output)}
	case ewAct:
		k.tensors = []TensorSpec{t("a", Input), t("out", Output)}
	case ewSGD:
		k.tensors = []TensorSpec{t("w", Weight), t("g", Input), t("m", Input), t("w_out", Output), t("m_out", Output)}
	}
	lr, mu := o.lrMomentum()
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		var pa, pb, pc, bias, out, out2 gpu.Ptr
		switch code {
		case ewBiasAct:
			pa, bias, out = p[0], p[1], p[2]
		case ewAdd:
			pa, pb, out = p[0], p[1], p[2]
		case ewAct:
			pa, out = p[0], p[1]
		case ewSGD:
			pa, pb, pc, out, out2 = p[0], p[1], p[2], p[3], p[4]
		}
		a.Ptr(pa).Ptr(pb).Ptr(pc).Ptr(bias).Ptr(out).Ptr(out2).U64(uint64(n))
		a.I32(int32(o.cols())).I32(int32(code)).I32(int32(act)).F32(lr).F32(mu)
	}
	return nil
}

// layerNormSpec fills k for a LayerNorm op.
func layerNormSpec(o LayerNorm, k *kspec) error {
	if !positive(o.Rows, o.Cols) || !validFloat(o.In) {
		return shapeErr(o, "Rows and Cols must be positive, the type f32/f16/bf16")
	}
	k.family, k.param, k.body = "misc", "LnP", fmt.Sprintf("body_layernorm<%s>", dtC(o.In))
	k.tensors = []TensorSpec{
		{Name: "X", DType: o.In, Elems: o.Rows * o.Cols, Role: Input},
		{Name: "gamma", DType: F32, Elems: o.Cols, Role: Weight},
		{Name: "beta", DType: F32, Elems: o.Cols, Role: Weight},
		{Name: "Y", DType: o.In, Elems: o.Rows * o.Cols, Role: Output},
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).Ptr(p[3]).I32(int32(o.Rows)).I32(int32(o.Cols)).F32(LayerNormEps)
	}
	return nil
}

// softmaxSpec fills k for a Softmax op.
func softmaxSpec(o Softmax, k *kspec) error {
	if !positive(o.Rows, o.Cols) || !validFloat(o.In) {
		return shapeErr(o, "Rows and Cols must be positive, the type f32/f16/bf16")
	}
	k.family, k.param, k.body = "misc", "SmP", fmt.Sprintf("body_softmax<%s>", dtC(o.In))
	k.tensors = []TensorSpec{
		{Name: "X", DType: o.In, Elems: o.Rows * o.Cols, Role: Input},
		{Name: "Y", DType: o.In, Elems: o.Rows * o.Cols, Role: Output},
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).I32(int32(o.Rows)).I32(int32(o.Cols))
	}
	return nil
}

// poolSpec fills k for a Pool op.
func poolSpec(o Pool, k *kspec) error {
	oh, ow := o.Out()
	if !positive(o.N, o.H, o.W, o.C, o.R, o.S) || o.Stride < 0 || o.Pad < 0 || oh <= 0 || ow <= 0 {
		return shapeErr(o, "sizes must be positive and the output non-empty")
	}
	if !validFloat(o.In) {
		return shapeErr(o, "input must be f32, f16 or bf16")
	}
	k.family, k.param, k.body = "misc", "PoolP", fmt.Sprintf("body_pool<%s>", dtC(o.In))
	k.tensors = []TensorSpec{
		{Name: "X", DType: o.In, Elems: o.N * o.H * o.W * o.C, Role: Input},
		{Name: "Y", DType: o.In, Elems: o.outputs(), Role: Output},
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1])
		for _, v := range []int{o.N, o.H, o.W, o.C, oh, ow, o.R, o.S, max(o.Stride, 1), o.Pad} {
			a.I32(int32(v))
		}
		a.I32(b2i(o.Max))
	}
	return nil
}

// faultSpec fills k for a Fault op.
func faultSpec(o Fault, k *kspec) error {
	if o.Kind != FaultTrap && o.Kind != FaultAddress {
		return shapeErr(o, "unknown fault kind %v", o.Kind)
	}
	k.noSync = true
	k.family, k.param, k.body = "misc", "FaultP", "body_fault"
	k.tensors = []TensorSpec{{Name: "x", DType: F32, Elems: 1, Role: Output}}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) { a.Ptr(p[0]).I32(int32(o.Kind)) }
	return nil
}

// reduceSpec fills k for a Reduce op.
func reduceSpec(o Reduce, k *kspec) error {
	if o.Name != "mean" && o.Name != "sum" {
		return fmt.Errorf("%w: reduce %q has no kernel (have mean, sum)", ErrUnsupported, o.Name)
	}
	if !positive(o.Rows, o.Cols) || !validFloat(o.In) {
		return shapeErr(o, "Rows and Cols must be positive, the type f32/f16/bf16")
	}
	k.family, k.param, k.body = "misc", "RedP", fmt.Sprintf("body_reduce<%s>", dtC(o.In))
	k.tensors = []TensorSpec{
		{Name: "X", DType: o.In, Elems: o.Rows * o.Cols, Role: Input},
		{Name: "out", DType: F32, Elems: o.Rows, Role: Output},
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).I32(int32(o.Rows)).I32(int32(o.Cols)).I32(b2i(o.Name == "mean"))
	}
	return nil
}

// gatherSpec fills k for a Gather op.
func gatherSpec(o Gather, k *kspec) error {
	if !positive(o.Rows, o.Cols) || o.Vocab < 0 || !validFloat(o.In) {
		return shapeErr(o, "Rows and Cols must be positive, the type f32/f16/bf16")
	}
	k.family, k.param, k.body = "misc", "GatherP", fmt.Sprintf("body_gather<%s>", dtC(o.In))
	v := o.vocab()
	k.tensors = []TensorSpec{
		{Name: "table", DType: o.In, Elems: v * o.Cols, Role: Weight},
		{Name: "idx", DType: I32, Elems: o.Rows, Role: Input, IntRange: v},
		{Name: "out", DType: o.In, Elems: o.Rows * o.Cols, Role: Output},
	}
	k.pack = func(a *gpu.Args, p []gpu.Ptr) {
		a.Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).I32(int32(o.Rows)).I32(int32(o.Cols)).I32(int32(v))
	}
	return nil
}

// LayerNormEps is the epsilon every LayerNorm kernel adds to the variance
// (PyTorch's default).
const LayerNormEps = 1e-5

// Tensors lists the buffers op's kernel reads and writes, in the order
// Buffers holds them.
func Tensors(op Op) ([]TensorSpec, error) {
	k, err := spec(op)
	if err != nil {
		return nil, err
	}
	return k.tensors, nil
}
