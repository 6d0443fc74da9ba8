package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// This file is the Open Inference Protocol's binary tensor data extension
// (KServe / Triton) for the REST API. A request with the header
//
//	Inference-Header-Content-Length: N
//
// has a body whose first N bytes are the JSON inference request and whose
// remaining bytes are the raw tensor data (grpc_raw.go's layout) of the
// inputs that carry "parameters": {"binary_data_size": B} instead of
// "data", concatenated in the order of "inputs". A request asks for binary
// outputs with the request parameter "binary_data_output": true or an
// output's "parameters": {"binary_data": true} (which overrides it); the
// response then carries the same header, each binary output's
// "binary_data_size", and the outputs' raw bytes after the JSON.

// inferHeaderLength is the header that splits a binary request or response.
const inferHeaderLength = "Inference-Header-Content-Length"

// binaryContentType is the Content-Type of a response with binary outputs
// (Triton's, for a body that is not JSON alone).
const binaryContentType = "application/octet-stream"

// splitBinary splits a body at the value of the Inference-Header-Content-
// Length header: the JSON part and the binary part.
func splitBinary(body []byte, header string) (js, rest []byte, err error) {
	if header == "" || len(header) > 19 {
		return nil, nil, badInput("header %s is %q; it must be the length in bytes of the JSON part of the body (a decimal integer)", inferHeaderLength, header)
	}
	for i := 0; i < len(header); i++ {
		if c := header[i]; c < '0' || c > '9' {
			return nil, nil, badInput("header %s is %q; it must be the length in bytes of the JSON part of the body (a decimal integer)", inferHeaderLength, header)
		}
	}
	n, err := strconv.ParseInt(header, 10, 64)
	if err != nil {
		return nil, nil, badInput("header %s is %q; it must be the length in bytes of the JSON part of the body (a decimal integer)", inferHeaderLength, header)
	}
	if n > int64(len(body)) {
		return nil, nil, badInput("header %s is %d but the body has only %d bytes; it must be the length of the JSON part, at most the body's length", inferHeaderLength, n, len(body))
	}
	return body[:n], body[n:], nil
}

// parseInferBinaryRaw parses a request in the binary extension's form:
// the JSON part (strictly, as decodeInfer does), then each binary input's
// bytes, which must add up to exactly the bytes after the JSON part. Every
// input is decoded to Data, except that for an engine that takes raw
// inputs (acceptsRaw, RawInputs) a binary input whose datatype is the model
// input's storage type (rawFast) is copied once out of body into
// Tensor.Raw, unchecked (the engine checks it). Nothing returned refers to
// body.
func parseInferBinaryRaw(body []byte, header string, info ModelInfo, prio PriorityConfig, acceptsRaw bool) (*InferRequest, outputModes, string, Class, error) {
	js, rest, err := splitBinary(body, header)
	if err != nil {
		return nil, outputModes{}, "", "", err
	}
	rj, err := decodeInfer(js)
	if err != nil {
		return nil, outputModes{}, "", "", err
	}
	raw := make([][]byte, len(rj.Inputs))
	isRaw := make([]bool, len(rj.Inputs))
	off := int64(0)
	for i := range rj.Inputs {
		in := &rj.Inputs[i]
		size, ok, err := binaryDataSize(in.Parameters)
		if err != nil {
			return nil, outputModes{}, rj.ID, "", badInput("%s: %v", inputWhere(i, in.Name), err)
		}
		if !ok {
			continue
		}
		if len(in.Data) != 0 {
			return nil, outputModes{}, rj.ID, "", badInput("%s has both \"data\" and \"binary_data_size\"; send its values one way", inputWhere(i, in.Name))
		}
		if size > int64(len(rest))-off {
			return nil, outputModes{}, rj.ID, "", badInput("%s: binary_data_size %d runs past the end of the body: the inputs' binary_data_size values up to it add up to %d bytes, and %d bytes follow the JSON part (%s)", inputWhere(i, in.Name), size, off+size, len(rest), inferHeaderLength)
		}
		raw[i], isRaw[i] = rest[off:off+size], true
		off += size
	}
	if off != int64(len(rest)) {
		return nil, outputModes{}, rj.ID, "", badInput("%d bytes follow the JSON part but the inputs' binary_data_size values add up to %d; the body has %d trailing bytes (is %s the JSON part's length?)", len(rest), off, int64(len(rest))-off, inferHeaderLength)
	}
	req, id, class, err := buildInferWith(rj, func(i int) (Tensor, error) {
		if isRaw[i] {
			in := &rj.Inputs[i]
			return in.binaryTensor(i, raw[i], rawFast(acceptsRaw, info, in.Name, in.Datatype))
		}
		return rj.Inputs[i].tensor(i)
	}, info, prio)
	if err != nil {
		return nil, outputModes{}, id, class, err
	}
	modes, err := outputModesOf(rj)
	if err != nil {
		return nil, modes, id, class, err
	}
	return req, modes, id, class, nil
}

