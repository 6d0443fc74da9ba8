package models

import (
	"errors"
	"fmt"
	"slices"

	"atoll/kernels"
)

const (
	imageSize = 224
	classes   = 1000
	bf16      = kernels.BF16
)

// ResNetConfig is the shape of a bottleneck ResNet (v1.5: stride on the
// 3x3 conv). The zoo's ResNet-50 is {Blocks: {3, 4, 6, 3}, Image: 224,
// Width: 64, Classes: 1000}; tests build reduced ones (a 32x32 image, width
// 8, one block per stage) that a CPU reference runs in milliseconds.
type ResNetConfig struct {
	Blocks  [4]int `json:"blocks"` // bottleneck blocks per stage
	Image   int    `json:"image"`  // input height and width
	Width   int    `json:"width"`  // stem width and first stage's bottleneck width (x2 per stage, x4 expansion)
	Classes int    `json:"classes"`
	// Train builds one training step (forward with batch norm, loss,
	// backward, SGD with momentum) instead of inference with BN folded.
	Train bool `json:"train"`
	// MaxPatchBytes bounds the patches (im2col rows) one launch of a
	// training convolution pass gathers; a pass over more is cut into
	// launches over fewer images (Layer.Part). 0: 64 MiB. Tests set small
	// bounds to cut small networks.
	MaxPatchBytes int64 `json:"-"`
}

var resnet50 = ResNetConfig{Blocks: [4]int{3, 4, 6, 3}, Image: imageSize, Width: 64, Classes: classes}

func (c ResNetConfig) validate() error {
	for _, n := range c.Blocks {
		if n < 1 {
			return fmt.Errorf("%w: ResNet blocks %v: every stage needs at least one block", ErrConfig, c.Blocks)
		}
	}
	if c.Width < 1 || c.Classes < 1 {
		return fmt.Errorf("%w: ResNet width %d, classes %d: both must be positive", ErrConfig, c.Width, c.Classes)
	}
	// The stem (/2), the max pool (/2) and three strided stages (/8) must
	// leave at least one pixel.
	if c.Image < 32 {
		return fmt.Errorf("%w: ResNet image %d: want at least 32 (the net downsamples by 32)", ErrConfig, c.Image)
	}
	return nil
}

// NewResNet makes a ResNet model of the given configuration outside the
// zoo (the zoo's ResNets are resnet50, resnet152 and resnet50-train).
func NewResNet(name string, cfg ResNetConfig) (Model, error) {
	if err := cfg.validate(); err != nil {
		return Model{}, err
	}
	m := Model{name: name, base: name, phase: PhaseInference, arch: "resnet", config: cfg,
		description: fmt.Sprintf("ResNet %v, %dx%d, width %d, %d classes", cfg.Blocks, cfg.Image, cfg.Image, cfg.Width, cfg.Classes),
		build:       func(b *builder, n int) { resnetInference(b, n, cfg) }}
	if cfg.Train {
		m.phase = PhaseTraining
		m.build = func(b *builder, n int) { resnetTraining(b, n, cfg) }
	}
	return m, nil
}

func init() {
	r152 := resnet50
	r152.Blocks = [4]int{3, 8, 36, 3}
	r50train := resnet50
	r50train.Train = true
	register(Model{name: "resnet50", base: "resnet50", phase: PhaseInference, arch: "resnet", config: resnet50,
		description: "ResNet-50 v1.5, 224x224, BN folded into conv",
		build:       func(b *builder, n int) { resnetInference(b, n, resnet50) }})
	register(Model{name: "resnet152", base: "resnet152", phase: PhaseInference, arch: "resnet", config: r152,
		description: "ResNet-152 v1.5, 224x224, BN folded into conv",
		build:       func(b *builder, n int) { resnetInference(b, n, r152) }})
	register(Model{name: "resnet50-train", base: "resnet50", phase: PhaseTraining, arch: "resnet", config: r50train,
		description: "ResNet-50 v1.5 training step: forward with batch norm, softmax cross-entropy, backward (dgrad+wgrad), SGD with momentum",
		build:       func(b *builder, n int) { resnetTraining(b, n, resnet50) }})
	register(Model{name: "vgg19", base: "vgg19", phase: PhaseInference, arch: "vgg19", config: vggZoo,
		description: "VGG-19 (no BN), 224x224",
		build:       func(b *builder, n int) { vgg19(b, n, vggZoo) }})
	register(Model{name: "mobilenetv2", base: "mobilenetv2", phase: PhaseInference, arch: "mobilenetv2",
		description: "MobileNetV2 (width 1.0), 224x224, BN folded into conv",
		build:       mobilenetV2})
}

