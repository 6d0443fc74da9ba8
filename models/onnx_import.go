package models

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"atoll/kernels"
	"atoll/models/onnx"
)

// ErrONNX is wrapped by every error about an ONNX graph atoll cannot map:
// an operator it has no kernel for (named with its node), an attribute or
// shape it does not support, a missing initializer.
var ErrONNX = errors.New("models: ONNX graph not supported")

// ONNXOps lists the ONNX operators FromONNX maps, and how.
var ONNXOps = map[string]string{
	"Conv":               "convolution (groups = 1) or depthwise convolution (groups = channels); bias, a following BatchNormalization, Relu or Clip(0, 6) and a residual Add are fused",
	"BatchNormalization": "folded into the preceding Conv's weights and bias",
	"Relu":               "fused into the preceding Conv or Gemm",
	"Clip":               "Clip(0, 6) fused into the preceding Conv as ReLU6",
	"Add":                "a Conv's output plus a tensor of its shape: fused as the Conv's residual; a MatMul's output plus a bias initializer: the bias",
	"MaxPool":            "max pooling (square kernel, symmetric padding)",
	"AveragePool":        "average pooling; a 1×1 one with stride 1 is dropped",
	"GlobalAveragePool":  "mean over H and W",
	"ReduceMean":         "mean over H and W (axes 2, 3)",
	"Flatten":            "free (the next Gemm's weight is reordered to atoll's NHWC layout)",
	"Reshape":            "to [N, features] only: free",
	"Gemm":               "linear layer (alpha = beta = 1); a following Relu is fused",
	"MatMul":             "linear layer with an initializer as B",
	"Dropout":            "dropped (inference)",
	"Identity":           "dropped",
	"Constant":           "read as an initializer",
	"LayerNormalization": "encoders (token-id input): a BERT layer's layernorm",
	"Softmax":            "encoders: attention probabilities",
	"Gather":             "encoders: the word embedding, the first token for a pooler; on constants and shapes: computed at import",
	"Transpose":          "encoders: splitting and merging attention heads",
	"Erf":                "encoders: GELU (run as its tanh approximation)",
	"Tanh":               "encoders: the pooler",
	"Shape":              "computed at import, like every node of constants and shapes (Slice, Concat, Unsqueeze, Where, Expand, Range, Cast, ...)",
}

// onnxVal is a tensor of the imported graph: spatial [N,H,W,C] in atoll's
// layout, or flat [N,F].
type onnxVal struct {
	h, w, c int // spatial when h > 0
	f       int // flat: features
	// order: for a flat tensor flattened from a spatial one of more than one
	// pixel, its (h, w, c); the next linear layer reorders its weight from
	// ONNX's C-major order to atoll's NHWC one.
	fromH, fromW, fromC int
}

// onnxOp is one atoll layer: a fused group of ONNX nodes.
type onnxOp struct {
	kind  string // conv, depthwise, pool, gap, linear
	name  string
	in    string // ONNX tensor names
	resid string
	out   string
	inV   onnxVal
	outV  onnxVal
	// conv, depthwise, pool
	outC, r, s, stride, pad int
	max                     bool
	act                     kernels.Act
	// weights (ONNX layouts) and folded batch norm
	w, b             *onnx.Tensor
	bnScale, bnShift []float64
	transB           bool
}

