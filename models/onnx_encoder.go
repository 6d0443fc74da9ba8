package models

import (
	"fmt"
	"math"
	"slices"

	"atoll/kernels"
	"atoll/models/onnx"
)

// An imported encoder is recognized, not translated node by node: the graph
// is evaluated abstractly (constants and shapes computed, every other
// tensor given a meaning such as "Q of layer i split into heads"), the
// meanings build a small graph of whole layers, and that graph must be a
// BERT-family encoder — embeddings, post-layernorm self-attention and GELU
// feed-forward layers, an optional tanh pooler — which the zoo's BERT
// graph then runs with the file's weights. PyTorch's two exporters
// (TorchScript and torch.export) write the same network with different
// node patterns; both reduce to the same layers.

// encNode is one layer of the recognized network.
type encNode struct {
	kind  string // ids, embed, addc, ln, lin, attn, add, cls, tanh
	in    []*encNode
	onnx  string // the ONNX node that made it
	w, b  []float64
	k, n  int // lin: [K, N]; embed: [vocab, hidden]; addc: [seq, hidden]
	act   kernels.Act
	eps   float64
	heads int
	scale float64
	qkv   [3]*encNode // attn
}

type encKind int

const (
	eHidden   encKind = iota // [B, S, H] tokens (or [B, H] for the [CLS] rows): node
	eMatmul                  // node·W before its bias
	eSplit                   // a linear layer's output viewed [B, S, heads, d]
	eHeads                   // [B, heads, S, d] (or [B·heads, S, d]); trans: the last two swapped
	eScores                  // Q·Kᵀ·scale [B, heads, S, S]
	eProbs                   // softmax(scores)
	eNaN                     // IsNaN(probs): a guard that never fires
	eCtxHeads                // probs·V [B, heads, S, d]
	eCtxSplit                // [B, S, heads, d]
	eGeluArg                 // x/√2 of a linear layer's output x
	eGeluErf                 // erf(x/√2)
	eGeluOne                 // factor·(1 + erf(x/√2))
	eGeluX                   // factor·x·(1 + erf(x/√2))
)

type encVal struct {
	kind    encKind
	shape   []int
	node    *encNode // eHidden, eMatmul's input, eSplit/eHeads' linear layer, gelu's x
	w       *cval    // eMatmul
	trans   bool
	scale   float64
	q, k, v *encVal
	probs   *encVal
	factor  float64
	heads   int
}

// encBatch is the batch the import evaluates the graph at: not 1, so that a
// shape computation that would confuse batch with another dimension of
// size 1 shows.
const encBatch = 2

// encDefaultSeq is the sequence length served when the file's is symbolic.
const encDefaultSeq = 128

