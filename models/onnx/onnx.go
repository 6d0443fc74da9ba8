package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrFormat is wrapped by every error about a malformed or unsupported
// file.
var ErrFormat = errors.New("onnx: bad model file")

// Element types (TensorProto.DataType) this package decodes.
const (
	Float    = 1
	Uint8    = 2
	Int8     = 3
	Int32    = 6
	Int64    = 7
	Bool     = 9
	Float16  = 10
	Double   = 11
	BFloat16 = 16
)

var typeNames = map[int32]string{1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64",
	8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64", 16: "BFLOAT16"}

// TypeName is the ONNX name of an element type ("FLOAT", ...).
func TypeName(t int32) string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type %d", t)
}

// Model is a decoded ModelProto.
type Model struct {
	IRVersion int64
	Producer  string
	Opset     int64 // of the default ("" or "ai.onnx") domain
	Graph     Graph
}

// Graph is a decoded GraphProto.
type Graph struct {
	Name         string
	Nodes        []Node
	Initializers []*Tensor
	Inputs       []ValueInfo
	Outputs      []ValueInfo
}

// Node is one operator.
type Node struct {
	Name    string
	OpType  string
	Domain  string
	Inputs  []string // "" marks an omitted optional input
	Outputs []string
	Attrs   map[string]Attr
}

// Attr is an attribute; the field its type uses is set.
type Attr struct {
	Name   string
	Type   int32 // AttributeProto.AttributeType: 1 FLOAT, 2 INT, 3 STRING, 4 TENSOR, 6 FLOATS, 7 INTS
	F      float32
	I      int64
	S      string
	T      *Tensor
	Floats []float32
	Ints   []int64
}

// Tensor is a decoded TensorProto with its values as float64 (every type
// this package decodes fits; integers beyond ±2⁵³ are clamped to it: exporters write INT64_MAX for "to the end").
type Tensor struct {
	Name     string
	Dims     []int64
	DataType int32
	Values   []float64
}

// ValueInfo is a graph input or output: its element type and shape (a
// dimension is Dim, or Param when symbolic, e.g. a dynamic batch).
type ValueInfo struct {
	Name     string
	ElemType int32
	Shape    []Dim
}

// Dim is one dimension of a ValueInfo's shape.
type Dim struct {
	Value int64
	Param string
}

// DecodeFile reads an .onnx file; external data is read relative to the
// file's directory.
func DecodeFile(path string) (*Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	m, err := Decode(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Decode decodes a ModelProto. dir is where external-data tensors live
// ("" refuses them).
func Decode(data []byte, dir string) (*Model, error) {
	d := decoder{dir: dir}
	m := &Model{}
	haveGraph := false
	err := d.fields(data, "model", func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			m.IRVersion = int64(x)
		case num == 2 && typ == protowire.BytesType:
			m.Producer = string(v)
		case num == 7 && typ == protowire.BytesType:
			haveGraph = true
			return d.graph(v, &m.Graph)
		case num == 8 && typ == protowire.BytesType: // opset_import
			var domain string
			var version int64
			if err := d.fields(v, "opset_import", func(n protowire.Number, t protowire.Type, b []byte, y uint64) error {
				switch {
				case n == 1 && t == protowire.BytesType:
					domain = string(b)
				case n == 2 && t == protowire.VarintType:
					version = int64(y)
				}
				return nil
			}); err != nil {
				return err
			}
			if domain == "" || domain == "ai.onnx" {
				m.Opset = version
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !haveGraph {
		return nil, fmt.Errorf("%w: no graph (not an ONNX model file?)", ErrFormat)
	}
	if m.IRVersion < 3 {
		return nil, fmt.Errorf("%w: IR version %d; re-export with a newer exporter (IR 3 or later)", ErrFormat, m.IRVersion)
	}
	return m, nil
}

type decoder struct{ dir string }

// fields walks a message's fields; for varint fields v is nil and x the
// value, for length-delimited ones v the bytes; fixed32/64 arrive in x.
func (d *decoder) fields(b []byte, what string, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %s: truncated or corrupt field tag", ErrFormat, what)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var y uint32
			y, n = protowire.ConsumeFixed32(b)
			x = uint64(y)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: %s: field %d is truncated or corrupt", ErrFormat, what, num)
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) graph(b []byte, g *Graph) error {
	return d.fields(b, "graph", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			var n Node
			if err := d.node(v, &n); err != nil {
				return err
			}
			g.Nodes = append(g.Nodes, n)
		case 2:
			g.Name = string(v)
		case 5:
			t, err := d.tensor(v)
			if err != nil {
				return err
			}
			g.Initializers = append(g.Initializers, t)
		case 11, 12:
			var vi ValueInfo
			if err := d.valueInfo(v, &vi); err != nil {
				return err
			}
			if num == 11 {
				g.Inputs = append(g.Inputs, vi)
			} else {
				g.Outputs = append(g.Outputs, vi)
			}
		}
		return nil
	})
}

func (d *decoder) node(b []byte, n *Node) error {
	n.Attrs = map[string]Attr{}
	return d.fields(b, "node", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			n.Inputs = append(n.Inputs, string(v))
		case 2:
			n.Outputs = append(n.Outputs, string(v))
		case 3:
			n.Name = string(v)
		case 4:
			n.OpType = string(v)
		case 7:
			n.Domain = string(v)
		case 5:
			a, err := d.attr(v)
			if err != nil {
				return fmt.Errorf("node %q: %w", n.Name, err)
			}
			n.Attrs[a.Name] = a
		}
		return nil
	})
}

