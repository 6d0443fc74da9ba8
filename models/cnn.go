package models

import (
	"fmt"

	"atoll/kernels"
)

const (
	imageSize = 224
	classes   = 1000
	bf16      = kernels.BF16
)

func init() {
	register(Model{name: "resnet50", base: "resnet50", phase: PhaseInference,
		description: "ResNet-50 v1.5, 224x224, BN folded into conv",
		build:       func(b *builder, n int) { resnetInference(b, n, [4]int{3, 4, 6, 3}) }})
	register(Model{name: "resnet152", base: "resnet152", phase: PhaseInference,
		description: "ResNet-152 v1.5, 224x224, BN folded into conv",
		build:       func(b *builder, n int) { resnetInference(b, n, [4]int{3, 8, 36, 3}) }})
	register(Model{name: "resnet50-train", base: "resnet50", phase: PhaseTraining,
		description: "ResNet-50 v1.5 training step: forward with batch norm, softmax cross-entropy, backward (dgrad+wgrad), SGD with momentum",
		build:       func(b *builder, n int) { resnetTraining(b, n, [4]int{3, 4, 6, 3}) }})
	register(Model{name: "vgg19", base: "vgg19", phase: PhaseInference,
		description: "VGG-19 (no BN), 224x224",
		build:       vgg19})
	register(Model{name: "mobilenetv2", base: "mobilenetv2", phase: PhaseInference,
		description: "MobileNetV2 (width 1.0), 224x224, BN folded into conv",
		build:       mobilenetV2})
}

// resnetInference is torchvision's ResNet v1.5 (stride on the 3x3 conv of
// the bottleneck) with BN folded: every conv carries a bias; ReLU and the
// residual add are fused into the conv epilogue.
func resnetInference(b *builder, n int, blocks [4]int) {
	b.conv("conv1", kernels.Conv2D{N: n, H: imageSize, W: imageSize, C: 3, OutC: 64, R: 7, S: 7, Stride: 2, Pad: 3,
		In: bf16, Bias: true, Act: kernels.ActReLU})
	b.add("maxpool", kernels.Pool{N: n, H: 112, W: 112, C: 64, R: 3, S: 3, Stride: 2, Pad: 1, Max: true, In: bf16}, 0)
	h, c := 56, 64
	for stage, count := range blocks {
		w := 64 << stage
		out := 4 * w
		for i := range count {
			s := 1
			if i == 0 && stage > 0 {
				s = 2
			}
			p := fmt.Sprintf("layer%d.%d", stage+1, i)
			oh := h / s
			b.conv(p+".conv1", kernels.Conv2D{N: n, H: h, W: h, C: c, OutC: w, R: 1, S: 1, Stride: 1, In: bf16, Bias: true, Act: kernels.ActReLU})
			b.conv(p+".conv2", kernels.Conv2D{N: n, H: h, W: h, C: w, OutC: w, R: 3, S: 3, Stride: s, Pad: 1, In: bf16, Bias: true, Act: kernels.ActReLU})
			if i == 0 {
				b.conv(p+".downsample", kernels.Conv2D{N: n, H: h, W: h, C: c, OutC: out, R: 1, S: 1, Stride: s, In: bf16, Bias: true})
			}
			b.conv(p+".conv3", kernels.Conv2D{N: n, H: oh, W: oh, C: w, OutC: out, R: 1, S: 1, Stride: 1, In: bf16, Bias: true, Act: kernels.ActReLU, Residual: true})
			h, c = oh, out
		}
	}
	b.add("avgpool", kernels.Reduce{Name: "mean", Rows: n * c, Cols: h * h, In: bf16}, 0)
	b.linear("fc", kernels.GEMM{M: n, N: classes, K: c, In: bf16, Out: bf16, Bias: true})
}

// cbn is a convolution followed by batch norm (and optionally a residual
// add and ReLU) in a training graph.
type cbn struct {
	name     string
	conv     kernels.Conv2D // Bias false: BN's shift replaces it
	act      kernels.Act
	residual bool // the BN apply kernel also adds the block's shortcut
	first    bool // the input is the image: no data gradient
}

func (u cbn) outElems() (elems, pixels int) {
	oh, ow := u.conv.Out()
	return u.conv.N * oh * ow * u.conv.OutC, u.conv.N * oh * ow
}

func (b *builder) cbnForward(u cbn) {
	elems, pixels := u.outElems()
	inputs := 1
	if u.residual {
		inputs = 2
	}
	b.conv(u.name, u.conv)
	b.add(u.name+".bn.stats", columnReduce("bn_stats", u.conv.OutC, pixels), 0)
	b.add(u.name+".bn.apply", kernels.Elementwise{Name: "bn_apply", Elems: elems, Inputs: inputs, Outputs: 1, In: bf16, Act: u.act}, 2*u.conv.OutC)
}

