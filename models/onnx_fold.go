package models

import (
	"fmt"
	"math"
	"slices"

	"atoll/models/onnx"
)

// cval is a tensor whose values an import computes itself: an initializer,
// a Constant, or a node whose inputs are all such values or shapes of the
// graph's input (exporters compute position ids, attention masks and
// reshape targets that way). Integers and booleans are kept as exact
// float64 values; isInt marks them (Div truncates, Cast rounds).
type cval struct {
	shape []int
	v     []float64
	isInt bool
}

func (c *cval) elems() int { return len(c.v) }

// scalar is c's value if it holds exactly one.
func (c *cval) scalar() (float64, bool) {
	if len(c.v) != 1 {
		return 0, false
	}
	return c.v[0], true
}

// ints is c's values as ints (shapes, axes, indices).
func (c *cval) ints() []int {
	out := make([]int, len(c.v))
	for i, v := range c.v {
		out[i] = int(v)
	}
	return out
}

func cvalOf(t *onnx.Tensor) *cval {
	shape := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		shape[i] = int(d)
	}
	return &cval{shape: shape, v: t.Values, isInt: isIntType(t.DataType)}
}

func isIntType(dt int32) bool {
	switch dt {
	case onnx.Float, onnx.Float16, onnx.BFloat16, onnx.Double, 0:
		return false
	}
	return true
}

// foldLimit bounds what the import computes on the CPU: a folded tensor
// larger than this is an error (such a graph does real work on constants).
const foldLimit = 1 << 24