// fromONNXEncoder imports a graph whose one input is token ids [N, S].
func fromONNXEncoder(name string, om *onnx.Model, init map[string]*onnx.Tensor, input *onnx.ValueInfo) (Model, *Bundle, error) {
	g := &om.Graph
	seq := int(input.Shape[1].Value)
	if input.Shape[1].Param != "" || seq <= 0 {
		seq = encDefaultSeq
	}
	if len(g.Outputs) != 1 {
		return Model{}, nil, fmt.Errorf("%w: the graph has %d outputs (%s); atoll serves one: export a module that returns one tensor (tools/onnx/export.py shows how)", ErrONNX, len(g.Outputs), outputNames(g))
	}
	consts := map[string]*cval{}
	for name, t := range init {
		consts[name] = cvalOf(t)
	}
	ids := &encNode{kind: "ids", onnx: input.Name}
	dyn := map[string]*encVal{input.Name: {kind: eHidden, shape: []int{encBatch, seq}, node: ids}}
	for _, n := range g.Nodes {
		if n.Domain != "" && n.Domain != "ai.onnx" {
			return Model{}, nil, fmt.Errorf("%w: node %q (%s): operator domain %q: atoll maps the standard domain only", ErrONNX, n.Name, n.OpType, n.Domain)
		}
		if len(n.Outputs) == 0 {
			return Model{}, nil, fmt.Errorf("%w: node %q (%s): no outputs", ErrONNX, n.Name, n.OpType)
		}
		if n.OpType == "Constant" {
			if a, ok := n.Attrs["value"]; ok && a.T != nil {
				consts[n.Outputs[0]] = cvalOf(a.T)
				continue
			}
			return Model{}, nil, fmt.Errorf("%w: node %q (Constant): only a tensor value is read", ErrONNX, n.Name)
		}
		cin := make([]*cval, len(n.Inputs))
		var din []*encVal
		anyDyn := false
		for i, s := range n.Inputs {
			if s == "" {
				continue
			}
			if c, ok := consts[s]; ok {
				cin[i] = c
				din = append(din, nil)
				continue
			}
			d, ok := dyn[s]
			if !ok {
				return Model{}, nil, fmt.Errorf("%w: node %q (%s): input %q is neither the graph's input nor computed by an earlier node", ErrONNX, n.Name, n.OpType, s)
			}
			din = append(din, d)
			anyDyn = true
		}
		for len(din) < len(n.Inputs) {
			din = append(din, nil)
		}
		if n.OpType == "Shape" && len(din) > 0 && din[0] != nil {
			consts[n.Outputs[0]] = foldShape(n, din[0].shape)
			continue
		}
		if !anyDyn {
			c, err := fold(n, cin)
			if err != nil {
				return Model{}, nil, fmt.Errorf("%w: node %q (%s): %v", ErrONNX, n.Name, n.OpType, err)
			}
			consts[n.Outputs[0]] = c
			continue
		}
		v, err := encStep(n, cin, din)
		if err != nil {
			return Model{}, nil, fmt.Errorf("%w: node %q (%s): %v", ErrONNX, n.Name, n.OpType, err)
		}
		dyn[n.Outputs[0]] = v
	}
	out, ok := dyn[g.Outputs[0].Name]
	if !ok {
		return Model{}, nil, fmt.Errorf("%w: the output %q does not depend on the input", ErrONNX, g.Outputs[0].Name)
	}
	out = materialize(out)
	if out.kind != eHidden {
		return Model{}, nil, fmt.Errorf("%w: the output %q is not a layer's output (%s)", ErrONNX, g.Outputs[0].Name, encKindName(out.kind))
	}
	enc, err := recognizeEncoder(out.node, seq)
	if err != nil {
		return Model{}, nil, fmt.Errorf("%w: %v", ErrONNX, err)
	}
	m, err := NewBERT(name, enc.cfg)
	if err != nil {
		return Model{}, nil, fmt.Errorf("%w: %w", ErrONNX, err)
	}
	m.description = fmt.Sprintf("imported from ONNX (%d nodes, opset %d): BERT-family encoder, %d layers, hidden %d, %d heads, sequence %d",
		len(g.Nodes), om.Opset, enc.cfg.Layers, enc.cfg.Hidden, enc.cfg.Heads, seq)
	gr, err := m.Graph(1)
	if err != nil {
		return Model{}, nil, fmt.Errorf("%w: %w", ErrONNX, err)
	}
	weights, err := enc.bundle(gr)
	if err != nil {
		return Model{}, nil, err
	}
	outShape := []int{seq, enc.cfg.Hidden}
	if enc.cfg.Pooler {
		outShape = []int{enc.cfg.Hidden}
	}
	m.weights = weights
	m.io = &ONNXIO{Input: input.Name, Tokens: true, Seq: seq, Vocab: enc.cfg.Vocab, Output: g.Outputs[0].Name, OutShape: outShape,
		Notes: enc.notes}
	return m, weights, nil
}

func outputNames(g *onnx.Graph) string {
	var s []string
	for _, o := range g.Outputs {
		s = append(s, o.Name)
	}
	return fmt.Sprint(s)
}

func encKindName(k encKind) string {
	return [...]string{"hidden states", "a product before its bias", "heads split", "attention heads", "attention scores",
		"attention probabilities", "a NaN guard", "attention context per head", "attention context split",
		"GELU's x/√2", "GELU's erf", "GELU's 1 + erf", "GELU's x·(1 + erf)"}[k]
}

// materialize turns a product without a bias into a linear layer with a
// zero bias; any other value is returned as is.
func materialize(v *encVal) *encVal {
	if v.kind != eMatmul {
		return v
	}
	k, n := v.w.shape[0], v.w.shape[1]
	l := &encNode{kind: "lin", in: []*encNode{v.node}, w: v.w.v, b: make([]float64, n), k: k, n: n, onnx: v.node.onnx}
	return &encVal{kind: eHidden, shape: v.shape, node: l}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-4*math.Max(1, math.Abs(b)) }

