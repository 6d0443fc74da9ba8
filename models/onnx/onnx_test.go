package onnx

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestMarshalDecodeRoundTrip(t *testing.T) {
	m := &Model{IRVersion: 9, Producer: "pytorch", Opset: 18, Graph: Graph{
		Name: "g",
		Nodes: []Node{{Name: "n", OpType: "Conv", Inputs: []string{"x", "w", ""}, Outputs: []string{"y"}, Attrs: map[string]Attr{
			"alpha": {Name: "alpha", Type: 1, F: 0.5}, "group": {Name: "group", Type: 2, I: 3}, "mode": {Name: "mode", Type: 3, S: "constant"},
			"pads": {Name: "pads", Type: 7, Ints: []int64{1, 1, 1, 1}}, "scales": {Name: "scales", Type: 6, Floats: []float32{1, 2.5}},
			"value": {Name: "value", Type: 4, T: &Tensor{Dims: []int64{2}, DataType: Int64, Values: []float64{-3, 7}}},
		}}},
		Initializers: []*Tensor{{Name: "w", Dims: []int64{2, 1, 1, 2}, DataType: Float, Values: []float64{1, -2, 0.25, 4}},
			{Name: "d", Dims: []int64{1}, DataType: Double, Values: []float64{math.Pi}}},
		Inputs:  []ValueInfo{{Name: "x", ElemType: Float, Shape: []Dim{{Param: "batch"}, {Value: 3}}}},
		Outputs: []ValueInfo{{Name: "y", ElemType: Float, Shape: []Dim{{Param: "batch"}, {Value: 2}}}},
	}}
	got, err := Decode(m.Marshal(), "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, m)
	}
}

// tensorBytes encodes a TensorProto by hand (fields Marshal does not
// write: float16/bfloat16 raw data, external data).
func tensorBytes(name string, dims []int64, dt int32, raw []byte, external map[string]string) []byte {
	var b []byte
	for _, d := range dims {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d))
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(dt))
	b = appendBytes(b, 8, []byte(name))
	if raw != nil {
		b = appendBytes(b, 9, raw)
	}
	for k, v := range external {
		var e []byte
		e = appendBytes(e, 1, []byte(k))
		e = appendBytes(e, 2, []byte(v))
		b = appendBytes(b, 13, e)
	}
	if external != nil {
		b = protowire.AppendTag(b, 14, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}

func modelWith(tensors ...[]byte) []byte {
	var g []byte
	for _, t := range tensors {
		g = appendBytes(g, 5, t)
	}
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 8)
	return appendBytes(b, 7, g)
}

func TestHalfPrecisionAndExternalData(t *testing.T) {
	f16 := []byte{0x00, 0x3c, 0x00, 0xc0, 0x00, 0x7c} // 1, -2, +Inf
	bf16 := make([]byte, 4)
	binary.LittleEndian.PutUint16(bf16, uint16(math.Float32bits(1.5)>>16))
	binary.LittleEndian.PutUint16(bf16[2:], uint16(math.Float32bits(-0.25)>>16))
	dir := t.TempDir()
	ext := make([]byte, 8+12)
	for i, v := range []float32{3, 4, 5} {
		binary.LittleEndian.PutUint32(ext[8+4*i:], math.Float32bits(v))
	}
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), ext, 0o644); err != nil {
		t.Fatal(err)
	}
	data := modelWith(
		tensorBytes("h", []int64{3}, Float16, f16, nil),
		tensorBytes("b", []int64{2}, BFloat16, bf16, nil),
		tensorBytes("e", []int64{3}, Float, nil, map[string]string{"location": "weights.bin", "offset": "8", "length": "12"}),
	)
	path := filepath.Join(dir, "m.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := DecodeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]float64{"h": {1, -2, math.Inf(1)}, "b": {1.5, -0.25}, "e": {3, 4, 5}}
	for _, tn := range m.Graph.Initializers {
		if !reflect.DeepEqual(tn.Values, want[tn.Name]) {
			t.Errorf("%s: %v, want %v", tn.Name, tn.Values, want[tn.Name])
		}
	}
	// External data without a directory, outside it, or out of range.
	for _, tc := range []struct {
		data []byte
		dir  string
		want string
	}{
		{data, "", "stored outside the file"},
		{modelWith(tensorBytes("e", []int64{3}, Float, nil, map[string]string{"location": "../weights.bin"})), dir, "inside the model's directory"},
		{modelWith(tensorBytes("e", []int64{3}, Float, nil, map[string]string{"location": "weights.bin", "offset": "16", "length": "12"})), dir, "outside weights.bin"},
		{modelWith(tensorBytes("x", []int64{4}, Float, make([]byte, 12), nil)), "", "need 16 bytes"},
		{modelWith(tensorBytes("s", []int64{1}, 8, make([]byte, 1), nil)), "", "STRING is not supported"},
		{modelWith(tensorBytes("big", []int64{1 << 20, 1 << 20}, Float, nil, nil)), "", "too large"},
	} {
		if _, err := Decode(tc.data, tc.dir); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want ErrFormat containing %q", err, tc.want)
		}
	}
}

func TestOldIRRefused(t *testing.T) {
	m := &Model{IRVersion: 2, Opset: 6, Graph: Graph{Name: "g"}}
	if _, err := Decode(m.Marshal(), ""); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "IR version 2") {
		t.Errorf("IR 2: %v", err)
	}
}
