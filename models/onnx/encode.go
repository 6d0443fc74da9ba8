package onnx

import (
	"encoding/binary"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// Marshal encodes m in the ONNX wire format: the fields Decode reads, with
// tensor values as raw_data of their DataType (Float, Double, Int32, Int64,
// Int8, Uint8). It exists to write small test models without an ONNX
// toolchain; Decode(m.Marshal(), "") gives m back.
func (m *Model) Marshal() []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(m.IRVersion))
	if m.Producer != "" {
		b = appendBytes(b, 2, []byte(m.Producer))
	}
	b = appendBytes(b, 7, m.Graph.marshal())
	var op []byte
	op = appendBytes(op, 1, nil)
	op = protowire.AppendTag(op, 2, protowire.VarintType)
	op = protowire.AppendVarint(op, uint64(m.Opset))
	b = appendBytes(b, 8, op)
	return b
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func (g *Graph) marshal() []byte {
	var b []byte
	for _, n := range g.Nodes {
		b = appendBytes(b, 1, n.marshal())
	}
	if g.Name != "" {
		b = appendBytes(b, 2, []byte(g.Name))
	}
	for _, t := range g.Initializers {
		b = appendBytes(b, 5, t.marshal())
	}
	for _, v := range g.Inputs {
		b = appendBytes(b, 11, v.marshal())
	}
	for _, v := range g.Outputs {
		b = appendBytes(b, 12, v.marshal())
	}
	return b
}

func (n *Node) marshal() []byte {
	var b []byte
	for _, s := range n.Inputs {
		b = appendBytes(b, 1, []byte(s))
	}
	for _, s := range n.Outputs {
		b = appendBytes(b, 2, []byte(s))
	}
	if n.Name != "" {
		b = appendBytes(b, 3, []byte(n.Name))
	}
	b = appendBytes(b, 4, []byte(n.OpType))
	names := make([]string, 0, len(n.Attrs))
	for k := range n.Attrs {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		a := n.Attrs[k]
		a.Name = k
		b = appendBytes(b, 5, a.marshal())
	}
	if n.Domain != "" {
		b = appendBytes(b, 7, []byte(n.Domain))
	}
	return b
}

func (a *Attr) marshal() []byte {
	var b []byte
	b = appendBytes(b, 1, []byte(a.Name))
	switch a.Type {
	case 1:
		b = protowire.AppendTag(b, 2, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(a.F))
	case 2:
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.I))
	case 3:
		b = appendBytes(b, 4, []byte(a.S))
	case 4:
		b = appendBytes(b, 5, a.T.marshal())
	case 6:
		var p []byte
		for _, f := range a.Floats {
			p = binary.LittleEndian.AppendUint32(p, math.Float32bits(f))
		}
		b = appendBytes(b, 7, p)
	case 7:
		var p []byte
		for _, i := range a.Ints {
			p = protowire.AppendVarint(p, uint64(i))
		}
		b = appendBytes(b, 8, p)
	}
	b = protowire.AppendTag(b, 20, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(a.Type))
}

func (t *Tensor) marshal() []byte {
	var b []byte
	var dims []byte
	for _, d := range t.Dims {
		dims = protowire.AppendVarint(dims, uint64(d))
	}
	b = appendBytes(b, 1, dims)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(t.DataType))
	if t.Name != "" {
		b = appendBytes(b, 8, []byte(t.Name))
	}
	var raw []byte
	for _, v := range t.Values {
		switch t.DataType {
		case Double:
			raw = binary.LittleEndian.AppendUint64(raw, math.Float64bits(v))
		case Int64:
			raw = binary.LittleEndian.AppendUint64(raw, uint64(int64(v)))
		case Int32:
			raw = binary.LittleEndian.AppendUint32(raw, uint32(int32(v)))
		case Int8, Uint8:
			raw = append(raw, byte(int8(v)))
		default:
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(float32(v)))
		}
	}
	return appendBytes(b, 9, raw)
}

func (v *ValueInfo) marshal() []byte {
	var shape []byte
	for _, d := range v.Shape {
		var dim []byte
		if d.Param != "" {
			dim = appendBytes(dim, 2, []byte(d.Param))
		} else {
			dim = protowire.AppendTag(dim, 1, protowire.VarintType)
			dim = protowire.AppendVarint(dim, uint64(d.Value))
		}
		shape = appendBytes(shape, 1, dim)
	}
	var tt []byte
	tt = protowire.AppendTag(tt, 1, protowire.VarintType)
	tt = protowire.AppendVarint(tt, uint64(v.ElemType))
	tt = appendBytes(tt, 2, shape)
	var typ []byte
	typ = appendBytes(typ, 1, tt)
	var b []byte
	b = appendBytes(b, 1, []byte(v.Name))
	return appendBytes(b, 2, typ)
}