// encStep gives node n's output a meaning from its inputs' (cin: the
// constant ones, din: the others).
func encStep(n onnx.Node, cin []*cval, din []*encVal) (*encVal, error) {
	x := din[0]
	arg := func(i int) (*cval, *encVal) {
		if i < len(cin) {
			return cin[i], din[i]
		}
		return nil, nil
	}
	hidden := func(v *encVal) *encVal {
		if v == nil {
			return nil
		}
		if v = materialize(v); v.kind != eHidden {
			return nil
		}
		return v
	}
	switch n.OpType {
	case "Identity", "Dropout", "Cast":
		if x == nil {
			return nil, fmt.Errorf("unexpected input")
		}
		return x, nil
	case "Gather":
		data, dx := arg(0)
		idx, didx := arg(1)
		if data != nil && didx != nil && didx.node.kind == "ids" && len(data.shape) == 2 && attrInt(n, "axis", 0) == 0 {
			t := &encNode{kind: "embed", in: []*encNode{didx.node}, w: data.v, k: data.shape[0], n: data.shape[1], onnx: n.Name}
			return &encVal{kind: eHidden, shape: append(slices.Clone(didx.shape), data.shape[1]), node: t}, nil
		}
		if h := hidden(dx); h != nil && idx != nil && len(h.shape) == 3 && clampAxis(int(attrInt(n, "axis", 0)), 3) == 1 {
			if i, ok := idx.scalar(); ok && i == 0 && len(idx.shape) == 0 {
				c := &encNode{kind: "cls", in: []*encNode{h.node}, onnx: n.Name}
				return &encVal{kind: eHidden, shape: []int{h.shape[0], h.shape[2]}, node: c}, nil
			}
		}
		return nil, fmt.Errorf("atoll maps a Gather of token ids from an embedding table, or of the first token's hidden state")
	case "Slice":
		h := hidden(x)
		starts, _ := arg(1)
		ends, _ := arg(2)
		axes, _ := arg(3)
		if h != nil && len(h.shape) == 3 && starts != nil && ends != nil && axes != nil && len(axes.v) == 1 &&
			clampAxis(int(axes.v[0]), 3) == 1 && starts.v[0] == 0 && ends.v[0] == 1 {
			c := &encNode{kind: "cls", in: []*encNode{h.node}, onnx: n.Name}
			return &encVal{kind: eHidden, shape: []int{h.shape[0], 1, h.shape[2]}, node: c}, nil
		}
		return nil, fmt.Errorf("atoll maps a Slice of the first token's hidden state only")
	case "Squeeze":
		if h := hidden(x); h != nil && h.node.kind == "cls" && len(h.shape) == 3 {
			return &encVal{kind: eHidden, shape: []int{h.shape[0], h.shape[2]}, node: h.node}, nil
		}
		return nil, fmt.Errorf("atoll maps a Squeeze of the first token's hidden state only")
	case "MatMul":
		a, da := arg(0)
		b, db := arg(1)
		switch {
		case a == nil && b != nil && len(b.shape) == 2 && hidden(da) != nil:
			h := hidden(da)
			if h.shape[len(h.shape)-1] != b.shape[0] {
				return nil, fmt.Errorf("a %v input times a %v weight", h.shape, b.shape)
			}
			shape := slices.Clone(h.shape)
			shape[len(shape)-1] = b.shape[1]
			return &encVal{kind: eMatmul, shape: shape, node: h.node, w: b}, nil
		case da != nil && db != nil && da.kind == eHeads && db.kind == eHeads && !da.trans && db.trans:
			if da.node == db.node || da.heads != db.heads {
				return nil, fmt.Errorf("Q·Kᵀ of mismatched projections")
			}
			shape := slices.Clone(da.shape)
			shape[len(shape)-1] = db.shape[len(db.shape)-1]
			return &encVal{kind: eScores, shape: shape, q: da, k: db, scale: da.scale * db.scale, heads: da.heads}, nil
		case da != nil && db != nil && da.kind == eProbs && db.kind == eHeads && !db.trans:
			return &encVal{kind: eCtxHeads, shape: slices.Clone(db.shape), probs: da, v: db, heads: db.heads}, nil
		}
		return nil, fmt.Errorf("atoll maps MatMul of hidden states by a weight, of Q by Kᵀ and of attention probabilities by V")
	case "Gemm":
		h := hidden(x)
		w, _ := arg(1)
		bias, _ := arg(2)
		if h == nil || w == nil || len(w.shape) != 2 || len(h.shape) != 2 || attrInt(n, "transA", 0) != 0 ||
			attrFloat(n, "alpha", 1) != 1 || attrFloat(n, "beta", 1) != 1 {
			return nil, fmt.Errorf("atoll maps Gemm of hidden states by a weight initializer (alpha = beta = 1, no transA)")
		}
		k, nOut := w.shape[0], w.shape[1]
		wv := w.v
		if attrInt(n, "transB", 0) != 0 {
			k, nOut = nOut, k
			wv = transpose2(w.v, w.shape[0], w.shape[1])
		}
		if h.shape[1] != k {
			return nil, fmt.Errorf("a %v input times a [%d %d] weight", h.shape, k, nOut)
		}
		b := make([]float64, nOut)
		if bias != nil {
			if bias.elems() != nOut {
				return nil, fmt.Errorf("bias of %d values for %d outputs", bias.elems(), nOut)
			}
			copy(b, bias.v)
		}
		l := &encNode{kind: "lin", in: []*encNode{h.node}, w: wv, b: b, k: k, n: nOut, onnx: n.Name}
		return &encVal{kind: eHidden, shape: []int{h.shape[0], nOut}, node: l}, nil
	case "Add":
		da, db, c := operands(cin, din, true)
		if da == nil || (db == nil && c == nil) {
			return nil, fmt.Errorf("Add needs two inputs")
		}
		if db != nil {
			ha, hb := hidden(da), hidden(db)
			if ha == nil || hb == nil || !slices.Equal(ha.shape, hb.shape) {
				return nil, fmt.Errorf("atoll maps the sum of two hidden states of one shape")
			}
			s := &encNode{kind: "add", in: []*encNode{ha.node, hb.node}, onnx: n.Name}
			return &encVal{kind: eHidden, shape: ha.shape, node: s}, nil
		}
		switch da.kind {
		case eMatmul:
			nOut := da.w.shape[1]
			if c.elems() != nOut || c.shape[len(c.shape)-1] != nOut {
				return nil, fmt.Errorf("a bias of shape %v for %d outputs", c.shape, nOut)
			}
			l := &encNode{kind: "lin", in: []*encNode{da.node}, w: da.w.v, b: c.v, k: da.w.shape[0], n: nOut, onnx: n.Name}
			return &encVal{kind: eHidden, shape: da.shape, node: l}, nil
		case eScores:
			for _, v := range c.v {
				if v != 0 {
					return nil, fmt.Errorf("an attention mask that is not zero (%g): atoll's attention has no mask; export with full-length sequences and no attention_mask input", v)
				}
			}
			return da, nil
		case eGeluErf:
			if s, ok := c.scalar(); ok && s == 1 {
				return &encVal{kind: eGeluOne, shape: da.shape, node: da.node, factor: 1}, nil
			}
		case eHidden:
			if k := da.node.kind; (k == "embed" || k == "addc") && len(da.shape) == 3 {
				tab, err := tokenTable(c, da.shape)
				if err != nil {
					return nil, err
				}
				t := &encNode{kind: "addc", in: []*encNode{da.node}, w: tab, k: da.shape[1], n: da.shape[2], onnx: n.Name}
				return &encVal{kind: eHidden, shape: da.shape, node: t}, nil
			}
		}
		return nil, fmt.Errorf("atoll maps Add of a bias, of a zero attention mask, of constant rows to embeddings, of GELU's 1, and of two hidden states (%s plus a constant %v)", encKindName(da.kind), c.shape)
	case "Mul", "Div":
		da, db, b := operands(cin, din, n.OpType == "Mul")
		if da != nil && db != nil && n.OpType == "Mul" {
			// x·(1 + erf(x/√2)) in either order.
			if da.kind == eGeluOne {
				da, db = db, da
			}
			if h := hidden(da); h != nil && db.kind == eGeluOne && db.node == h.node {
				return geluDone(&encVal{kind: eGeluX, shape: h.shape, node: h.node, factor: db.factor}), nil
			}
			return nil, fmt.Errorf("atoll maps the product of two tensors in GELU only")
		}
		if da == nil || b == nil {
			return nil, fmt.Errorf("unexpected inputs")
		}
		s, ok := b.scalar()
		if !ok || s == 0 {
			return nil, fmt.Errorf("atoll maps %s by a scalar only (here %v)", n.OpType, b.shape)
		}
		if n.OpType == "Div" {
			s = 1 / s
		}
		switch da.kind {
		case eHeads, eScores:
			v := *da
			v.scale *= s
			return &v, nil
		case eGeluOne, eGeluX:
			v := *da
			v.factor *= s
			return geluDone(&v), nil
		}
		if h := hidden(da); h != nil && h.node.kind == "lin" && h.node.act == kernels.ActNone && near(s, 1/math.Sqrt2) {
			return &encVal{kind: eGeluArg, shape: h.shape, node: h.node}, nil
		}
		return nil, fmt.Errorf("atoll maps scaling of attention heads and scores and GELU's factors (%s times %g)", encKindName(da.kind), s)
	case "Erf":
		if x != nil && x.kind == eGeluArg {
			return &encVal{kind: eGeluErf, shape: x.shape, node: x.node}, nil
		}
		return nil, fmt.Errorf("atoll maps Erf as part of GELU only")
	case "Reshape":
		shapeC, _ := arg(1)
		if shapeC == nil || x == nil {
			return nil, fmt.Errorf("a Reshape to a computed shape")
		}
		if x.kind == eMatmul {
			x = materialize(x)
		}
		to, err := reshapeTo(x.shape, shapeC.ints(), attrInt(n, "allowzero", 0) != 0)
		if err != nil {
			return nil, err
		}
		switch {
		case x.kind == eHidden && x.node.kind == "lin" && len(x.shape) == 3 && len(to) == 4 &&
			to[0] == x.shape[0] && to[1] == x.shape[1] && to[2]*to[3] == x.shape[2]:
			return &encVal{kind: eSplit, shape: to, node: x.node, heads: to[2]}, nil
		case (x.kind == eHeads || x.kind == eCtxHeads) && len(to) >= 3 && prod(to) == prod(x.shape) &&
			slices.Equal(to[len(to)-2:], x.shape[len(x.shape)-2:]):
			v := *x
			v.shape = to
			return &v, nil
		case x.kind == eCtxSplit && len(to) == 3 && to[0] == x.shape[0] && to[1] == x.shape[1] && to[2] == x.shape[2]*x.shape[3]:
			return attention(n, x, to)
		case x.kind == eHidden && (slices.Equal(to, x.shape) ||
			(x.node.kind == "cls" && len(x.shape) == 3 && slices.Equal(to, []int{x.shape[0], x.shape[2]}))):
			return &encVal{kind: eHidden, shape: to, node: x.node}, nil
		}
		return nil, fmt.Errorf("atoll maps a Reshape that splits a projection into heads or merges them back (%s %v to %v)", encKindName(x.kind), x.shape, to)
	case "Transpose":
		if x == nil {
			return nil, fmt.Errorf("unexpected input")
		}
		perm := attrIntsAsInt(n, "perm")
		switch {
		case x.kind == eSplit && slices.Equal(perm, []int{0, 2, 1, 3}):
			return &encVal{kind: eHeads, shape: []int{x.shape[0], x.shape[2], x.shape[1], x.shape[3]}, node: x.node, scale: 1, heads: x.heads}, nil
		case x.kind == eSplit && slices.Equal(perm, []int{0, 2, 3, 1}):
			return &encVal{kind: eHeads, shape: []int{x.shape[0], x.shape[2], x.shape[3], x.shape[1]}, node: x.node, scale: 1, heads: x.heads, trans: true}, nil
		case x.kind == eHeads && (slices.Equal(perm, []int{0, 1, 3, 2}) || slices.Equal(perm, []int{0, 2, 1})):
			v := *x
			v.trans = !v.trans
			v.shape = slices.Clone(x.shape)
			r := len(v.shape)
			v.shape[r-1], v.shape[r-2] = v.shape[r-2], v.shape[r-1]
			return &v, nil
		case x.kind == eCtxHeads && len(x.shape) == 4 && slices.Equal(perm, []int{0, 2, 1, 3}):
			v := *x
			v.kind = eCtxSplit
			v.shape = []int{x.shape[0], x.shape[2], x.shape[1], x.shape[3]}
			return &v, nil
		}
		return nil, fmt.Errorf("atoll maps the Transposes of multi-head attention only (%s, perm %v)", encKindName(x.kind), perm)
	case "Softmax":
		if x != nil && x.kind == eScores && clampAxis(int(attrInt(n, "axis", -1)), len(x.shape)) == len(x.shape)-1 {
			v := *x
			v.kind = eProbs
			return &v, nil
		}
		return nil, fmt.Errorf("atoll maps Softmax over attention scores' last axis only")
	case "IsNaN":
		if x != nil && x.kind == eProbs {
			return &encVal{kind: eNaN, shape: x.shape, probs: x}, nil
		}
		return nil, fmt.Errorf("atoll maps IsNaN as a guard on attention probabilities only")
	case "Where":
		_, p := arg(2)
		if x != nil && x.kind == eNaN && p == x.probs {
			return p, nil // softmax of finite scores has no NaN
		}
		return nil, fmt.Errorf("atoll maps Where as a NaN guard on attention probabilities only")
	case "LayerNormalization":
		h := hidden(x)
		gamma, _ := arg(1)
		beta, _ := arg(2)
		if h == nil || gamma == nil || clampAxis(int(attrInt(n, "axis", -1)), len(h.shape)) != len(h.shape)-1 {
			return nil, fmt.Errorf("atoll maps LayerNormalization of hidden states over their last axis, with initializer scale and bias")
		}
		cols := h.shape[len(h.shape)-1]
		b := make([]float64, cols)
		if beta != nil {
			copy(b, beta.v)
		}
		if gamma.elems() != cols || len(b) != cols {
			return nil, fmt.Errorf("scale and bias of %d and %d values for %d columns", gamma.elems(), len(b), cols)
		}
		l := &encNode{kind: "ln", in: []*encNode{h.node}, w: gamma.v, b: b, n: cols, eps: float64(attrFloat(n, "epsilon", 1e-5)), onnx: n.Name}
		return &encVal{kind: eHidden, shape: h.shape, node: l}, nil
	case "Tanh":
		if h := hidden(x); h != nil && h.node.kind == "lin" {
			t := &encNode{kind: "tanh", in: []*encNode{h.node}, onnx: n.Name}
			return &encVal{kind: eHidden, shape: h.shape, node: t}, nil
		}
		return nil, fmt.Errorf("atoll maps Tanh after a linear layer (the pooler) only")
	}
	return nil, fmt.Errorf("operator %s is not mapped for token-id models (ONNXOps lists the image ones; an encoder maps Gather, MatMul, Gemm, Add, Mul, Div, Reshape, Transpose, Softmax, LayerNormalization, Erf and Tanh as BERT writes them)", n.OpType)
}