// FromONNX maps an ONNX inference graph onto the kernel library: a Model
// named name whose layers replay the graph at any batch size (the graph's
// batch dimension must be symbolic or 1), and its weights converted to
// atoll's layouts (bf16 kernels and weights, f32 biases; batch norm folded).
// The graph's one input must be an image [N, C, H, W] of static C, H, W.
// An operator or attribute atoll cannot run is refused, naming the node
// (ONNXOps lists what maps).
func FromONNX(name string, om *onnx.Model) (Model, *Bundle, error) {
	if om.Opset != 0 && om.Opset < 7 {
		return Model{}, nil, fmt.Errorf("%w: opset %d; re-export with opset 13 or later", ErrONNX, om.Opset)
	}
	g := &om.Graph
	init := map[string]*onnx.Tensor{}
	for _, t := range g.Initializers {
		init[t.Name] = t
	}
	for _, n := range g.Nodes {
		// The TorchScript exporter writes one initializer for equal ones
		// and an Identity per copy.
		if n.OpType == "Identity" && len(n.Inputs) == 1 && len(n.Outputs) == 1 && init[n.Inputs[0]] != nil {
			t := *init[n.Inputs[0]]
			t.Name = n.Outputs[0]
			init[t.Name] = &t
		}
		if n.OpType == "Constant" && len(n.Outputs) == 1 {
			if a, ok := n.Attrs["value"]; ok && a.T != nil {
				t := *a.T
				t.Name = n.Outputs[0]
				init[t.Name] = &t
			}
		}
	}
	var input *onnx.ValueInfo
	for i := range g.Inputs {
		if _, ok := init[g.Inputs[i].Name]; !ok {
			if input != nil {
				return Model{}, nil, fmt.Errorf("%w: the graph has several inputs (%q, %q); atoll imports models with one (an image, or token ids: export without attention_mask and token_type_ids)", ErrONNX, input.Name, g.Inputs[i].Name)
			}
			input = &g.Inputs[i]
		}
	}
	if input == nil {
		return Model{}, nil, fmt.Errorf("%w: the graph has no input", ErrONNX)
	}
	if len(input.Shape) == 2 && (input.ElemType == onnx.Int64 || input.ElemType == onnx.Int32) {
		return fromONNXEncoder(name, om, init, input)
	}
	if len(input.Shape) != 4 || input.Shape[1].Value <= 0 || input.Shape[2].Value <= 0 || input.Shape[3].Value <= 0 {
		return Model{}, nil, fmt.Errorf("%w: input %q has shape %v; want an image [N, C, H, W] with static C, H and W", ErrONNX, input.Name, dimsString(input.Shape))
	}
	switch input.ElemType {
	case 0, onnx.Float, onnx.Float16, onnx.BFloat16, onnx.Double:
	default:
		return Model{}, nil, fmt.Errorf("%w: input %q is %s; atoll imports image models with a floating-point input [N, C, H, W] and encoders with integer token ids [N, S]", ErrONNX, input.Name, onnx.TypeName(input.ElemType))
	}
	if d := input.Shape[0]; d.Param == "" && d.Value != 1 {
		return Model{}, nil, fmt.Errorf("%w: input %q has a fixed batch of %d; export with a dynamic batch (dynamic_axes) or batch 1", ErrONNX, input.Name, d.Value)
	}
	imgC, imgH, imgW := int(input.Shape[1].Value), int(input.Shape[2].Value), int(input.Shape[3].Value)
	if len(g.Outputs) != 1 {
		return Model{}, nil, fmt.Errorf("%w: the graph has %d outputs; atoll serves models with one", ErrONNX, len(g.Outputs))
	}

	consumers := map[string]int{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			consumers[in]++
		}
	}
	vals := map[string]onnxVal{input.Name: {h: imgH, w: imgW, c: imgC}}
	alias := map[string]string{} // ONNX name -> the name it stands for
	producer := map[string]*onnxOp{}
	var ops []*onnxOp
	used := map[string]bool{}
	resolve := func(s string) string { return resolveAlias(alias, s) }
	opName := func(n onnx.Node, kind string) string {
		base := strings.Trim(strings.NewReplacer("/", ".", ":", ".", " ", "_").Replace(n.Name), ".")
		base = strings.TrimSuffix(base, "."+n.OpType) // PyTorch names nodes "/layer1/conv1/Conv"
		if base == "" {
			base = fmt.Sprintf("%s%d", kind, len(ops))
		}
		name := base
		for i := 2; used[name]; i++ {
			name = fmt.Sprintf("%s_%d", base, i)
		}
		used[name] = true
		return name
	}
	bad := func(n onnx.Node, format string, args ...any) error {
		return fmt.Errorf("%w: node %q (%s): %s", ErrONNX, n.Name, n.OpType, fmt.Sprintf(format, args...))
	}
	// fusable: the op producing x, if x is its output and nothing else reads it.
	fusable := func(x string) *onnxOp {
		p := producer[x]
		if p == nil || p.out != x || consumers[x] != 1 {
			return nil
		}
		return p
	}
	for _, n := range g.Nodes {
		if n.Domain != "" && n.Domain != "ai.onnx" {
			return Model{}, nil, bad(n, "operator domain %q: atoll maps the standard domain only", n.Domain)
		}
		if n.OpType == "Constant" || (n.OpType == "Identity" && len(n.Inputs) == 1 && init[n.Inputs[0]] != nil) {
			continue
		}
		if len(n.Outputs) == 0 {
			return Model{}, nil, bad(n, "no outputs")
		}
		if len(n.Inputs) == 0 && n.OpType != "Constant" {
			return Model{}, nil, bad(n, "no inputs")
		}
		in := func(i int) string {
			if i < len(n.Inputs) {
				return resolve(n.Inputs[i])
			}
			return ""
		}
		x := in(0)
		// The value's view (flattened or not) is the name's own; its data
		// is the resolved name's.
		xv, haveX := onnxVal{}, false
		if len(n.Inputs) > 0 {
			xv, haveX = vals[n.Inputs[0]]
		}
		if !haveX && n.OpType != "Constant" {
			if _, isInit := init[x]; !isInit || n.OpType != "MatMul" {
				return Model{}, nil, bad(n, "input %q is neither the graph's input nor computed by an earlier node", n.Inputs[0])
			}
		}
		out := n.Outputs[0]
		switch n.OpType {
		case "Conv":
			w := init[in(1)]
			if w == nil || len(w.Dims) != 4 {
				return Model{}, nil, bad(n, "its weight %q must be a 4-d initializer", in(1))
			}
			if xv.h == 0 {
				return Model{}, nil, bad(n, "input is not an image")
			}
			st, pad, err := convGeom(n, int(w.Dims[2]), int(w.Dims[3]))
			if err != nil {
				return Model{}, nil, bad(n, "%v", err)
			}
			group := int(attrInt(n, "group", 1))
			op := &onnxOp{kind: "conv", name: opName(n, "conv"), in: x, out: out, inV: xv, outC: int(w.Dims[0]), r: int(w.Dims[2]), s: int(w.Dims[3]), stride: st, pad: pad, w: w}
			switch {
			case group == 1 && int(w.Dims[1]) == xv.c:
			case group == xv.c && int(w.Dims[0]) == xv.c && w.Dims[1] == 1:
				op.kind = "depthwise"
			default:
				return Model{}, nil, bad(n, "group %d with weight %v on %d channels: atoll runs plain (group 1) and depthwise convolutions", group, w.Dims, xv.c)
			}
			if b := in(2); b != "" {
				if op.b = init[b]; op.b == nil || len(op.b.Values) != op.outC {
					return Model{}, nil, bad(n, "bias %q must be an initializer of %d values", b, op.outC)
				}
			}
			oh := (xv.h+2*pad-op.r)/st + 1
			ow := (xv.w+2*pad-op.s)/st + 1
			if oh < 1 || ow < 1 {
				return Model{}, nil, bad(n, "a %dx%d kernel does not fit the %dx%d input", op.r, op.s, xv.h, xv.w)
			}
			op.outV = onnxVal{h: oh, w: ow, c: op.outC}
			ops = append(ops, op)
			producer[out], vals[out] = op, op.outV
		case "BatchNormalization":
			p := fusable(x)
			if p == nil || (p.kind != "conv" && p.kind != "depthwise") || p.bnScale != nil || p.act != kernels.ActNone || p.resid != "" {
				return Model{}, nil, bad(n, "batch norm not directly after a convolution: atoll folds it into one")
			}
			var ps [4]*onnx.Tensor
			for i := range ps {
				if ps[i] = init[in(i+1)]; ps[i] == nil || len(ps[i].Values) != p.outC {
					return Model{}, nil, bad(n, "parameter %d must be an initializer of %d values", i+1, p.outC)
				}
			}
			eps := float64(attrFloat(n, "epsilon", 1e-5))
			p.bnScale, p.bnShift = make([]float64, p.outC), make([]float64, p.outC)
			for o := range p.outC {
				sc := ps[0].Values[o] / math.Sqrt(ps[3].Values[o]+eps)
				p.bnScale[o], p.bnShift[o] = sc, ps[1].Values[o]-ps[2].Values[o]*sc
			}
			p.out, producer[out], vals[out] = out, p, xv
		case "Relu", "Clip":
			act := kernels.ActReLU
			if n.OpType == "Clip" {
				lo, hi := clipBounds(n, init)
				switch {
				case lo == 0 && hi == 6:
					act = kernels.ActReLU6
				case lo == 0 && math.IsInf(hi, 1):
				default:
					return Model{}, nil, bad(n, "Clip(%v, %v): atoll runs Clip(0, 6) and Clip(0, ∞) only", lo, hi)
				}
			}
			p := fusable(x)
			if p == nil || p.act != kernels.ActNone || (p.kind != "conv" && p.kind != "depthwise" && p.kind != "linear") || (p.kind == "depthwise" && p.resid != "") {
				return Model{}, nil, bad(n, "an activation not directly after a Conv, a Gemm or a Conv's residual Add: atoll fuses it into one")
			}
			p.act, p.out, producer[out], vals[out] = act, out, p, xv
		case "Add":
			a, b := x, in(1)
			if p := fusable(a); p != nil && p.kind == "linear" && init[b] != nil && p.b == nil && len(init[b].Values) == p.outV.f {
				p.b, p.out, producer[out], vals[out] = init[b], out, p, xv
				break
			}
			p := fusable(a)
			if p == nil || p.kind != "conv" || p.resid != "" || p.act != kernels.ActNone {
				a, b = b, a
				p = fusable(a)
			}
			if p == nil || p.kind != "conv" || p.resid != "" || p.act != kernels.ActNone {
				return Model{}, nil, bad(n, "an Add that is not a convolution's output plus a residual: atoll fuses residual adds into the convolution")
			}
			if bv, ok := vals[b]; !ok || bv != p.outV {
				return Model{}, nil, bad(n, "the residual %q is not a computed tensor of the convolution's output shape", in(1))
			}
			p.resid, p.out, producer[out], vals[out] = b, out, p, p.outV
		case "MaxPool", "AveragePool":
			ks := attrInts(n, "kernel_shape")
			if len(ks) != 2 || ks[0] != ks[1] {
				return Model{}, nil, bad(n, "kernel_shape %v: atoll pools with square kernels", ks)
			}
			if xv.h == 0 {
				return Model{}, nil, bad(n, "input is not an image")
			}
			st, pad, err := convGeom(n, int(ks[0]), int(ks[1]))
			if err != nil {
				return Model{}, nil, bad(n, "%v", err)
			}
			if attrInt(n, "ceil_mode", 0) != 0 {
				return Model{}, nil, bad(n, "ceil_mode 1: atoll pools with floor")
			}
			if n.OpType == "AveragePool" && ks[0] == 1 && st == 1 && pad == 0 {
				alias[out], vals[out] = x, xv
				break
			}
			op := &onnxOp{kind: "pool", name: opName(n, "pool"), in: x, out: out, inV: xv, r: int(ks[0]), s: int(ks[1]), stride: st, pad: pad, max: n.OpType == "MaxPool"}
			op.outV = onnxVal{h: (xv.h+2*pad-op.r)/st + 1, w: (xv.w+2*pad-op.s)/st + 1, c: xv.c}
			ops = append(ops, op)
			producer[out], vals[out] = op, op.outV
		case "GlobalAveragePool", "ReduceMean":
			if xv.h == 0 {
				return Model{}, nil, bad(n, "input is not an image")
			}
			if n.OpType == "ReduceMean" {
				axes := attrInts(n, "axes")
				if t := init[in(1)]; t != nil {
					axes = nil
					for _, v := range t.Values {
						axes = append(axes, int64(v))
					}
				}
				norm := make([]int64, len(axes)) // negative axes count from the end of [N, C, H, W]
				for i, a := range axes {
					norm[i] = a
					if a < 0 {
						norm[i] = a + 4
					}
				}
				slices.Sort(norm)
				if !slices.Equal(norm, []int64{2, 3}) {
					return Model{}, nil, bad(n, "axes %v: atoll takes the mean over H and W (axes 2, 3) only", axes)
				}
			}
			op := &onnxOp{kind: "gap", name: opName(n, "avgpool"), in: x, out: out, inV: xv, outV: onnxVal{f: xv.c}}
			ops = append(ops, op)
			producer[out], vals[out] = op, op.outV
		case "Flatten", "Reshape":
			if n.OpType == "Flatten" && attrInt(n, "axis", 1) != 1 {
				return Model{}, nil, bad(n, "axis %d: atoll flattens to [N, features] (axis 1) only", attrInt(n, "axis", 1))
			}
			if n.OpType == "Reshape" {
				t := init[in(1)]
				if t == nil || len(t.Values) != 2 || (t.Values[0] != -1 && t.Values[0] != 0 && t.Values[0] != 1) {
					return Model{}, nil, bad(n, "a reshape other than to [N, features]")
				}
			}
			v := xv
			if xv.h > 0 {
				v = onnxVal{f: xv.h * xv.w * xv.c}
				if xv.h*xv.w > 1 {
					v.fromH, v.fromW, v.fromC = xv.h, xv.w, xv.c
				}
			}
			alias[out], vals[out] = x, v
			if p := producer[x]; p != nil && p.out == x {
				producer[out] = p
			}
		case "Dropout", "Identity":
			alias[out], vals[out] = x, xv
			if p := producer[x]; p != nil && p.out == x {
				producer[out] = p
			}
		case "Gemm", "MatMul":
			if xv.h > 0 {
				return Model{}, nil, bad(n, "input is an image: flatten it first")
			}
			w := init[in(1)]
			if w == nil || len(w.Dims) != 2 {
				return Model{}, nil, bad(n, "B %q must be a 2-d initializer", in(1))
			}
			op := &onnxOp{kind: "linear", name: opName(n, "linear"), in: x, out: out, inV: xv, w: w}
			op.transB = n.OpType == "Gemm" && attrInt(n, "transB", 0) == 1
			if n.OpType == "Gemm" && (attrInt(n, "transA", 0) != 0 || attrFloat(n, "alpha", 1) != 1 || attrFloat(n, "beta", 1) != 1) {
				return Model{}, nil, bad(n, "transA, alpha or beta other than 0, 1, 1")
			}
			k, nOut := int(w.Dims[0]), int(w.Dims[1])
			if op.transB {
				k, nOut = nOut, k
			}
			if k != xv.f {
				return Model{}, nil, bad(n, "B %v takes %d features, the input has %d", w.Dims, k, xv.f)
			}
			if c := in(2); c != "" {
				if op.b = init[c]; op.b == nil || len(op.b.Values) != nOut {
					return Model{}, nil, bad(n, "C %q must be an initializer of %d values", c, nOut)
				}
			}
			op.outV = onnxVal{f: nOut}
			ops = append(ops, op)
			producer[out], vals[out] = op, op.outV
		default:
			return Model{}, nil, bad(n, "atoll has no kernel for this operator (it maps: %s)", strings.Join(sortedKeys(ONNXOps), ", "))
		}
	}
	output := resolve(g.Outputs[0].Name)
	if p := producer[output]; p == nil || p.out != output {
		if p == nil {
			return Model{}, nil, fmt.Errorf("%w: the output %q is not computed by any mapped node", ErrONNX, g.Outputs[0].Name)
		}
	}
	// Emit in dependency order: a residual may be computed after the
	// convolution that adds it (ResNet's downsample).
	order, err := onnxOrder(ops, input.Name, alias)
	if err != nil {
		return Model{}, nil, err
	}
	m := Model{name: name, base: name, phase: PhaseInference, arch: "onnx",
		description: fmt.Sprintf("imported from ONNX (%d nodes, opset %d, %s)", len(g.Nodes), om.Opset, filepath.Base(om.Producer))}
	if om.Producer == "" {
		m.description = fmt.Sprintf("imported from ONNX (%d nodes, opset %d)", len(g.Nodes), om.Opset)
	}
	m.build = func(b *builder, n int) { emitONNX(b, n, order, input.Name, imgH, imgW, imgC, resolve, output) }
	gr, err := m.Graph(1)
	if err != nil {
		return Model{}, nil, fmt.Errorf("%w: %w", ErrONNX, err)
	}
	weights, err := onnxWeights(gr, order)
	if err != nil {
		return Model{}, nil, err
	}
	m.weights = weights
	m.io = &ONNXIO{Input: input.Name, C: imgC, H: imgH, W: imgW, Output: g.Outputs[0].Name}
	return m, weights, nil
}

