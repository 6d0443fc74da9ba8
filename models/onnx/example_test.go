package onnx_test

import (
	"fmt"

	"atoll/models/onnx"
)

// Decode reads a model file's bytes (DecodeFile reads a path, external
// data included); here the bytes come from Marshal.
func ExampleDecode() {
	m := &onnx.Model{IRVersion: 8, Opset: 17, Graph: onnx.Graph{
		Inputs:  []onnx.ValueInfo{{Name: "x", ElemType: onnx.Float, Shape: []onnx.Dim{{Param: "N"}, {Value: 3}, {Value: 224}, {Value: 224}}}},
		Outputs: []onnx.ValueInfo{{Name: "y", ElemType: onnx.Float}},
		Nodes:   []onnx.Node{{Name: "/relu/Relu", OpType: "Relu", Inputs: []string{"x"}, Outputs: []string{"y"}}},
	}}
	got, err := onnx.Decode(m.Marshal(), "")
	if err != nil {
		fmt.Println(err)
		return
	}
	in := got.Graph.Inputs[0]
	fmt.Println(got.Opset, len(got.Graph.Nodes), in.Name, in.Shape[0].Param, in.Shape[1].Value)
	// Output: 17 1 x N 3
}