// operands splits a binary node's inputs: da is the first computed one
// (the second, if commutative and the first is a constant), db the other
// when both are computed, c the other when it is a constant.
func operands(cin []*cval, din []*encVal, commutative bool) (da, db *encVal, c *cval) {
	at := func(i int) (*cval, *encVal) {
		if i < len(din) {
			return cin[i], din[i]
		}
		return nil, nil
	}
	c0, d0 := at(0)
	c1, d1 := at(1)
	if d0 == nil && commutative {
		return d1, nil, c0
	}
	return d0, d1, c1
}

// geluDone turns factor·x·(1 + erf(x/√2)) with factor ½ into the linear
// layer x with GELU fused.
func geluDone(v *encVal) *encVal {
	if v.kind != eGeluX || !near(v.factor, 0.5) {
		return v
	}
	l := *v.node
	l.act = kernels.ActGELU
	return &encVal{kind: eHidden, shape: v.shape, node: &l}
}

// attention ends a multi-head attention: the context merged back to
// [B, S, H].
func attention(n onnx.Node, x *encVal, to []int) (*encVal, error) {
	q, k, v := x.probs.q, x.probs.k, x.v
	if q.node == k.node || q.node == v.node || k.node == v.node {
		return nil, fmt.Errorf("attention whose Q, K and V are not three projections")
	}
	in := q.node.in[0]
	if k.node.in[0] != in || v.node.in[0] != in {
		return nil, fmt.Errorf("attention whose Q, K and V read different inputs")
	}
	a := &encNode{kind: "attn", in: []*encNode{in}, qkv: [3]*encNode{q.node, k.node, v.node}, heads: x.heads,
		scale: x.probs.scale * v.scale, onnx: n.Name}
	return &encVal{kind: eHidden, shape: to, node: a}, nil
}