// Glue names (Layer.Glue).
const (
	// GlueNHWCMean: global average pooling of an NHWC tensor to [N, C].
	// The zoo describes it as the row reduction kernel over N·C rows of H·W
	// (its cost), but that kernel reads contiguous rows (NCHW) and writes
	// f32 while the classifier reads bf16.
	GlueNHWCMean = "nhwc_mean"
	// GlueAttnScores: Q·Kᵀ/√d per (sequence, head), Q and K read from the
	// fused QKV projection [tokens, 3, heads, d]; the GEMM kernel reads
	// contiguous [batch][M][K] and [batch][K][N] operands and has no scale.
	GlueAttnScores = "attention_scores"
	// GlueAttnContext: P·V per (sequence, head), V read from the fused QKV
	// projection and the result written with the heads merged
	// [tokens, heads·d].
	GlueAttnContext = "attention_context"
	// GlueCLSRows: the pooler's GEMM reads the first ([CLS]) token of each
	// sequence, rows 0, S, 2S, ... of the hidden states.
	GlueCLSRows = "cls_rows"
	// GlueAttnBackward: the attention backward GEMMs read and write Q, K,
	// V and their gradients per head inside the fused QKV tensors.
	GlueAttnBackward = "attention_backward"
	// GlueMultiTensor: the optimizer updates every parameter in one launch
	// (a multi-tensor apply over a list of tensors, as apex does); the
	// library's sgd kernel takes one contiguous weight, gradient and state.
	GlueMultiTensor = "multi_tensor"
)

var glueNotes = map[string]string{
	GlueNHWCMean:     "global average pool over NHWC: kernels' Reduce reads contiguous rows (NCHW) and writes f32; needs an NHWC spatial mean with a bf16 output",
	GlueAttnScores:   "Q·Kᵀ/√d reads Q and K per head out of the fused QKV output: kernels' GEMM needs leading dimensions (or a head-split kernel), a transposed B and a scale",
	GlueAttnContext:  "P·V reads V per head out of the fused QKV output and writes heads merged: kernels' GEMM needs leading dimensions on B and C (or split/merge kernels)",
	GlueCLSRows:      "the pooler reads every S-th row ([CLS]): kernels' GEMM needs a leading dimension on A (or a row-gather kernel)",
	GlueAttnBackward: "attention backward GEMMs read Q, K, V per head out of the fused QKV tensors: kernels' GEMM needs leading dimensions and transposes",
	GlueMultiTensor:  "one optimizer launch over every parameter: needs a multi-tensor apply kernel (a list of tensors) or one flat parameter buffer",
}

func (l *Layer) glue(name string) { l.Glue, l.GlueNote = name, glueNotes[name] }

// resnetStem adds conv1 and the max pool and returns the pool's output
// name, size and channels. conv writes conv1.
func resnetStem(b *builder, n int, cfg ResNetConfig, train bool) (x string, h, c int) {
	img := b.input("input", bf16, n, cfg.Image, cfg.Image, 3)
	stem := kernels.Conv2D{N: n, H: cfg.Image, W: cfg.Image, C: 3, OutC: cfg.Width, R: 7, S: 7, Stride: 2, Pad: 3, In: bf16}
	var s string
	if train {
		s = b.cbnForward(cbn{name: "conv1", conv: stem, act: kernels.ActReLU, first: true}, img, "")
	} else {
		stem.Bias, stem.BiasType, stem.Act = true, bf16, kernels.ActReLU
		s = b.conv("conv1", img, stem, "")
	}
	sh, _ := stem.Out()
	pool := kernels.Pool{N: n, H: sh, W: sh, C: cfg.Width, R: 3, S: 3, Stride: 2, Pad: 1, Max: true, In: bf16}
	ph, _ := pool.Out()
	out := b.act("maxpool", bf16, n, ph, ph, cfg.Width)
	b.op("maxpool", pool, 0, []string{s}, nil, []string{out})
	return out, ph, cfg.Width
}