func (d *decoder) attr(b []byte) (Attr, error) {
	var a Attr
	err := d.fields(b, "attribute", func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			a.Name = string(v)
		case 20:
			a.Type = int32(x)
		case 2:
			a.F = math.Float32frombits(uint32(x))
		case 3:
			a.I = int64(x)
		case 4:
			a.S = string(v)
		case 5:
			t, err := d.tensor(v)
			if err != nil {
				return err
			}
			a.T = t
		case 7:
			a.Floats = appendFloats(a.Floats, typ, v, x)
		case 8:
			var ok bool
			if a.Ints, ok = appendVarints(a.Ints, typ, v, x); !ok {
				return fmt.Errorf("%w: attribute ints are corrupt", ErrFormat)
			}
		}
		return nil
	})
	return a, err
}

// appendVarints appends a packed (bytes) or single (varint) repeated
// integer field's values; ok is false on a corrupt packed run.
func appendVarints(dst []int64, typ protowire.Type, v []byte, x uint64) ([]int64, bool) {
	if typ != protowire.BytesType {
		return append(dst, int64(x)), true
	}
	for len(v) > 0 {
		y, n := protowire.ConsumeVarint(v)
		if n < 0 {
			return dst, false
		}
		dst = append(dst, int64(y))
		v = v[n:]
	}
	return dst, true
}

// appendFloats appends a packed or single repeated float field's values.
func appendFloats(dst []float32, typ protowire.Type, v []byte, x uint64) []float32 {
	if typ != protowire.BytesType {
		return append(dst, math.Float32frombits(uint32(x)))
	}
	for len(v) >= 4 {
		dst = append(dst, math.Float32frombits(binary.LittleEndian.Uint32(v)))
		v = v[4:]
	}
	return dst
}

// maxElems bounds one tensor (1 G elements): a corrupt dimension must not
// make the decoder allocate without limit.
const maxElems = 1 << 30