// tokenTable reads a constant added to the embeddings ([S, H] rows by
// position, broadcast over the batch) as an [S·H] table.
func tokenTable(c *cval, shape []int) ([]float64, error) {
	full, err := broadcastTo(c, shape)
	if err != nil {
		return nil, fmt.Errorf("a constant %v added to embeddings %v: %v", c.shape, shape, err)
	}
	per := shape[1] * shape[2]
	for b := 1; b < shape[0]; b++ {
		if !slices.Equal(full.v[b*per:(b+1)*per], full.v[:per]) {
			return nil, fmt.Errorf("a constant added to the embeddings differs between sequences of a batch")
		}
	}
	return full.v[:per], nil
}

func transpose2(v []float64, rows, cols int) []float64 {
	out := make([]float64, len(v))
	for r := range rows {
		for c := range cols {
			out[c*rows+r] = v[r*cols+c]
		}
	}
	return out
}

// encoder is a recognized BERT-family network.
type encoder struct {
	cfg    BERTConfig
	word   *encNode
	table  []float64 // [S, H]: positions, token types and any other constant rows
	embLN  *encNode
	layers []encLayer
	pooler *encNode
	notes  []string
}

type encLayer struct {
	attn          *encNode
	out, f1, f2   *encNode
	attnLN, ffnLN *encNode
}