// resnetHead adds the global average pool and the classifier over x
// [n,h,h,c]; it returns the logits' name and the two ops.
func resnetHead(b *builder, n int, cfg ResNetConfig, x string, h, c int) (string, kernels.GEMM) {
	pooled := b.act("avgpool", bf16, n, c)
	b.op("avgpool", kernels.Reduce{Name: "mean", Rows: n * c, Cols: h * h, In: bf16}, 0, []string{x}, nil, []string{pooled}).glue(GlueNHWCMean)
	fc := kernels.GEMM{M: n, N: cfg.Classes, K: c, In: bf16, Out: bf16, Bias: true, BiasType: bf16}
	return b.linear("fc", pooled, fc), fc
}

// resnetInference is torchvision's ResNet v1.5 (stride on the 3x3 conv of
// the bottleneck) with BN folded: every conv carries a bias; ReLU and the
// residual add are fused into the conv epilogue.
func resnetInference(b *builder, n int, cfg ResNetConfig) {
	x, h, c := resnetStem(b, n, cfg, false)
	for stage, count := range cfg.Blocks {
		w := cfg.Width << stage
		out := 4 * w
		for i := range count {
			s := 1
			if i == 0 && stage > 0 {
				s = 2
			}
			p := fmt.Sprintf("layer%d.%d", stage+1, i)
			c1 := kernels.Conv2D{N: n, H: h, W: h, C: c, OutC: w, R: 1, S: 1, Stride: 1, In: bf16, Bias: true, BiasType: bf16, Act: kernels.ActReLU}
			c2 := kernels.Conv2D{N: n, H: h, W: h, C: w, OutC: w, R: 3, S: 3, Stride: s, Pad: 1, In: bf16, Bias: true, BiasType: bf16, Act: kernels.ActReLU}
			oh, _ := c2.Out()
			y1 := b.conv(p+".conv1", x, c1, "")
			y2 := b.conv(p+".conv2", y1, c2, "")
			short := x
			if i == 0 {
				short = b.conv(p+".downsample", x, kernels.Conv2D{N: n, H: h, W: h, C: c, OutC: out, R: 1, S: 1, Stride: s, In: bf16, Bias: true, BiasType: bf16}, "")
			}
			x = b.conv(p+".conv3", y2, kernels.Conv2D{N: n, H: oh, W: oh, C: w, OutC: out, R: 1, S: 1, Stride: 1, In: bf16, Bias: true, BiasType: bf16, Act: kernels.ActReLU, Residual: true}, short)
			h, c = oh, out
		}
	}
	b.output, _ = resnetHead(b, n, cfg, x, h, c)
}

// cbn is a convolution followed by batch norm (and optionally a residual
// add and ReLU) in a training graph.
type cbn struct {
	name     string
	conv     kernels.Conv2D // Bias false: BN's shift replaces it
	act      kernels.Act
	residual bool // the BN apply kernel also adds the block's shortcut
	first    bool // the input is the image: no data gradient
	// Dataflow, set by cbnForward: the conv's input and the shortcut.
	x, short string
}

func (u cbn) outElems() (elems, pixels int) {
	oh, ow := u.conv.Out()
	return u.conv.N * oh * ow * u.conv.OutC, u.conv.N * oh * ow
}

// cbnForward adds conv and batch norm with batch statistics: the conv
// writes name.conv; BN's partial sums (name.bn.partials, one pair per
// kernels.BNChunk pixels and channel) are finished into name.bn.stats
// (mean, rstd); the apply kernel (with the shortcut add and the ReLU)
// writes name. It returns name.
func (b *builder) cbnForward(u cbn, x, short string) string {
	_, pixels := u.outElems()
	oh, ow := u.conv.Out()
	c := u.conv.OutC
	conv := b.act(u.name+".conv", bf16, u.conv.N, oh, ow, c)
	b.convPass(u.name, u.conv, ConvParams(u.conv), []string{x}, []string{b.weight(u.name+".weight", bf16, u.conv.R, u.conv.S, u.conv.C, c)}, []string{conv})
	stats := kernels.BNStats{Pixels: pixels, C: c, In: bf16}
	part := b.act(u.name+".bn.partials", kernels.F32, stats.Partials())
	b.op(u.name+".bn.stats", stats, 0, []string{conv}, nil, []string{part})
	st := b.act(u.name+".bn.stats", kernels.F32, 2, c)
	b.op(u.name+".bn.finalize", kernels.BNFinalize{Pixels: pixels, C: c}, 0, []string{part}, nil, []string{st})
	in := []string{conv, st}
	if u.residual {
		in = append(in, short)
	}
	out := b.act(u.name, bf16, u.conv.N, oh, ow, c)
	b.op(u.name+".bn.apply", kernels.BNApply{Pixels: pixels, C: c, In: bf16, Act: u.act, Residual: u.residual}, 2*c,
		in, []string{b.weight(u.name+".bn.weight", kernels.F32, c), b.weight(u.name+".bn.bias", kernels.F32, c)}, []string{out})
	return out
}