func (b *builder) cbnBackward(u cbn) {
	elems, pixels := u.outElems()
	outs := 1
	if u.residual {
		outs = 2 // also the gradient that flows to the shortcut
	}
	// dγ, dβ (Σdy and Σdy·x̂ per channel, ReLU mask applied), then dx of BN.
	b.add(u.name+".bn.wgrad", columnReduce("bn_bwd", u.conv.OutC, pixels), 0)
	b.add(u.name+".bn.dgrad", kernels.Elementwise{Name: "bn_bwd", Elems: elems, Inputs: 3, Outputs: outs, In: bf16}, 0)
	if !u.first {
		d := u.conv
		d.BackwardData = true
		b.add(u.name+".dgrad", d, 0)
	}
	w := u.conv
	w.BackwardFilter = true
	b.add(u.name+".wgrad", w, 0)
}

// resnetTraining is one SGD-with-momentum step of ResNet v1.5 with batch
// norm kept (training statistics), softmax cross-entropy loss.
func resnetTraining(b *builder, n int, blocks [4]int) {
	conv := func(h, c, out, r, s, pad int) kernels.Conv2D {
		return kernels.Conv2D{N: n, H: h, W: h, C: c, OutC: out, R: r, S: r, Stride: s, Pad: pad, In: bf16}
	}
	stem := cbn{name: "conv1", conv: conv(imageSize, 3, 64, 7, 2, 3), act: kernels.ActReLU, first: true}
	b.cbnForward(stem)
	b.add("maxpool", kernels.Pool{N: n, H: 112, W: 112, C: 64, R: 3, S: 3, Stride: 2, Pad: 1, Max: true, In: bf16}, 0)

	type block struct {
		units []cbn // conv1, conv2, conv3 (+ downsample at index 3)
		in    int   // elements of the block's input
	}
	var bl []block
	h, c := 56, 64
	for stage, count := range blocks {
		w := 64 << stage
		out := 4 * w
		for i := range count {
			s := 1
			if i == 0 && stage > 0 {
				s = 2
			}
			p := fmt.Sprintf("layer%d.%d", stage+1, i)
			oh := h / s
			k := block{in: n * h * h * c, units: []cbn{
				{name: p + ".conv1", conv: conv(h, c, w, 1, 1, 0), act: kernels.ActReLU},
				{name: p + ".conv2", conv: conv(h, w, w, 3, s, 1), act: kernels.ActReLU},
				{name: p + ".conv3", conv: conv(oh, w, out, 1, 1, 0), act: kernels.ActReLU, residual: true},
			}}
			if i == 0 {
				k.units = append(k.units, cbn{name: p + ".downsample", conv: conv(h, c, out, 1, s, 0)})
			}
			b.cbnForward(k.units[0])
			b.cbnForward(k.units[1])
			if i == 0 {
				b.cbnForward(k.units[3])
			}
			b.cbnForward(k.units[2])
			bl = append(bl, k)
			h, c = oh, out
		}
	}
	b.add("avgpool", kernels.Reduce{Name: "mean", Rows: n * c, Cols: h * h, In: bf16}, 0)
	fc := kernels.GEMM{M: n, N: classes, K: c, In: bf16, Out: bf16, Bias: true}
	b.linear("fc", fc)
	b.add("loss.softmax", kernels.Softmax{Rows: n, Cols: classes, In: bf16}, 0)
	b.add("loss.xent", kernels.Reduce{Name: "xent", Rows: n, Cols: classes, In: bf16}, 0)

	// Backward.
	b.add("loss.xent.bwd", kernels.Elementwise{Name: "xent_bwd", Elems: n * classes, Inputs: 2, Outputs: 1, In: bf16}, 0)
	b.linearBackward("fc", fc)
	b.add("avgpool.bwd", kernels.Elementwise{Name: "avgpool_bwd", Elems: n * h * h * c, Inputs: 1, Outputs: 1, In: bf16}, 0)
	for i := len(bl) - 1; i >= 0; i-- {
		k := bl[i]
		b.cbnBackward(k.units[2])
		b.cbnBackward(k.units[1])
		b.cbnBackward(k.units[0])
		if len(k.units) > 3 {
			b.cbnBackward(k.units[3])
		}
		// Main-path and shortcut gradients meet at the block's input.
		b.add(k.units[0].name[:len(k.units[0].name)-len(".conv1")]+".grad_add",
			kernels.Elementwise{Name: "add", Elems: k.in, Inputs: 2, Outputs: 1, In: bf16}, 0)
	}
	b.add("maxpool.bwd", kernels.Elementwise{Name: "maxpool_bwd", Elems: n * 112 * 112 * 64, Inputs: 2, Outputs: 1, In: bf16}, 0)
	b.cbnBackward(stem)
	b.optimizer("optimizer.sgd_momentum", "sgd", 3, 2)
}