// recognizeEncoder walks back from the output and checks that the network
// is what the zoo's BERT graph computes.
func recognizeEncoder(out *encNode, seq int) (*encoder, error) {
	e := &encoder{}
	x := out
	if x.kind == "tanh" {
		lin := x.in[0]
		if lin.kind != "lin" || lin.in[0].kind != "cls" || lin.act != kernels.ActNone {
			return nil, fmt.Errorf("the output is a tanh of something other than a linear layer on the first token (%s)", x.onnx)
		}
		e.pooler = lin
		x = lin.in[0].in[0]
	}
	want := func(n *encNode, kind, what string) error {
		if n.kind != kind {
			return fmt.Errorf("%s is a %s (at node %q), not a %s: atoll imports BERT-family encoders (post-layernorm attention and GELU feed-forward layers)", what, n.kind, n.onnx, kind)
		}
		return nil
	}
	for {
		if err := want(x, "ln", "a layer's output"); err != nil {
			return nil, err
		}
		sum := x.in[0]
		if sum.kind != "add" {
			e.embLN = x
			break
		}
		// x = LN(f2(gelu f1(A)) + A), A = LN(out(attn(X)) + X)
		var l encLayer
		l.ffnLN = x
		f2, a := sum.in[0], sum.in[1]
		if f2.kind != "lin" {
			f2, a = a, f2
		}
		if err := want(f2, "lin", "the feed-forward output"); err != nil {
			return nil, err
		}
		f1 := f2.in[0]
		if err := want(f1, "lin", "the feed-forward input"); err != nil {
			return nil, err
		}
		if f1.act != kernels.ActGELU || f2.act != kernels.ActNone {
			return nil, fmt.Errorf("the feed-forward layers at %q and %q are not linear, GELU, linear", f1.onnx, f2.onnx)
		}
		if f1.in[0] != a {
			return nil, fmt.Errorf("the feed-forward residual at %q does not add the feed-forward's input", sum.onnx)
		}
		if err := want(a, "ln", "the attention block's output"); err != nil {
			return nil, err
		}
		l.attnLN, l.f1, l.f2 = a, f1, f2
		sum2 := a.in[0]
		if err := want(sum2, "add", "the attention residual"); err != nil {
			return nil, err
		}
		o, xin := sum2.in[0], sum2.in[1]
		if o.kind != "lin" {
			o, xin = xin, o
		}
		if err := want(o, "lin", "the attention output projection"); err != nil {
			return nil, err
		}
		if err := want(o.in[0], "attn", "the attention output projection's input"); err != nil {
			return nil, err
		}
		if o.in[0].in[0] != xin {
			return nil, fmt.Errorf("the attention residual at %q does not add the attention's input", sum2.onnx)
		}
		l.out, l.attn = o, o.in[0]
		e.layers = append(e.layers, l)
		x = xin
	}
	slices.Reverse(e.layers)
	// Embeddings: word lookup plus constant rows.
	y := e.embLN.in[0]
	for y.kind == "addc" {
		if e.table == nil {
			e.table = make([]float64, len(y.w))
		}
		for i, v := range y.w {
			e.table[i] += v
		}
		y = y.in[0]
	}
	if err := want(y, "embed", "the embeddings"); err != nil {
		return nil, err
	}
	e.word = y
	if len(e.layers) == 0 {
		return nil, fmt.Errorf("no encoder layer found")
	}
	h := e.word.n
	if e.table == nil {
		e.table = make([]float64, seq*h)
	}
	l0 := e.layers[0]
	heads := l0.attn.heads
	e.cfg = BERTConfig{Layers: len(e.layers), Hidden: h, Heads: heads, FFN: l0.f1.n, Vocab: e.word.k, Positions: seq, Seq: seq, Pooler: e.pooler != nil}
	if heads < 1 || h%heads != 0 {
		return nil, fmt.Errorf("%d heads for hidden %d", heads, h)
	}
	d := h / heads
	eps := 0.0
	for i, l := range e.layers {
		for _, p := range l.attn.qkv {
			if p.k != h || p.n != h || p.act != kernels.ActNone {
				return nil, fmt.Errorf("layer %d: the Q/K/V projection at %q is [%d %d], not [%d %d]", i, p.onnx, p.k, p.n, h, h)
			}
		}
		if l.attn.heads != heads {
			return nil, fmt.Errorf("layer %d has %d heads, layer 0 %d", i, l.attn.heads, heads)
		}
		if !near(l.attn.scale, 1/math.Sqrt(float64(d))) {
			return nil, fmt.Errorf("layer %d scales attention scores by %g; atoll's attention scales by 1/√d = %g", i, l.attn.scale, 1/math.Sqrt(float64(d)))
		}
		if l.out.k != h || l.out.n != h || l.f1.k != h || l.f1.n != e.cfg.FFN || l.f2.k != e.cfg.FFN || l.f2.n != h {
			return nil, fmt.Errorf("layer %d's projections do not match layer 0's shapes", i)
		}
		eps = max(eps, l.attnLN.eps, l.ffnLN.eps)
	}
	eps = max(eps, e.embLN.eps)
	if e.pooler != nil && (e.pooler.k != h || e.pooler.n != h) {
		return nil, fmt.Errorf("the pooler at %q is [%d %d], not [%d %d]", e.pooler.onnx, e.pooler.k, e.pooler.n, h, h)
	}
	if eps > kernels.LayerNormEps {
		return nil, fmt.Errorf("layernorm epsilon %g; atoll's layernorm adds %g (smaller epsilons are within its rounding)", eps, kernels.LayerNormEps)
	}
	e.notes = append(e.notes,
		"GELU (erf) runs as the tanh approximation (they differ by under 1e-3, below bf16 rounding)",
		fmt.Sprintf("layernorm epsilon %.3g runs as %g", eps, kernels.LayerNormEps),
		fmt.Sprintf("position and token-type rows folded into one [%d, %d] table (token type 0, positions 0..%d)", seq, h, seq-1))
	return e, nil
}