// cbnBackward adds the backward pass of a cbn unit: dy is the gradient of
// its output; dx the name to write the input's gradient to (ignored for
// the first unit) and dshort the shortcut's share (residual units). BN's
// weight gradients (Σdz·x̂ and Σdz per channel, the ReLU mask applied)
// are partial sums finished into grad:name.bn.weight and grad:name.bn.bias;
// then BN's data gradient and the conv's dgrad and wgrad.
func (b *builder) cbnBackward(u cbn, dy, dx, dshort string) {
	_, pixels := u.outElems()
	c := u.conv.OutC
	conv, st := u.name+".conv", u.name+".bn.stats"
	wg := kernels.BNStats{Pixels: pixels, C: c, In: bf16, Backward: true, Act: u.act}
	in := []string{conv, dy}
	if u.act == kernels.ActReLU {
		in = append(in, u.name)
	}
	in = append(in, st)
	dpart := b.tensor(GradName(u.name+".bn.partials"), KindGradient, kernels.F32, wg.Partials())
	b.op(u.name+".bn.wgrad", wg, 0, in, nil, []string{dpart})
	dgamma, dbeta := b.grad(u.name+".bn.weight"), b.grad(u.name+".bn.bias")
	b.op(u.name+".bn.wgrad.finalize", kernels.BNFinalize{Pixels: pixels, C: c, Grad: true}, 0, []string{dpart}, nil, []string{dgamma, dbeta})
	dconv := b.grad(conv)
	out := []string{dconv}
	if u.residual {
		out = append(out, dshort)
	}
	din := []string{dy}
	if u.act == kernels.ActReLU {
		din = append(din, u.name)
	}
	din = append(din, conv, st, dgamma, dbeta)
	b.op(u.name+".bn.dgrad", kernels.BNBackward{Pixels: pixels, C: c, In: bf16, Act: u.act, Residual: u.residual}, 0,
		din, []string{u.name + ".bn.weight"}, out)
	if !u.first {
		d := u.conv
		d.BackwardData = true
		b.convPass(u.name+".dgrad", d, 0, []string{dconv}, []string{u.name + ".weight"}, []string{dx})
	}
	w := u.conv
	w.BackwardFilter = true
	b.wgrad(u.name, w, u.x, dconv, u.name+".weight")
}

// wgrad adds a convolution's weight gradient from its input x and output
// gradient dy into grad:weight: a wgrad split over the images where one
// launch would leave the GPU idle (few output tiles, a long sum over the
// images), writing f32 partial sums (grad:weight.split), and a SplitSum
// that adds them up in order. Every batch size gets both layers (split 1
// at small batches), so the launch sequence does not depend on the batch.
func (b *builder) wgrad(name string, w kernels.Conv2D, x, dy, weight string) {
	w.Split = max(wgradSplit(w), convParts(w, b.patchBytes)) // powers of two dividing N
	t := b.list[b.tensors[weight]]
	part := b.tensor(GradName(weight)+".split", KindGradient, kernels.F32, w.Split*t.Elems())
	b.convPass(name+".wgrad", w, 0, []string{x, dy}, nil, []string{part})
	b.op(name+".wgrad.sum", kernels.SplitSum{Parts: w.Split, Elems: t.Elems(), Out: t.DType}, 0, []string{part}, nil, []string{b.grad(weight)})
}

// maxPatchBytes is the default bound on the patches one launch of a
// training convolution gathers: one step of the CUDA device's plan (its
// patch workspace, gpu/cuda), so that no launch of a training step chains
// several gathers and products, which a scheduler cannot cut (ResNet-50's
// stem at batch 32 gathers 122 MB: two launches a pass).
const maxPatchBytes = 64 << 20

// convParts is the number of launches, over equal slices of the images, a
// convolution pass takes so that each gathers at most max bytes of
// patches (rows of R·S·C elements, padded to 8, per output pixel; 0:
// maxPatchBytes): the smallest power of two that gets there and divides
// the images. Products (1x1, stride 1, no padding) gather nothing: 1.
func convParts(c kernels.Conv2D, max int64) int {
	if max <= 0 {
		max = maxPatchBytes
	}
	if c.Pointwise() {
		return 1
	}
	oh, ow := c.Out()
	patches := int64(c.N*oh*ow) * int64((c.R*c.S*c.C+7)&^7) * int64(c.In.Size())
	p := 1
	for patches > int64(p)*max && c.N%(2*p) == 0 {
		p *= 2
	}
	return p
}