// linearBackward adds the backward pass of a linear layer y = x·W + b with
// x M x K and W K x N: the bias gradient (a column sum of dy), dx = dy·Wᵀ
// (M x K, inner N) and dW = xᵀ·dy (K x N, inner M).
func (b *builder) linearBackward(name string, g kernels.GEMM) {
	if g.Bias {
		b.add(name+".bgrad", columnReduce("sum", g.N, g.M), 0)
	}
	b.add(name+".dgrad", kernels.GEMM{M: g.M, N: g.K, K: g.N, In: g.In, Out: g.Out}, 0)
	b.add(name+".wgrad", kernels.GEMM{M: g.K, N: g.N, K: g.M, In: g.In, Out: g.Out}, 0)
}

// optimizer adds one multi-tensor update over every parameter counted so
// far (fp32 master weights and state).
func (b *builder) optimizer(name, kernel string, inputs, outputs int) {
	b.add(name, kernels.Elementwise{Name: kernel, Elems: Params(b.layers), Inputs: inputs, Outputs: outputs, In: kernels.F32}, 0)
}

// vgg19 is torchvision's VGG-19 without batch norm; dropout is the identity
// at inference and the adaptive average pool is the identity at 224x224.
func vgg19(b *builder, n int) {
	cfg := [][]int{{64, 64}, {128, 128}, {256, 256, 256, 256}, {512, 512, 512, 512}, {512, 512, 512, 512}}
	h, c, idx := imageSize, 3, 0
	for _, group := range cfg {
		for _, out := range group {
			b.conv(fmt.Sprintf("features.%d", idx), kernels.Conv2D{N: n, H: h, W: h, C: c, OutC: out, R: 3, S: 3, Stride: 1, Pad: 1,
				In: bf16, Bias: true, Act: kernels.ActReLU})
			c = out
			idx += 2 // conv, relu
		}
		b.add(fmt.Sprintf("features.%d", idx), kernels.Pool{N: n, H: h, W: h, C: c, R: 2, S: 2, Stride: 2, Max: true, In: bf16}, 0)
		idx++
		h /= 2
	}
	b.linear("classifier.0", kernels.GEMM{M: n, N: 4096, K: h * h * c, In: bf16, Out: bf16, Bias: true, Act: kernels.ActReLU})
	b.linear("classifier.3", kernels.GEMM{M: n, N: 4096, K: 4096, In: bf16, Out: bf16, Bias: true, Act: kernels.ActReLU})
	b.linear("classifier.6", kernels.GEMM{M: n, N: classes, K: 4096, In: bf16, Out: bf16, Bias: true})
}

// mobilenetV2 is torchvision's MobileNetV2 (width 1.0) with BN folded: the
// 1x1 convs and the depthwise convs carry a bias, ReLU6 is fused, and the
// residual add of a stride-1 block with equal widths is fused into the
// projection conv.
func mobilenetV2(b *builder, n int) {
	b.conv("features.0", kernels.Conv2D{N: n, H: imageSize, W: imageSize, C: 3, OutC: 32, R: 3, S: 3, Stride: 2, Pad: 1,
		In: bf16, Bias: true, Act: kernels.ActReLU6})
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
			if t != 1 {
				b.conv(p+".expand", kernels.Conv2D{N: n, H: h, W: h, C: c, OutC: hidden, R: 1, S: 1, Stride: 1, In: bf16, Bias: true, Act: kernels.ActReLU6})
			}
			dw := kernels.Depthwise{N: n, H: h, W: h, C: hidden, R: 3, S: 3, Stride: s, Pad: 1, In: bf16, Act: kernels.ActReLU6}
			b.add(p+".depthwise", dw, DepthwiseParams(dw))
			oh, _ := dw.Out()
			b.conv(p+".project", kernels.Conv2D{N: n, H: oh, W: oh, C: hidden, OutC: out, R: 1, S: 1, Stride: 1, In: bf16, Bias: true,
				Residual: s == 1 && c == out})
			h, c = oh, out
			idx++
		}
	}
	b.conv(fmt.Sprintf("features.%d", idx), kernels.Conv2D{N: n, H: h, W: h, C: c, OutC: 1280, R: 1, S: 1, Stride: 1, In: bf16, Bias: true, Act: kernels.ActReLU6})
	b.add("avgpool", kernels.Reduce{Name: "mean", Rows: n * 1280, Cols: h * h, In: bf16}, 0)
	b.linear("classifier.1", kernels.GEMM{M: n, N: classes, K: 1280, In: bf16, Out: bf16, Bias: true})
}

// reduceSplit is the longest run of elements one reduction row covers.
const reduceSplit = 2048

// columnReduce is a per-channel reduction (BN statistics, bias and
// normalisation-weight gradients) of rows outputs over cols elements each,
// split as real implementations split it so that the grid fills the GPU:
// rows·S partial sums over cols/S elements each, S = ceil(cols/2048). The
// partials (a few per channel) are finished by the kernel that consumes
// them (BN apply, the optimizer), as cuDNN and apex do.
func columnReduce(name string, rows, cols int) kernels.Reduce {
	s := (cols + reduceSplit - 1) / reduceSplit
	return kernels.Reduce{Name: name, Rows: rows * s, Cols: (cols + s - 1) / s, In: bf16}
}