// resolveAlias follows free ops (Flatten, Dropout, ...) back to the tensor
// whose data they stand for.
func resolveAlias(alias map[string]string, s string) string {
	for {
		a, ok := alias[s]
		if !ok {
			return s
		}
		s = a
	}
}

// onnxOrder sorts ops so that every op's inputs are computed before it.
func onnxOrder(ops []*onnxOp, input string, alias map[string]string) ([]*onnxOp, error) {
	resolve := func(s string) string { return resolveAlias(alias, s) }
	have := map[string]bool{input: true}
	var order []*onnxOp
	left := slices.Clone(ops)
	for len(left) > 0 {
		progress := false
		for i := 0; i < len(left); i++ {
			op := left[i]
			if !have[resolve(op.in)] || (op.resid != "" && !have[resolve(op.resid)]) {
				continue
			}
			order = append(order, op)
			have[op.out] = true
			left = slices.Delete(left, i, i+1)
			i--
			progress = true
		}
		if !progress {
			return nil, fmt.Errorf("%w: the graph has a cycle or reads a tensor nothing computes (at %s)", ErrONNX, left[0].name)
		}
	}
	return order, nil
}

// emitONNX replays the mapped ops into the builder at batch n.
func emitONNX(b *builder, n int, order []*onnxOp, input string, h, w, c int, resolve func(string) string, output string) {
	names := map[string]string{input: b.input("input", bf16, n, h, w, c)}
	get := func(s string) string { return names[resolve(s)] }
	for _, op := range order {
		x := get(op.in)
		iv, ov := op.inV, op.outV
		switch op.kind {
		case "conv":
			cv := kernels.Conv2D{N: n, H: iv.h, W: iv.w, C: iv.c, OutC: op.outC, R: op.r, S: op.s, Stride: op.stride, Pad: op.pad,
				In: bf16, Bias: true, BiasType: bf16, Act: op.act, Residual: op.resid != ""}
			names[op.out] = b.conv(op.name, x, cv, get(op.resid))
		case "depthwise":
			// The depthwise kernel has no bias operand: the folded batch
			// norm's shift and the activation follow as a bias_act.
			dw := kernels.Depthwise{N: n, H: iv.h, W: iv.w, C: iv.c, R: op.r, S: op.s, Stride: op.stride, Pad: op.pad, In: bf16}
			pre := b.act(op.name+".dw", bf16, n, ov.h, ov.w, ov.c)
			b.op(op.name+".dw", dw, dw.C*dw.R*dw.S, []string{x}, []string{b.weight(op.name+".weight", bf16, op.r, op.s, iv.c)}, []string{pre})
			ba := kernels.Elementwise{Name: "bias_act", Elems: n * ov.h * ov.w * ov.c, Inputs: 1, Outputs: 1, In: bf16, Act: op.act, Cols: ov.c}
			out := b.act(op.name, bf16, n, ov.h, ov.w, ov.c)
			b.op(op.name, ba, iv.c, []string{pre}, []string{b.weight(op.name+".bias", kernels.F32, iv.c)}, []string{out})
			names[op.out] = out
		case "pool":
			p := kernels.Pool{N: n, H: iv.h, W: iv.w, C: iv.c, R: op.r, S: op.s, Stride: op.stride, Pad: op.pad, Max: op.max, In: bf16}
			out := b.act(op.name, bf16, n, ov.h, ov.w, ov.c)
			b.op(op.name, p, 0, []string{x}, nil, []string{out})
			names[op.out] = out
		case "gap":
			out := b.act(op.name, bf16, n, iv.c)
			b.op(op.name, kernels.Reduce{Name: "mean", Rows: n * iv.c, Cols: iv.h * iv.w, In: bf16}, 0, []string{x}, nil, []string{out}).glue(GlueNHWCMean)
			names[op.out] = out
		case "linear":
			names[op.out] = b.linear(op.name, x, kernels.GEMM{M: n, N: ov.f, K: iv.f, In: bf16, Out: bf16, Bias: true, BiasType: bf16, Act: op.act})
		}
	}
	b.output = get(output)
}