// convPass adds a training convolution pass c (forward, data or filter
// gradient) as one layer name, or, where convParts cuts it, as layers
// name.part0, name.part1, ... each over its slice of the images (a filter
// gradient's slice of the Split partial sums); the first holds params.
func (b *builder) convPass(name string, c kernels.Conv2D, params int, in, w, out []string) {
	parts := convParts(c, b.patchBytes)
	if parts == 1 {
		b.op(name, c, params, in, w, out)
		return
	}
	pc := c
	pc.N /= parts
	if c.BackwardFilter {
		pc.Split = c.Split / parts
	}
	for i := range parts {
		l := b.op(fmt.Sprintf("%s.part%d", name, i), pc, params, in, w, out)
		l.Part, params = Part{I: i, Of: parts}, 0
	}
}

// wgradSplit is the split of a wgrad over the images: doubled while the
// launch has fewer tiles than two waves of blocks on a 132-SM GPU (two
// blocks per SM), the images still divide, and each split still sums over
// at least 512 output pixels.
func wgradSplit(w kernels.Conv2D) int {
	w.Split = 0
	tiles := w.Geometry().Grid.Count()
	oh, ow := w.Out()
	s := 1
	for s < 32 && tiles*s < 2*2*132 && w.N%(2*s) == 0 && w.N/(2*s)*oh*ow >= 512 {
		s *= 2
	}
	return s
}