func inputWhere(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("inputs[%d]", i)
	}
	return fmt.Sprintf("input %q", name)
}

// binaryDataSize reads an input's "binary_data_size" parameter: absent is
// ok=false; present it must be a non-negative integer.
func binaryDataSize(params map[string]json.RawMessage) (size int64, ok bool, err error) {
	raw, ok := params["binary_data_size"]
	if !ok {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil || v < 0 {
		return 0, true, fmt.Errorf("parameter \"binary_data_size\" is %s; it must be the input's size in bytes, an integer >= 0", raw)
	}
	return v, true, nil
}

// binaryTensor is tensor for an input whose values are raw bytes: the same
// header checks, then the size against shape × datatype, then the raw
// decoder the gRPC API uses (decodeRaw, which also refuses NaN, infinities
// and BOOL bytes other than 0 and 1). With keep, the bytes are copied into
// Tensor.Raw as they are (the raw fast path; the engine checks them).
func (in *inputJSON) binaryTensor(i int, raw []byte, keep bool) (Tensor, error) {
	where := inputWhere(i, in.Name)
	if in.Name == "" {
		return Tensor{}, badInput("%s has no \"name\"", where)
	}
	n, err := in.header(where)
	if err != nil {
		return Tensor{}, err
	}
	size := rawSize[in.Datatype]
	if int64(len(raw)) != n*size {
		return Tensor{}, badInput("%s: binary_data_size is %d bytes but shape %v of %s needs %d × %d = %d bytes", where, len(raw), in.Shape, in.Datatype, n, size, n*size)
	}
	if keep {
		return Tensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape, Raw: ownRaw(raw)}, nil
	}
	data, err := decodeRaw(in.Datatype, n, raw, true) // checks the values too
	if err != nil {
		return Tensor{}, badInput("%s: %v", where, err)
	}
	return Tensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape, Data: data}, nil
}

// outputModes is which outputs a request wants as binary data.
type outputModes struct {
	all bool            // "binary_data_output": true
	per map[string]bool // outputs' "binary_data", which override all
}

// binary reports whether output name goes out as binary data.
func (m outputModes) binary(name string) bool {
	if v, ok := m.per[name]; ok {
		return v
	}
	return m.all
}

// outputModesOf reads the extension's output parameters of a request.
func outputModesOf(rj *inferRequestJSON) (outputModes, error) {
	var m outputModes
	var err error
	if m.all, err = boolParam(rj.Parameters, "binary_data_output"); err != nil {
		return outputModes{}, err
	}
	for i, o := range rj.Outputs {
		if _, ok := o.Parameters["binary_data"]; !ok {
			continue
		}
		v, err := boolParam(o.Parameters, "binary_data")
		if err != nil {
			return outputModes{}, badInput("outputs[%d]: %v", i, err)
		}
		if m.per == nil {
			m.per = map[string]bool{}
		}
		m.per[o.Name] = v
	}
	return m, nil
}

// boolParam reads a boolean parameter: absent is false.
func boolParam(params map[string]json.RawMessage, key string) (bool, error) {
	raw, ok := params[key]
	if !ok {
		return false, nil
	}
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, badInput("parameter %q is %s; it must be true or false", key, raw)
}

// appendBinaryResponse encodes a response with the outputs that modes
// selects as binary: the JSON part, then the raw bytes of those outputs in
// order. It returns the body and the JSON part's length (the value of the
// Inference-Header-Content-Length header); binary=false means no output
// was selected and the body is plain JSON.
func appendBinaryResponse(b []byte, r *inferResponseJSON, outs []Tensor, modes outputModes) (body []byte, jsonLen int, binary bool, err error) {
	var bin []bool
	for i, t := range outs {
		if !modes.binary(t.Name) {
			continue
		}
		if err := checkOutput(t); err != nil {
			return nil, 0, false, err
		}
		if bin == nil {
			bin = make([]bool, len(outs))
		}
		bin[i] = true
	}
	if bin == nil {
		b, err := appendResponse(b, r, outs)
		return b, len(b), false, err
	}
	b, err = appendResponseBinary(b, r, outs, bin)
	if err != nil {
		return nil, 0, false, err
	}
	jsonLen = len(b)
	for i, t := range outs {
		if bin[i] {
			if b, err = appendRaw(b, t.Datatype, t.Data); err != nil {
				return nil, 0, false, fmt.Errorf("%w: output %q: %v", ErrInternal, t.Name, err)
			}
		}
	}
	return b, jsonLen, true, nil
}

// responseSizeHint estimates a response's size from its outputs, so the
// buffer is allocated once: raw size for binary outputs, a generous 16
// bytes a value for JSON ones.
func responseSizeHint(outs []Tensor, modes outputModes) int {
	n := 256
	for _, t := range outs {
		n += 128 + len(t.Name)
		if size, ok := rawSize[t.Datatype]; ok && modes.binary(t.Name) {
			n += len(t.Data) * int(size)
		} else {
			n += len(t.Data) * 16
		}
	}
	return n
}