// onnxWeights converts the ONNX initializers to the graph's weights.
func onnxWeights(g *Graph, order []*onnxOp) (*Bundle, error) {
	wb := &Bundle{}
	add := func(name string, vals []float64) error {
		t, ok := g.Tensor(name)
		if !ok || t.Elems() != len(vals) {
			return fmt.Errorf("%w: weight %s: %d values for %v", ErrONNX, name, len(vals), t.Shape)
		}
		wb.Add(NewData(name, t.DType, t.Shape, vals))
		return nil
	}
	for _, op := range order {
		switch op.kind {
		case "conv", "depthwise":
			oc, r, s := op.outC, op.r, op.s
			cin := op.inV.c
			if op.kind == "depthwise" {
				cin = 1
			}
			scale := func(o int) float64 {
				if op.bnScale != nil {
					return op.bnScale[o]
				}
				return 1
			}
			var w []float64
			if op.kind == "conv" { // [OutC, C, R, S] -> [R, S, C, OutC]
				w = make([]float64, r*s*cin*oc)
				for o := range oc {
					for ci := range cin {
						for y := range r {
							for x := range s {
								w[((y*s+x)*cin+ci)*oc+o] = op.w.Values[((o*cin+ci)*r+y)*s+x] * scale(o)
							}
						}
					}
				}
			} else { // [C, 1, R, S] -> [R, S, C]
				w = make([]float64, r*s*oc)
				for o := range oc {
					for y := range r {
						for x := range s {
							w[(y*s+x)*oc+o] = op.w.Values[(o*r+y)*s+x] * scale(o)
						}
					}
				}
			}
			bias := make([]float64, oc)
			for o := range oc {
				if op.b != nil {
					bias[o] = op.b.Values[o]
				}
				if op.bnScale != nil {
					bias[o] = bias[o]*op.bnScale[o] + op.bnShift[o]
				}
			}
			if err := add(op.name+".weight", w); err != nil {
				return nil, err
			}
			if err := add(op.name+".bias", bias); err != nil {
				return nil, err
			}
		case "linear": // to [K, N], K in atoll's NHWC order
			k, nOut := op.inV.f, op.outV.f
			w := make([]float64, k*nOut)
			for ki := range k {
				src := ki // ONNX's feature index for atoll's feature ki
				if v := op.inV; v.fromH > 0 {
					y, rest := ki/(v.fromW*v.fromC), ki%(v.fromW*v.fromC)
					x, c := rest/v.fromC, rest%v.fromC
					src = (c*v.fromH+y)*v.fromW + x
				}
				for j := range nOut {
					if op.transB {
						w[ki*nOut+j] = op.w.Values[j*k+src]
					} else {
						w[ki*nOut+j] = op.w.Values[src*nOut+j]
					}
				}
			}
			bias := make([]float64, nOut)
			if op.b != nil {
				copy(bias, op.b.Values)
			}
			if err := add(op.name+".weight", w); err != nil {
				return nil, err
			}
			if err := add(op.name+".bias", bias); err != nil {
				return nil, err
			}
		}
	}
	if err := CheckBundle(g, wb, KindWeight); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrONNX, err)
	}
	return wb, nil
}