// resnetTraining is one SGD-with-momentum step of ResNet v1.5 with batch
// norm kept (training statistics), softmax cross-entropy loss.
func resnetTraining(b *builder, n int, cfg ResNetConfig) {
	b.patchBytes = cfg.MaxPatchBytes
	conv := func(h, c, out, r, s, pad int) kernels.Conv2D {
		return kernels.Conv2D{N: n, H: h, W: h, C: c, OutC: out, R: r, S: r, Stride: s, Pad: pad, In: bf16}
	}
	x, h, c := resnetStem(b, n, cfg, true)
	stem := cbn{name: "conv1", conv: conv(cfg.Image, 3, cfg.Width, 7, 2, 3), act: kernels.ActReLU, first: true, x: "input"}

	type block struct {
		units []cbn // conv1, conv2, conv3 (+ downsample at index 3)
		in    int   // elements of the block's input
		x     string
	}
	var bl []block
	for stage, count := range cfg.Blocks {
		w := cfg.Width << stage
		out := 4 * w
		for i := range count {
			s := 1
			if i == 0 && stage > 0 {
				s = 2
			}
			p := fmt.Sprintf("layer%d.%d", stage+1, i)
			c2 := conv(h, w, w, 3, s, 1)
			oh, _ := c2.Out()
			k := block{in: n * h * h * c, x: x, units: []cbn{
				{name: p + ".conv1", conv: conv(h, c, w, 1, 1, 0), act: kernels.ActReLU},
				{name: p + ".conv2", conv: c2, act: kernels.ActReLU},
				{name: p + ".conv3", conv: conv(oh, w, out, 1, 1, 0), act: kernels.ActReLU, residual: true},
			}}
			if i == 0 {
				k.units = append(k.units, cbn{name: p + ".downsample", conv: conv(h, c, out, 1, s, 0)})
			}
			u := k.units
			u[0].x = x
			y1 := b.cbnForward(u[0], x, "")
			u[1].x = y1
			y2 := b.cbnForward(u[1], y1, "")
			short := x
			if i == 0 {
				u[3].x = x
				short = b.cbnForward(u[3], x, "")
			}
			u[2].x, u[2].short = y2, short
			x = b.cbnForward(u[2], y2, short)
			bl = append(bl, k)
			h, c = oh, out
		}
	}
	// Head: the global average pool as a pool over the whole feature map
	// and the classifier as a 1x1 convolution over [n, 1, 1, c] (its weight
	// [c, classes] is the conv's [1, 1, c, classes]), so that the conv's
	// dgrad and wgrad kernels give its backward pass.
	gap := kernels.Pool{N: n, H: h, W: h, C: c, R: h, S: h, Stride: 1, In: bf16}
	pooled := b.act("avgpool", bf16, n, c)
	b.op("avgpool", gap, 0, []string{x}, nil, []string{pooled})
	fc := kernels.Conv2D{N: n, H: 1, W: 1, C: c, OutC: cfg.Classes, R: 1, S: 1, Stride: 1, In: bf16, Bias: true}
	logits := b.op("fc", fc, ConvParams(fc), []string{pooled},
		[]string{b.weight("fc.weight", bf16, c, cfg.Classes), b.weight("fc.bias", kernels.F32, cfg.Classes)},
		[]string{b.act("fc", bf16, n, cfg.Classes)}).Out[0]
	b.output = b.lossForward(n, cfg.Classes, logits)

	// Backward.
	b.lossBackward(n, cfg.Classes, logits)
	b.op("fc.bgrad", kernels.ColumnSum{Rows: n, Cols: cfg.Classes, In: bf16}, 0, []string{GradName(logits)}, nil, []string{b.grad("fc.bias")})
	fd, fw := fc, fc
	fd.Bias, fd.BackwardData = false, true
	fw.Bias, fw.BackwardFilter = false, true
	b.op("fc.dgrad", fd, 0, []string{GradName(logits)}, []string{"fc.weight"}, []string{b.grad(pooled)})
	b.wgrad("fc", fw, pooled, GradName(logits), "fc.weight")
	b.op("avgpool.bwd", kernels.PoolBackward{Pool: gap}, 0, []string{GradName(pooled)}, nil, []string{b.grad(x)})
	for i := len(bl) - 1; i >= 0; i-- {
		k := bl[i]
		u := k.units
		p := u[0].name[:len(u[0].name)-len(".conv1")]
		out := u[2].name
		// The block output's gradient is complete: its consumers (the next
		// block's conv1 and shortcut, or avgpool) have been summed.
		var dshort string
		if len(u) > 3 {
			dshort = b.grad(u[3].name)
		} else {
			dshort = b.gradPart(k.x, p+".shortcut")
		}
		b.cbnBackward(u[2], GradName(out), b.grad(u[1].name), dshort)
		b.cbnBackward(u[1], GradName(u[1].name), b.grad(u[0].name), "")
		main := b.gradPart(k.x, p+".conv1")
		b.cbnBackward(u[0], GradName(u[0].name), main, "")
		other := dshort
		if len(u) > 3 {
			other = b.gradPart(k.x, p+".downsample")
			b.cbnBackward(u[3], dshort, other, "")
		}
		// Main-path and shortcut gradients meet at the block's input.
		b.op(p+".grad_add", kernels.Elementwise{Name: "add", Elems: k.in, Inputs: 2, Outputs: 1, In: bf16}, 0,
			[]string{main, other}, nil, []string{b.grad(k.x)})
	}
	sh, _ := stem.conv.Out()
	mp := kernels.Pool{N: n, H: sh, W: sh, C: cfg.Width, R: 3, S: 3, Stride: 2, Pad: 1, Max: true, In: bf16}
	b.op("maxpool.bwd", kernels.PoolBackward{Pool: mp}, 0, []string{GradName("maxpool"), "conv1"}, nil, []string{b.grad("conv1")})
	b.cbnBackward(stem, GradName("conv1"), "", "")
	b.sgd("optimizer.sgd", "momentum")
}

// sgd adds one SGD-with-momentum update per weight, in order of first use
// (PyTorch's per-parameter loop): the weight in its own type (bf16 conv
// and classifier weights, fp32 BN parameters and biases), its gradient
// grad:w, and fp32 momentum state:w, updated in place. name prefixes the
// layers (name.<weight>).
func (b *builder) sgd(name, state string) {
	for _, t := range slices.Clone(b.list) {
		if t.Kind != KindWeight {
			continue
		}
		g := GradName(t.Name)
		m := b.tensor(state+":"+t.Name, KindState, kernels.F32, t.Shape...)
		b.op(name+"."+t.Name, kernels.SGD{Elems: t.Elems(), In: t.DType}, 0, []string{g, m}, []string{t.Name}, []string{t.Name, m})
	}
}

