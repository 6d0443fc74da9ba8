// Package onnx reads the subset of the ONNX format (onnx.proto3, IR
// version 3 and later) that describes an inference graph: the model's
// opset, the graph's nodes, initializers, inputs and outputs. It decodes
// the protobuf wire format directly (google.golang.org/protobuf's
// protowire): a generated onnx.pb.go would need protoc here and would carry
// the whole schema for the few fields an importer reads. Unknown fields are
// skipped, as protobuf readers do.
//
// Tensors stored outside the file (external data) are read relative to a
// directory the caller names (DecodeFile does it for a file).
package onnx