// convGeom reads strides, pads and dilations of a Conv or pool node.
func convGeom(n onnx.Node, r, s int) (stride, pad int, err error) {
	st := attrInts(n, "strides")
	if len(st) == 0 {
		st = []int64{1, 1}
	}
	if len(st) != 2 || st[0] != st[1] || st[0] < 1 {
		return 0, 0, fmt.Errorf("strides %v: atoll runs equal strides", st)
	}
	if d := attrInts(n, "dilations"); len(d) > 0 && (d[0] != 1 || d[1] != 1) {
		return 0, 0, fmt.Errorf("dilations %v: atoll runs dilation 1", d)
	}
	if ap := n.Attrs["auto_pad"].S; ap != "" && ap != "NOTSET" {
		return 0, 0, fmt.Errorf("auto_pad %s: re-export with explicit pads", ap)
	}
	p := attrInts(n, "pads")
	if len(p) == 0 {
		p = []int64{0, 0, 0, 0}
	}
	if len(p) != 4 || p[0] != p[1] || p[0] != p[2] || p[0] != p[3] {
		return 0, 0, fmt.Errorf("pads %v: atoll runs equal padding on every side", p)
	}
	_ = r
	_ = s
	return int(st[0]), int(p[0]), nil
}

func clipBounds(n onnx.Node, init map[string]*onnx.Tensor) (lo, hi float64) {
	lo, hi = math.Inf(-1), math.Inf(1)
	if a, ok := n.Attrs["min"]; ok {
		lo = float64(a.F)
	}
	if a, ok := n.Attrs["max"]; ok {
		hi = float64(a.F)
	}
	if len(n.Inputs) > 1 && n.Inputs[1] != "" {
		if t := init[n.Inputs[1]]; t != nil && len(t.Values) == 1 {
			lo = t.Values[0]
		}
	}
	if len(n.Inputs) > 2 && n.Inputs[2] != "" {
		if t := init[n.Inputs[2]]; t != nil && len(t.Values) == 1 {
			hi = t.Values[0]
		}
	}
	return lo, hi
}