// lossForward adds softmax (kept for the backward pass) and the
// cross-entropy per sample from the logits [n, classes] against the labels
// input (int32 in [0, classes)); it returns the loss tensor [n] f32, whose
// mean is the batch loss.
func (b *builder) lossForward(n, classes int, logits string) string {
	labels := b.input("labels", kernels.I32, n)
	probs := b.act("loss.softmax", bf16, n, classes)
	b.op("loss.softmax", kernels.Softmax{Rows: n, Cols: classes, In: bf16}, 0, []string{logits}, nil, []string{probs})
	loss := b.act("loss", kernels.F32, n)
	b.op("loss.xent", kernels.XentLoss{Rows: n, Classes: classes, In: bf16}, 0, []string{logits, labels}, nil, []string{loss})
	return loss
}

// lossBackward adds d(logits) = (softmax − onehot(labels)) / n, the
// gradient of the batch-mean loss.
func (b *builder) lossBackward(n, classes int, logits string) {
	b.op("loss.xent.bwd", kernels.XentBackward{Rows: n, Classes: classes, In: bf16}, 0,
		[]string{"loss.softmax", "labels"}, nil, []string{b.grad(logits)})
}

// VGGConfig is the shape of a VGG-19 (no batch norm). The zoo's is
// {Image: 224, WidthDiv: 1, Hidden: 4096, Classes: 1000}; tests build
// reduced ones (a 32x32 image, widths divided by 16) that run fully on the
// kernel library.
type VGGConfig struct {
	Image    int `json:"image"`     // input height and width, a multiple of 32
	WidthDiv int `json:"width_div"` // divides the conv widths 64..512
	Hidden   int `json:"hidden"`    // classifier width (4096)
	Classes  int `json:"classes"`
}

var vggZoo = VGGConfig{Image: imageSize, WidthDiv: 1, Hidden: 4096, Classes: classes}

// NewVGG makes a VGG-19 of the given configuration outside the zoo.
func NewVGG(name string, cfg VGGConfig) (Model, error) {
	if cfg.Image < 32 || cfg.Image%32 != 0 || cfg.WidthDiv < 1 || 64%cfg.WidthDiv != 0 || cfg.Hidden < 1 || cfg.Classes < 1 {
		return Model{}, fmt.Errorf("%w: VGG %+v: want an image a multiple of 32, a width divisor of 64, positive hidden and classes", ErrConfig, cfg)
	}
	return Model{name: name, base: name, phase: PhaseInference, arch: "vgg19", config: cfg,
		description: fmt.Sprintf("VGG-19, %dx%d, widths /%d, hidden %d, %d classes", cfg.Image, cfg.Image, cfg.WidthDiv, cfg.Hidden, cfg.Classes),
		build:       func(b *builder, n int) { vgg19(b, n, cfg) }}, nil
}

// vgg19 is torchvision's VGG-19 without batch norm; dropout is the identity
// at inference and the adaptive average pool is the identity at 224x224
// (the feature map is 7x7; reduced images skip it the same way).
// The classifier reads the NHWC feature map flattened ([N, 7·7·512] in
// h, w, c order; PyTorch flattens c, h, w: tools/torchref permutes).
func vgg19(b *builder, n int, v VGGConfig) {
	cfg := [][]int{{64, 64}, {128, 128}, {256, 256, 256, 256}, {512, 512, 512, 512}, {512, 512, 512, 512}}
	h, c, idx := v.Image, 3, 0
	x := b.input("input", bf16, n, v.Image, v.Image, 3)
	for _, group := range cfg {
		for _, out := range group {
			out /= v.WidthDiv
			x = b.conv(fmt.Sprintf("features.%d", idx), x, kernels.Conv2D{N: n, H: h, W: h, C: c, OutC: out, R: 3, S: 3, Stride: 1, Pad: 1,
				In: bf16, Bias: true, BiasType: bf16, Act: kernels.ActReLU}, "")
			c = out
			idx += 2 // conv, relu
		}
		name := fmt.Sprintf("features.%d", idx)
		y := b.act(name, bf16, n, h/2, h/2, c)
		b.op(name, kernels.Pool{N: n, H: h, W: h, C: c, R: 2, S: 2, Stride: 2, Max: true, In: bf16}, 0, []string{x}, nil, []string{y})
		x = y
		idx++
		h /= 2
	}
	x = b.linear("classifier.0", x, kernels.GEMM{M: n, N: v.Hidden, K: h * h * c, In: bf16, Out: bf16, Bias: true, BiasType: bf16, Act: kernels.ActReLU})
	x = b.linear("classifier.3", x, kernels.GEMM{M: n, N: v.Hidden, K: v.Hidden, In: bf16, Out: bf16, Bias: true, BiasType: bf16, Act: kernels.ActReLU})
	b.output = b.linear("classifier.6", x, kernels.GEMM{M: n, N: v.Classes, K: v.Hidden, In: bf16, Out: bf16, Bias: true, BiasType: bf16})
}