func (d *decoder) tensor(b []byte) (*Tensor, error) {
	t := &Tensor{}
	var raw []byte
	var floats []float32
	var ints []int64
	var doubles []float64
	external := map[string]string{}
	location := int64(0)
	err := d.fields(b, "tensor", func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			var ok bool
			if t.Dims, ok = appendVarints(t.Dims, typ, v, x); !ok {
				return fmt.Errorf("%w: tensor dims are corrupt", ErrFormat)
			}
		case 2:
			t.DataType = int32(x)
		case 4:
			floats = appendFloats(floats, typ, v, x)
		case 5, 7: // int32_data, int64_data (varints)
			var ok bool
			if ints, ok = appendVarints(ints, typ, v, x); !ok {
				return fmt.Errorf("%w: tensor integers are corrupt", ErrFormat)
			}
		case 10:
			if typ == protowire.BytesType {
				for len(v) >= 8 {
					doubles = append(doubles, math.Float64frombits(binary.LittleEndian.Uint64(v)))
					v = v[8:]
				}
			} else {
				doubles = append(doubles, math.Float64frombits(x))
			}
		case 8:
			t.Name = string(v)
		case 9:
			raw = v
		case 13: // external_data: StringStringEntryProto
			var k, val string
			if err := d.fields(v, "external_data", func(n protowire.Number, _ protowire.Type, s []byte, _ uint64) error {
				if n == 1 {
					k = string(s)
				} else if n == 2 {
					val = string(s)
				}
				return nil
			}); err != nil {
				return err
			}
			external[k] = val
		case 14:
			location = int64(x)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	n := int64(1)
	for _, dim := range t.Dims {
		if dim < 0 || dim > maxElems || n*dim > maxElems {
			return nil, fmt.Errorf("%w: tensor %q: dims %v are negative or too large", ErrFormat, t.Name, t.Dims)
		}
		n *= dim
	}
	if location == 1 {
		if raw, err = d.external(t.Name, external); err != nil {
			return nil, err
		}
	}
	switch {
	case raw != nil:
		t.Values, err = fromRaw(t, raw, int(n))
	case floats != nil:
		t.Values = make([]float64, len(floats))
		for i, f := range floats {
			t.Values[i] = float64(f)
		}
	case ints != nil:
		t.Values = make([]float64, len(ints))
		for i, v := range ints {
			if t.DataType == Int32 {
				v = int64(int32(v))
			}
			t.Values[i] = intValue(v)
		}
	case doubles != nil:
		t.Values = doubles
	}
	if err != nil {
		return nil, err
	}
	if len(t.Values) != int(n) {
		return nil, fmt.Errorf("%w: tensor %q: dims %v hold %d values, the file has %d", ErrFormat, t.Name, t.Dims, n, len(t.Values))
	}
	return t, nil
}

// external reads a tensor's bytes from its external-data file.
func (d *decoder) external(name string, kv map[string]string) ([]byte, error) {
	loc := kv["location"]
	if d.dir == "" || loc == "" {
		return nil, fmt.Errorf("%w: tensor %q is stored outside the file (%q): decode the file with DecodeFile so its directory is known", ErrFormat, name, loc)
	}
	if filepath.IsAbs(loc) || strings.Contains(filepath.ToSlash(loc), "../") {
		return nil, fmt.Errorf("%w: tensor %q: external data location %q must be a relative path inside the model's directory", ErrFormat, name, loc)
	}
	data, err := os.ReadFile(filepath.Join(d.dir, loc))
	if err != nil {
		return nil, fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
	}
	var off, length int64
	fmt.Sscan(kv["offset"], &off)
	length = int64(len(data)) - off
	if s, ok := kv["length"]; ok {
		fmt.Sscan(s, &length)
	}
	if off < 0 || length < 0 || off+length > int64(len(data)) {
		return nil, fmt.Errorf("%w: tensor %q: offset %d and length %d lie outside %s (%d bytes)", ErrFormat, name, off, length, loc, len(data))
	}
	return data[off : off+length], nil
}

// intValue is an integer as a Value: exact within ±2⁵³, clamped beyond
// (exporters write INT64_MAX for "to the end" in Slice; the clamp keeps
// that meaning).
func intValue(v int64) float64 {
	return float64(max(min(v, 1<<53), -(1 << 53)))
}

// fromRaw decodes little-endian raw_data.
func fromRaw(t *Tensor, raw []byte, n int) ([]float64, error) {
	size := map[int32]int{Float: 4, Uint8: 1, Int8: 1, Bool: 1, Int32: 4, Int64: 8, Float16: 2, Double: 8, BFloat16: 2}[t.DataType]
	if size == 0 {
		return nil, fmt.Errorf("%w: tensor %q: element type %s is not supported (want FLOAT, FLOAT16, BFLOAT16, DOUBLE or an integer type)", ErrFormat, t.Name, TypeName(t.DataType))
	}
	if len(raw) != n*size {
		return nil, fmt.Errorf("%w: tensor %q: dims need %d bytes of %s, raw_data has %d", ErrFormat, t.Name, n*size, TypeName(t.DataType), len(raw))
	}
	out := make([]float64, n)
	for i := range out {
		p := raw[i*size:]
		switch t.DataType {
		case Float:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(p)))
		case Double:
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(p))
		case Uint8, Bool:
			out[i] = float64(p[0])
		case Int8:
			out[i] = float64(int8(p[0]))
		case Int32:
			out[i] = float64(int32(binary.LittleEndian.Uint32(p)))
		case Int64:
			out[i] = intValue(int64(binary.LittleEndian.Uint64(p)))
		case BFloat16:
			out[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(p)) << 16))
		case Float16:
			out[i] = half(binary.LittleEndian.Uint16(p))
		}
	}
	return out, nil
}

// half decodes an IEEE 754 binary16.
func half(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	frac := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * frac * math.Pow(2, -24)
	case 31:
		if frac == 0 {
			return sign * math.Inf(1)
		}
		return math.NaN()
	}
	return sign * (1 + frac/1024) * math.Pow(2, float64(exp-15))
}

func (d *decoder) valueInfo(b []byte, vi *ValueInfo) error {
	return d.fields(b, "value_info", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			vi.Name = string(v)
		case num == 2 && typ == protowire.BytesType: // TypeProto
			return d.fields(v, "type", func(n protowire.Number, t protowire.Type, tt []byte, _ uint64) error {
				if n != 1 || t != protowire.BytesType { // tensor_type
					return nil
				}
				return d.fields(tt, "tensor_type", func(n protowire.Number, t protowire.Type, s []byte, y uint64) error {
					switch {
					case n == 1 && t == protowire.VarintType:
						vi.ElemType = int32(y)
					case n == 2 && t == protowire.BytesType: // TensorShapeProto
						return d.fields(s, "shape", func(n protowire.Number, t protowire.Type, dim []byte, _ uint64) error {
							if n != 1 || t != protowire.BytesType {
								return nil
							}
							var dm Dim
							err := d.fields(dim, "dim", func(n protowire.Number, t protowire.Type, p []byte, z uint64) error {
								switch {
								case n == 1 && t == protowire.VarintType:
									dm.Value = int64(z)
								case n == 2 && t == protowire.BytesType:
									dm.Param = string(p)
								}
								return nil
							})
							vi.Shape = append(vi.Shape, dm)
							return err
						})
					}
					return nil
				})
			})
		}
		return nil
	})
}