func attrInt(n onnx.Node, name string, def int64) int64 {
	if a, ok := n.Attrs[name]; ok {
		return a.I
	}
	return def
}

func attrFloat(n onnx.Node, name string, def float32) float32 {
	if a, ok := n.Attrs[name]; ok {
		return a.F
	}
	return def
}

func attrInts(n onnx.Node, name string) []int64 { return n.Attrs[name].Ints }

func dimsString(ds []onnx.Dim) string {
	var parts []string
	for _, d := range ds {
		if d.Param != "" {
			parts = append(parts, d.Param)
		} else {
			parts = append(parts, fmt.Sprint(d.Value))
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// imported caches ONNX files by path: every command asks models.Get for its
// model several times.
var imported = struct {
	sync.Mutex
	m      map[string]Model // by absolute path
	byName map[string]Model // by model name, for later Get calls in the process
}{m: map[string]Model{}, byName: map[string]Model{}}

// importedNamed is an ONNX model imported earlier in this process under
// name.
func importedNamed(name string) (Model, bool) {
	imported.Lock()
	defer imported.Unlock()
	m, ok := imported.byName[strings.ToLower(name)]
	return m, ok
}

// importONNX is Get for a path ending in .onnx: the file imported with
// FromONNX under its base name without the extension ("models/net.onnx" is
// the model "net", or "net-onnx" where the zoo has a "net"), so its
// profiles are stored and found under that name, and Get finds it by that
// name for the rest of the process.
func importONNX(path string) (Model, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Model{}, err
	}
	imported.Lock()
	defer imported.Unlock()
	if m, ok := imported.m[abs]; ok {
		return m, nil
	}
	om, err := onnx.DecodeFile(path)
	if err != nil {
		return Model{}, err
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if _, clash := zoo[strings.ToLower(name)]; clash {
		name += "-onnx"
	}
	m, _, err := FromONNX(name, om)
	if err != nil {
		return Model{}, fmt.Errorf("%s: %w", path, err)
	}
	imported.m[abs] = m
	imported.byName[strings.ToLower(name)] = m
	return m, nil
}