// fold computes node n from its inputs' values (an omitted optional input
// is nil). It answers an error for an operator it does not compute.
func fold(n onnx.Node, in []*cval) (*cval, error) {
	arg := func(i int) *cval {
		if i < len(in) {
			return in[i]
		}
		return nil
	}
	x := arg(0)
	if x == nil && n.OpType != "Constant" && n.OpType != "ConstantOfShape" {
		return nil, fmt.Errorf("no first input")
	}
	switch n.OpType {
	case "Identity", "Dropout":
		return x, nil
	case "Shape":
		return foldShape(n, x.shape), nil
	case "Cast":
		to := int32(attrInt(n, "to", onnx.Float))
		out := &cval{shape: x.shape, v: make([]float64, len(x.v)), isInt: isIntType(to)}
		for i, v := range x.v {
			switch {
			case to == onnx.Bool:
				out.v[i] = b2f(v != 0)
			case out.isInt:
				out.v[i] = math.Trunc(v)
			case to == onnx.Float:
				out.v[i] = float64(float32(v))
			default:
				out.v[i] = v
			}
		}
		return out, nil
	case "ConstantOfShape":
		shape := []int{}
		if x != nil {
			shape = x.ints()
		}
		val, isInt := 0.0, false
		if a, ok := n.Attrs["value"]; ok && a.T != nil && len(a.T.Values) == 1 {
			val, isInt = a.T.Values[0], isIntType(a.T.DataType)
		}
		size := prod(shape)
		if size > foldLimit || slices.Min(append([]int{0}, shape...)) < 0 {
			return nil, fmt.Errorf("shape %v", shape)
		}
		out := &cval{shape: shape, v: make([]float64, size), isInt: isInt}
		for i := range out.v {
			out.v[i] = val
		}
		return out, nil
	case "Unsqueeze", "Squeeze":
		axes := attrIntsAsInt(n, "axes")
		if a := arg(1); a != nil {
			axes = a.ints()
		}
		shape := slices.Clone(x.shape)
		if n.OpType == "Unsqueeze" {
			r := len(shape) + len(axes)
			for i := range axes {
				axes[i] = clampAxis(axes[i], r)
			}
			slices.Sort(axes)
			for _, a := range axes {
				shape = slices.Insert(shape, a, 1)
			}
		} else {
			if len(axes) == 0 {
				shape = slices.DeleteFunc(shape, func(d int) bool { return d == 1 })
			} else {
				for i := range axes {
					axes[i] = clampAxis(axes[i], len(shape))
				}
				slices.Sort(axes)
				for i := len(axes) - 1; i >= 0; i-- {
					shape = slices.Delete(shape, axes[i], axes[i]+1)
				}
			}
		}
		return &cval{shape: shape, v: x.v, isInt: x.isInt}, nil
	case "Reshape":
		if arg(1) == nil {
			return nil, fmt.Errorf("no shape")
		}
		shape, err := reshapeTo(x.shape, arg(1).ints(), attrInt(n, "allowzero", 0) != 0)
		if err != nil {
			return nil, err
		}
		return &cval{shape: shape, v: x.v, isInt: x.isInt}, nil
	case "Flatten":
		axis := clampAxis(int(attrInt(n, "axis", 1)), len(x.shape))
		return &cval{shape: []int{prod(x.shape[:axis]), prod(x.shape[axis:])}, v: x.v, isInt: x.isInt}, nil
	case "Concat":
		return foldConcat(in, int(attrInt(n, "axis", 0)))
	case "Gather":
		return foldGather(x, arg(1), int(attrInt(n, "axis", 0)))
	case "GatherElements":
		return foldGatherElements(x, arg(1), int(attrInt(n, "axis", 0)))
	case "Slice":
		return foldSlice(x, arg(1), arg(2), arg(3), arg(4))
	case "Expand":
		if arg(1) == nil {
			return nil, fmt.Errorf("no shape")
		}
		shape, err := broadcastShape(x.shape, arg(1).ints())
		if err != nil {
			return nil, err
		}
		return broadcastTo(x, shape)
	case "Transpose":
		return foldTranspose(x, attrIntsAsInt(n, "perm"))
	case "Range":
		start, _ := x.scalar()
		limit, ok1 := cvScalar(arg(1))
		delta, ok2 := cvScalar(arg(2))
		if !ok1 || !ok2 || delta == 0 {
			return nil, fmt.Errorf("bad range")
		}
		count := max(0, int(math.Ceil((limit-start)/delta)))
		if count > foldLimit {
			return nil, fmt.Errorf("%d elements", count)
		}
		out := &cval{shape: []int{count}, isInt: x.isInt}
		for i := range count {
			out.v = append(out.v, start+float64(i)*delta)
		}
		return out, nil
	case "Where":
		if arg(1) == nil || arg(2) == nil {
			return nil, fmt.Errorf("needs three inputs")
		}
		return foldElementwise([]*cval{x, arg(1), arg(2)}, arg(1).isInt && arg(2).isInt, func(v []float64) float64 {
			if v[0] != 0 {
				return v[1]
			}
			return v[2]
		})
	case "Not", "Neg", "Sqrt", "IsNaN", "Erf", "Tanh", "Reciprocal", "Abs":
		isInt := x.isInt
		if n.OpType == "Not" || n.OpType == "IsNaN" {
			isInt = true
		}
		return foldElementwise([]*cval{x}, isInt, func(v []float64) float64 {
			switch n.OpType {
			case "Not":
				return b2f(v[0] == 0)
			case "Neg":
				return -v[0]
			case "Sqrt":
				return math.Sqrt(v[0])
			case "IsNaN":
				return b2f(math.IsNaN(v[0]))
			case "Erf":
				return math.Erf(v[0])
			case "Tanh":
				return math.Tanh(v[0])
			case "Reciprocal":
				return 1 / v[0]
			}
			return math.Abs(v[0])
		})
	case "Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Min", "Max":
		y := arg(1)
		if y == nil {
			return nil, fmt.Errorf("needs two inputs")
		}
		isInt := x.isInt && y.isInt
		switch n.OpType {
		case "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or":
			isInt = true
		}
		intDiv := x.isInt && y.isInt
		return foldElementwise([]*cval{x, y}, isInt, func(v []float64) float64 {
			a, b := v[0], v[1]
			switch n.OpType {
			case "Add":
				return a + b
			case "Sub":
				return a - b
			case "Mul":
				return a * b
			case "Div":
				if intDiv {
					return math.Trunc(a / b)
				}
				return a / b
			case "Pow":
				return math.Pow(a, b)
			case "Equal":
				return b2f(a == b)
			case "Less":
				return b2f(a < b)
			case "Greater":
				return b2f(a > b)
			case "LessOrEqual":
				return b2f(a <= b)
			case "GreaterOrEqual":
				return b2f(a >= b)
			case "And":
				return b2f(a != 0 && b != 0)
			case "Or":
				return b2f(a != 0 || b != 0)
			case "Min":
				return math.Min(a, b)
			}
			return math.Max(a, b)
		})
	}
	return nil, fmt.Errorf("atoll does not compute %s on constants", n.OpType)
}