// bundle converts the recognized weights into the zoo graph's tensors.
func (e *encoder) bundle(g *Graph) (*Bundle, error) {
	wb := &Bundle{}
	var err error
	add := func(name string, vals []float64) {
		if err != nil {
			return
		}
		t, ok := g.Tensor(name)
		if !ok || t.Elems() != len(vals) {
			err = fmt.Errorf("%w: weight %s: %d values for %v", ErrONNX, name, len(vals), t.Shape)
			return
		}
		wb.Add(NewData(name, t.DType, t.Shape, vals))
	}
	h := e.cfg.Hidden
	add("embeddings.word_embeddings.weight", e.word.w)
	add("embeddings.position_embeddings.weight", e.table)
	add("embeddings.layernorm.weight", e.embLN.w)
	add("embeddings.layernorm.bias", e.embLN.b)
	for i, l := range e.layers {
		p := fmt.Sprintf("encoder.%d", i)
		// Q, K and V side by side: output columns [3][heads][d].
		w, b := make([]float64, h*3*h), make([]float64, 3*h)
		for j, proj := range l.attn.qkv {
			for r := range h {
				copy(w[r*3*h+j*h:r*3*h+(j+1)*h], proj.w[r*h:(r+1)*h])
			}
			copy(b[j*h:(j+1)*h], proj.b)
		}
		add(p+".attention.qkv.weight", w)
		add(p+".attention.qkv.bias", b)
		for _, x := range []struct {
			name string
			n    *encNode
		}{{".attention.output", l.out}, {".ffn.intermediate", l.f1}, {".ffn.output", l.f2}, {".attention.layernorm", l.attnLN}, {".ffn.layernorm", l.ffnLN}} {
			add(p+x.name+".weight", x.n.w)
			add(p+x.name+".bias", x.n.b)
		}
	}
	if e.pooler != nil {
		add("pooler.dense.weight", e.pooler.w)
		add("pooler.dense.bias", e.pooler.b)
	}
	if err != nil {
		return nil, err
	}
	if err := CheckBundle(g, wb, KindWeight); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrONNX, err)
	}
	return wb, nil
}