// mobilenetV2 is torchvision's MobileNetV2 (width 1.0) with BN folded: the
// 1x1 convs and the depthwise convs carry a bias, ReLU6 is fused, and the
// residual add of a stride-1 block with equal widths is fused into the
// projection conv. The depthwise kernel has no bias operand: its folded
// bias (name.bias) must be zero to run on the GPU (seeded weights make it
// zero; see Instance).
func mobilenetV2(b *builder, n int) {
	x := b.input("input", bf16, n, imageSize, imageSize, 3)
	x = b.conv("features.0", x, kernels.Conv2D{N: n, H: imageSize, W: imageSize, C: 3, OutC: 32, R: 3, S: 3, Stride: 2, Pad: 1,
		In: bf16, Bias: true, BiasType: bf16, Act: kernels.ActReLU6}, "")
	h, c := 112, 32
	settings := [][4]int{ // t (expansion), c (width), n (repeats), s (stride)
		{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1},
	}
	idx := 1
	for _, st := range settings {
		t, out, reps, stride := st[0], st[1], st[2], st[3]
		for r := range reps {
			s := 1
			if r == 0 {
				s = stride
			}
			p := fmt.Sprintf("features.%d", idx)
			hidden := c * t
			in := x
			y := x
			if t != 1 {
				y = b.conv(p+".expand", x, kernels.Conv2D{N: n, H: h, W: h, C: c, OutC: hidden, R: 1, S: 1, Stride: 1, In: bf16, Bias: true, BiasType: bf16, Act: kernels.ActReLU6}, "")
			}
			dw := kernels.Depthwise{N: n, H: h, W: h, C: hidden, R: 3, S: 3, Stride: s, Pad: 1, In: bf16, Act: kernels.ActReLU6}
			oh, _ := dw.Out()
			dwo := b.act(p+".depthwise", bf16, n, oh, oh, hidden)
			b.op(p+".depthwise", dw, DepthwiseParams(dw), []string{y},
				[]string{b.weight(p+".depthwise.weight", bf16, 3, 3, hidden), b.weight(p+".depthwise.bias", kernels.F32, hidden)}, []string{dwo})
			res := s == 1 && c == out
			x = b.conv(p+".project", dwo, kernels.Conv2D{N: n, H: oh, W: oh, C: hidden, OutC: out, R: 1, S: 1, Stride: 1, In: bf16, Bias: true, BiasType: bf16,
				Residual: res}, in)
			h, c = oh, out
			idx++
		}
	}
	x = b.conv(fmt.Sprintf("features.%d", idx), x, kernels.Conv2D{N: n, H: h, W: h, C: c, OutC: 1280, R: 1, S: 1, Stride: 1, In: bf16, Bias: true, BiasType: bf16, Act: kernels.ActReLU6}, "")
	pooled := b.act("avgpool", bf16, n, 1280)
	b.op("avgpool", kernels.Reduce{Name: "mean", Rows: n * 1280, Cols: h * h, In: bf16}, 0, []string{x}, nil, []string{pooled}).glue(GlueNHWCMean)
	b.output = b.linear("classifier.1", pooled, kernels.GEMM{M: n, N: classes, K: 1280, In: bf16, Out: bf16, Bias: true, BiasType: bf16})
}

// ErrLabels: a training input's label outside [0, classes) (the loss
// kernel would write NaN for it).
var ErrLabels = errors.New("models: label out of range")

// checkLabels verifies that the labels a cross-entropy loss of g reads lie
// in [0, classes) (CheckBundle calls it for inputs).
func checkLabels(g *Graph, b *Bundle) error {
	for _, l := range g.Layers {
		x, ok := l.Op.(kernels.XentLoss)
		if !ok || len(l.In) < 2 {
			continue
		}
		d, ok := b.Get(l.In[1])
		if !ok || d.DType != kernels.I32 {
			continue // CheckBundle reports it
		}
		for i, v := range d.Values() {
			if v < 0 || int(v) >= x.Classes {
				return fmt.Errorf("%w: %s: %s[%d] = %d, want a class in [0, %d)", ErrLabels, g.Model, l.In[1], i, int(v), x.Classes)
			}
		}
	}
	return nil
}