// foldShape is a Shape node's output for an input of shape (its start
// and end attributes applied): the one fold a computed tensor takes part
// in, by its shape alone.
func foldShape(n onnx.Node, shape []int) *cval {
	r := len(shape)
	start, end := int(attrInt(n, "start", 0)), int(attrInt(n, "end", int64(r)))
	start, end = clampAxis(start, r), clampAxis(end, r)
	out := &cval{isInt: true, shape: []int{max(0, end-start)}}
	for _, d := range shape[start:max(start, end)] {
		out.v = append(out.v, float64(d))
	}
	return out
}

func cvScalar(c *cval) (float64, bool) {
	if c == nil {
		return 0, false
	}
	return c.scalar()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func prod(s []int) int {
	p := 1
	for _, d := range s {
		p *= d
	}
	return p
}

// clampAxis makes a possibly negative axis of a rank-r tensor non-negative
// and at most r.
func clampAxis(a, r int) int {
	if a < 0 {
		a += r
	}
	return min(max(a, 0), r)
}

func attrIntsAsInt(n onnx.Node, name string) []int {
	var out []int
	for _, v := range attrInts(n, name) {
		out = append(out, int(v))
	}
	return out
}

// reshapeTo resolves a Reshape target against shape: 0 copies the
// dimension (unless allowzero), -1 takes what is left.
func reshapeTo(shape, target []int, allowZero bool) ([]int, error) {
	out := slices.Clone(target)
	infer := -1
	known := 1
	for i, d := range out {
		switch {
		case d == 0 && !allowZero:
			if i >= len(shape) {
				return nil, fmt.Errorf("reshape %v to %v: no dimension %d to copy", shape, target, i)
			}
			out[i] = shape[i]
		case d == -1:
			if infer >= 0 {
				return nil, fmt.Errorf("reshape to %v: two -1", target)
			}
			infer = i
			continue
		case d < 0:
			return nil, fmt.Errorf("reshape to %v", target)
		}
		known *= out[i]
	}
	total := prod(shape)
	if infer >= 0 {
		if known == 0 || total%known != 0 {
			return nil, fmt.Errorf("reshape %v to %v", shape, target)
		}
		out[infer] = total / known
	} else if known != total {
		return nil, fmt.Errorf("reshape %v (%d elements) to %v", shape, total, target)
	}
	return out, nil
}

// broadcastShape is numpy's broadcast of two shapes.
func broadcastShape(a, b []int) ([]int, error) {
	for _, d := range slices.Concat(a, b) {
		if d < 0 {
			return nil, fmt.Errorf("negative dimension in %v, %v", a, b)
		}
	}
	r := max(len(a), len(b))
	out := make([]int, r)
	for i := range r {
		da, db := 1, 1
		if j := i - (r - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (r - len(b)); j >= 0 {
			db = b[j]
		}
		switch {
		case da == db || db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return nil, fmt.Errorf("shapes %v and %v do not broadcast", a, b)
		}
	}
	return out, nil
}

// strides of a row-major shape.
func strides(shape []int) []int {
	s := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

// broadcastIndex maps a flat index of shape out to x's flat index under
// broadcasting.
func broadcastIndex(idx int, out, outStrides, x, xStrides []int) int {
	off := len(out) - len(x)
	j := 0
	for d := range out {
		c := (idx / outStrides[d]) % out[d]
		if k := d - off; k >= 0 && x[k] != 1 {
			j += c * xStrides[k]
		}
	}
	return j
}

func broadcastTo(x *cval, shape []int) (*cval, error) {
	size := prod(shape)
	if size > foldLimit {
		return nil, fmt.Errorf("%d elements", size)
	}
	out := &cval{shape: shape, v: make([]float64, size), isInt: x.isInt}
	os, xs := strides(shape), strides(x.shape)
	for i := range out.v {
		out.v[i] = x.v[broadcastIndex(i, shape, os, x.shape, xs)]
	}
	return out, nil
}

func foldElementwise(xs []*cval, isInt bool, f func([]float64) float64) (*cval, error) {
	shape := xs[0].shape
	for _, x := range xs[1:] {
		var err error
		if shape, err = broadcastShape(shape, x.shape); err != nil {
			return nil, err
		}
	}
	size := prod(shape)
	if size > foldLimit {
		return nil, fmt.Errorf("%d elements", size)
	}
	out := &cval{shape: shape, v: make([]float64, size), isInt: isInt}
	os := strides(shape)
	st := make([][]int, len(xs))
	for k, x := range xs {
		st[k] = strides(x.shape)
	}
	args := make([]float64, len(xs))
	for i := range out.v {
		for k, x := range xs {
			args[k] = x.v[broadcastIndex(i, shape, os, x.shape, st[k])]
		}
		out.v[i] = f(args)
	}
	return out, nil
}

func foldConcat(xs []*cval, axis int) (*cval, error) {
	if len(xs) == 0 || xs[0] == nil {
		return nil, fmt.Errorf("no inputs")
	}
	r := len(xs[0].shape)
	axis = clampAxis(axis, r)
	if axis >= r {
		return nil, fmt.Errorf("axis out of range")
	}
	shape := slices.Clone(xs[0].shape)
	shape[axis] = 0
	isInt := true
	for _, x := range xs {
		if x == nil || len(x.shape) != r {
			return nil, fmt.Errorf("inputs of different ranks")
		}
		for d := range r {
			if d != axis && x.shape[d] != shape[d] {
				return nil, fmt.Errorf("shapes differ off the axis")
			}
		}
		shape[axis] += x.shape[axis]
		isInt = isInt && x.isInt
	}
	outer := prod(shape[:axis])
	out := &cval{shape: shape, isInt: isInt}
	for o := range outer {
		for _, x := range xs {
			chunk := prod(x.shape[axis:])
			out.v = append(out.v, x.v[o*chunk:(o+1)*chunk]...)
		}
	}
	return out, nil
}

func foldGather(x, idx *cval, axis int) (*cval, error) {
	if idx == nil {
		return nil, fmt.Errorf("no indices")
	}
	r := len(x.shape)
	axis = clampAxis(axis, r)
	if axis >= r {
		return nil, fmt.Errorf("axis out of range")
	}
	shape := slices.Concat(x.shape[:axis], idx.shape, x.shape[axis+1:])
	size := prod(shape)
	if size > foldLimit {
		return nil, fmt.Errorf("%d elements", size)
	}
	outer, inner, dim := prod(x.shape[:axis]), prod(x.shape[axis+1:]), x.shape[axis]
	out := &cval{shape: shape, isInt: x.isInt, v: make([]float64, 0, size)}
	for o := range outer {
		for _, iv := range idx.v {
			i := int(iv)
			if i < 0 {
				i += dim
			}
			if i < 0 || i >= dim {
				return nil, fmt.Errorf("index %d out of [0, %d)", int(iv), dim)
			}
			base := (o*dim + i) * inner
			out.v = append(out.v, x.v[base:base+inner]...)
		}
	}
	return out, nil
}

func foldGatherElements(x, idx *cval, axis int) (*cval, error) {
	if idx == nil || len(idx.shape) != len(x.shape) {
		return nil, fmt.Errorf("indices of another rank")
	}
	r := len(x.shape)
	axis = clampAxis(axis, r)
	if axis >= r {
		return nil, fmt.Errorf("axis out of range")
	}
	out := &cval{shape: idx.shape, isInt: x.isInt, v: make([]float64, len(idx.v))}
	is, xs := strides(idx.shape), strides(x.shape)
	for i, iv := range idx.v {
		j := 0
		for d := range r {
			c := (i / is[d]) % idx.shape[d]
			if d == axis {
				c = int(iv)
				if c < 0 {
					c += x.shape[d]
				}
				if c < 0 || c >= x.shape[d] {
					return nil, fmt.Errorf("index %d out of range", int(iv))
				}
			} else if c >= x.shape[d] {
				return nil, fmt.Errorf("indices larger than the data")
			}
			j += c * xs[d]
		}
		out.v[i] = x.v[j]
	}
	return out, nil
}

func foldSlice(x, starts, ends, axes, steps *cval) (*cval, error) {
	if starts == nil || ends == nil {
		return nil, fmt.Errorf("no starts or ends")
	}
	r := len(x.shape)
	lo, hi, step := make([]int, r), slices.Clone(x.shape), make([]int, r)
	for d := range r {
		step[d] = 1
	}
	ax := make([]int, len(starts.v))
	for i := range ax {
		ax[i] = i
	}
	if axes != nil {
		ax = axes.ints()
	}
	for i, a := range ax {
		a = clampAxis(a, r)
		if a >= r || i >= len(ends.v) {
			return nil, fmt.Errorf("axis out of range")
		}
		st := 1
		if steps != nil && i < len(steps.v) {
			st = int(steps.v[i])
		}
		if st <= 0 {
			return nil, fmt.Errorf("step %d: atoll folds positive steps only", st)
		}
		dim := x.shape[a]
		b, e := int(starts.v[i]), int(ends.v[i])
		if b < 0 {
			b += dim
		}
		if e < 0 {
			e += dim
		}
		lo[a], hi[a], step[a] = min(max(b, 0), dim), min(max(e, 0), dim), st
	}
	shape := make([]int, r)
	for d := range r {
		shape[d] = max(0, (hi[d]-lo[d]+step[d]-1)/step[d])
	}
	out := &cval{shape: shape, isInt: x.isInt, v: make([]float64, prod(shape))}
	os, xs := strides(shape), strides(x.shape)
	for i := range out.v {
		j := 0
		for d := range r {
			j += (lo[d] + ((i/os[d])%shape[d])*step[d]) * xs[d]
		}
		out.v[i] = x.v[j]
	}
	return out, nil
}

func foldTranspose(x *cval, perm []int) (*cval, error) {
	r := len(x.shape)
	if len(perm) == 0 {
		for d := r - 1; d >= 0; d-- {
			perm = append(perm, d)
		}
	}
	if len(perm) != r {
		return nil, fmt.Errorf("perm %v for rank %d", perm, r)
	}
	shape := make([]int, r)
	for d, p := range perm {
		if p < 0 || p >= r {
			return nil, fmt.Errorf("perm %v", perm)
		}
		shape[d] = x.shape[p]
	}
	out := &cval{shape: shape, isInt: x.isInt, v: make([]float64, len(x.v))}
	os, xs := strides(shape), strides(x.shape)
	for i := range out.v {
		j := 0
		for d := range r {
			j += ((i / os[d]) % shape[d]) * xs[perm[d]]
		}
		out.v[i] = x.v[j]
	}
	return out, nil
}
