package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// This file is the Open Inference Protocol v2 wire format: the JSON shapes
// of requests and responses, and the checks that turn a request body into a
// well-formed InferRequest or an ErrBadInput error that says what to fix.

// inferRequestJSON is the body of POST /v2/models/{name}/infer.
type inferRequestJSON struct {
	ID         string                     `json:"id"`
	Parameters map[string]json.RawMessage `json:"parameters"`
	Inputs     []inputJSON                `json:"inputs"`
	Outputs    []outputRequestJSON        `json:"outputs"`
}

type inputJSON struct {
	Name       string                     `json:"name"`
	Shape      []int64                    `json:"shape"`
	Datatype   string                     `json:"datatype"`
	Parameters map[string]json.RawMessage `json:"parameters"`
	Data       json.RawMessage            `json:"data"`
}

type outputRequestJSON struct {
	Name       string                     `json:"name"`
	Parameters map[string]json.RawMessage `json:"parameters"`
}

// inferResponseJSON is the body of a successful infer response.
type inferResponseJSON struct {
	ModelName    string         `json:"model_name"`
	ModelVersion string         `json:"model_version,omitempty"`
	ID           string         `json:"id,omitempty"`
	Parameters   responseParams `json:"parameters"`
	Outputs      []outputJSON   `json:"outputs"`
}

// responseParams are atoll's per-request parameters in a response.
type responseParams struct {
	Class     Class `json:"class"`
	QueueNs   int64 `json:"queue_time_ns"`
	ServiceNs int64 `json:"service_time_ns"`
}

type outputJSON struct {
	Name     string  `json:"name"`
	Shape    []int64 `json:"shape"`
	Datatype string  `json:"datatype"`
	Data     any     `json:"data"` // []float64, or []bool for BOOL
}

// serverMetadataJSON is the body of GET /v2.
type serverMetadataJSON struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

// errorJSON is every error body.
type errorJSON struct {
	Error string `json:"error"`
}

// dtypeRange is what values a datatype holds: integral or not and its
// bounds (exact for every type but the 64-bit integers, whose bounds are
// what float64 can tell apart).
type dtypeRange struct {
	integral bool
	min, max float64
}

var datatypes = map[string]dtypeRange{
	"BOOL":   {true, 0, 1},
	"UINT8":  {true, 0, math.MaxUint8},
	"UINT16": {true, 0, math.MaxUint16},
	"UINT32": {true, 0, math.MaxUint32},
	"UINT64": {true, 0, math.MaxUint64},
	"INT8":   {true, math.MinInt8, math.MaxInt8},
	"INT16":  {true, math.MinInt16, math.MaxInt16},
	"INT32":  {true, math.MinInt32, math.MaxInt32},
	"INT64":  {true, math.MinInt64, math.MaxInt64},
	"FP16":   {false, -65504, 65504},
	"BF16":   {false, -math.MaxFloat32, math.MaxFloat32},
	"FP32":   {false, -math.MaxFloat32, math.MaxFloat32},
	"FP64":   {false, -math.MaxFloat64, math.MaxFloat64},
}

// knownDatatypes lists the accepted datatypes for error messages.
const knownDatatypes = "BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, BF16, FP32, FP64"

// maxRank bounds a tensor's rank and its data's nesting depth.
const maxRank = 16

func badInput(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadInput, fmt.Sprintf(format, args...))
}

// decodeInfer parses an infer body strictly: unknown fields, trailing
// data and wrong JSON types are ErrBadInput errors.
func decodeInfer(body []byte) (*inferRequestJSON, error) {
	var req inferRequestJSON
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, badInput("the request body is not a valid inference request: %s", jsonProblem(err))
	}
	if dec.More() {
		return nil, badInput("the request body has data after the JSON object; send exactly one object")
	}
	return &req, nil
}

// jsonProblem rewords encoding/json's errors for a client.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q must be a JSON %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.EOF):
		return "the body is empty; send a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the body ended before the JSON object did"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func jsonKind(k string) string {
	switch k {
	case "slice", "array":
		return "array"
	case "map", "struct":
		return "object"
	case "int64", "int", "float64":
		return "number"
	}
	return k
}

// header checks an input's datatype and shape (the part every encoding
// shares) and returns its element count.
func (in *inputJSON) header(where string) (int64, error) {
	_, ok := datatypes[in.Datatype]
	switch {
	case in.Datatype == "":
		return 0, badInput("%s has no \"datatype\"; use one of %s", where, knownDatatypes)
	case in.Datatype == "BYTES":
		return 0, badInput("%s: datatype BYTES is not supported by atoll; send numeric tensors (%s)", where, knownDatatypes)
	case !ok:
		return 0, badInput("%s: unknown datatype %q; use one of %s", where, in.Datatype, knownDatatypes)
	}
	if in.Shape == nil {
		return 0, badInput("%s has no \"shape\"", where)
	}
	if len(in.Shape) > maxRank {
		return 0, badInput("%s has rank %d; at most %d dimensions are accepted", where, len(in.Shape), maxRank)
	}
	n := int64(1)
	for d, s := range in.Shape {
		if s < 0 {
			return 0, badInput("%s: shape[%d] is %d; dimensions must be >= 0", where, d, s)
		}
		if s != 0 && n > math.MaxInt32/s {
			return 0, badInput("%s: shape %v has more than %d elements", where, in.Shape, math.MaxInt32)
		}
		n *= s
	}
	return n, nil
}

// tensor checks one input for well-formedness and flattens its data.
func (in *inputJSON) tensor(i int) (Tensor, error) {
	where := fmt.Sprintf("inputs[%d]", i)
	if in.Name == "" {
		return Tensor{}, badInput("%s has no \"name\"", where)
	}
	where = fmt.Sprintf("input %q", in.Name)
	n, err := in.header(where)
	if err != nil {
		return Tensor{}, err
	}
	rng := datatypes[in.Datatype]
	if len(in.Data) == 0 {
		if _, ok := in.Parameters["binary_data_size"]; ok {
			return Tensor{}, badInput("%s has \"binary_data_size\" but the request has no %s header; send the header with the length of the JSON part (docs/api.md, binary tensor data)", where, inferHeaderLength)
		}
		return Tensor{}, badInput("%s has no \"data\"; send %d values (the product of shape %v)", where, n, in.Shape)
	}
	// Every value takes at least two bytes ("0,"), so the data cannot hold
	// more than this: never allocate what the shape merely claims.
	capHint := min(n, int64(len(in.Data)/2+1))
	p := flattener{b: in.Data, dtype: in.Datatype, rng: rng, out: make([]float64, 0, capHint)}
	if err := p.value(0); err != nil {
		return Tensor{}, badInput("%s: %v", where, err)
	}
	if int64(len(p.out)) != n {
		return Tensor{}, badInput("%s: shape %v needs %d values, data has %d", where, in.Shape, n, len(p.out))
	}
	return Tensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape, Data: p.out}, nil
}

// flattener walks a JSON value that encoding/json has already found well
// formed (a number, a boolean, or nested arrays of them) and appends its
// numbers in row-major order.
type flattener struct {
	b     []byte
	i     int
	dtype string
	rng   dtypeRange
	out   []float64
}

func (p *flattener) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *flattener) value(depth int) error {
	p.ws()
	if p.i >= len(p.b) {
		return errors.New("data ends early")
	}
	switch c := p.b[p.i]; {
	case c == '[':
		if depth >= maxRank {
			return fmt.Errorf("data is nested deeper than %d levels", maxRank)
		}
		p.i++
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return nil
		}
		for {
			if err := p.value(depth + 1); err != nil {
				return err
			}
			p.ws()
			if p.i >= len(p.b) {
				return errors.New("data ends early")
			}
			switch p.b[p.i] {
			case ',':
				p.i++
			case ']':
				p.i++
				return nil
			default:
				return fmt.Errorf("unexpected %q in data", p.b[p.i])
			}
		}
	case c == 't' || c == 'f':
		if p.dtype != "BOOL" {
			return fmt.Errorf("data holds a boolean but the datatype is %s; send numbers", p.dtype)
		}
		v := 0.0
		if c == 't' {
			v, p.i = 1, p.i+4
		} else {
			p.i += 5
		}
		p.out = append(p.out, v)
		return nil
	case c == '"':
		return fmt.Errorf("data holds a string; atoll accepts numbers only (datatype %s)", p.dtype)
	case c == 'n':
		return errors.New("data holds null; send a number for every element")
	case c == '{':
		return errors.New("data holds an object; send a flat or nested array of numbers")
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' || (c >= '0' && c <= '9') {
			p.i++
			continue
		}
		break
	}
	v, err := strconv.ParseFloat(string(p.b[start:p.i]), 64)
	if err != nil {
		return fmt.Errorf("value %d: %q is not a number %s can hold", len(p.out), p.b[start:p.i], p.dtype)
	}
	if p.dtype == "BOOL" {
		return fmt.Errorf("value %d: datatype BOOL takes true or false, not %s", len(p.out), p.b[start:p.i])
	}
	if p.rng.integral && v != math.Trunc(v) {
		return fmt.Errorf("value %d: %v is not an integer, and the datatype is %s", len(p.out), v, p.dtype)
	}
	if v < p.rng.min || v > p.rng.max {
		return fmt.Errorf("value %d: %v is out of range for %s", len(p.out), v, p.dtype)
	}
	p.out = append(p.out, v)
	return nil
}

// priorityParam reads the request's "priority" parameter: absent is 0.
func priorityParam(params map[string]json.RawMessage) (int64, error) {
	raw, ok := params["priority"]
	if !ok {
		return 0, nil
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil {
		return 0, badInput("parameter \"priority\" is %s; it must be an integer (1 is the highest priority, 0 the model's default)", raw)
	}
	return v, nil
}

// checkAgainst is the one check of a request's inputs and requested
// outputs against the model's metadata (when the model publishes it):
// every input named once and known, of the model's datatype and shape (-1
// is any size), every requested output known. The decoders run it on what
// they decode (and mark the request checked); the engine runs it on a
// request that did not come through them. Values (finite floats, integer
// ranges) are the engine's to check.
func checkAgainst(info ModelInfo, inputs []Tensor, outputs []string) error {
	if len(info.Inputs) > 0 {
		if len(inputs) != len(info.Inputs) {
			return badInput("model %q takes %d inputs (%s), the request has %d", info.Name, len(info.Inputs), tensorNames(info.Inputs), len(inputs))
		}
		for i, t := range inputs {
			for _, u := range inputs[:i] {
				if u.Name == t.Name {
					return badInput("input %q appears twice; send each input once", t.Name)
				}
			}
			ti, ok := findTensor(info.Inputs, t.Name)
			if !ok {
				return badInput("model %q has no input %q; its inputs are %s", info.Name, t.Name, tensorNames(info.Inputs))
			}
			if ti.Datatype != "" && ti.Datatype != t.Datatype {
				return badInput("input %q is %s, model %q wants %s", t.Name, t.Datatype, info.Name, ti.Datatype)
			}
			if !shapeFits(ti.Shape, t.Shape) {
				return badInput("input %q has shape %v, model %q wants %v (-1 is any size)", t.Name, t.Shape, info.Name, ti.Shape)
			}
		}
	}
	if len(info.Outputs) > 0 {
		for _, o := range outputs {
			if _, ok := findTensor(info.Outputs, o); !ok {
				return badInput("model %q has no output %q; its outputs are %s", info.Name, o, tensorNames(info.Outputs))
			}
		}
	}
	return nil
}

func findTensor(ts []TensorInfo, name string) (TensorInfo, bool) {
	for _, t := range ts {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

func tensorNames(ts []TensorInfo) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = strconv.Quote(t.Name)
	}
	return strings.Join(names, ", ")
}

func shapeFits(want, got []int64) bool {
	if want == nil {
		return true
	}
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		if want[i] >= 0 && want[i] != got[i] {
			return false
		}
	}
	return true
}

// parseInferJSON turns a JSON body into an InferRequest for model info,
// with the class from the priority mapping, and reads which outputs the request
// wants as binary data (the binary tensor data extension's output
// parameters, which a plain JSON request may carry too).
func parseInferJSON(body []byte, info ModelInfo, prio PriorityConfig) (*InferRequest, outputModes, string, Class, error) {
	if rj, vals, ok := fastDecode(body); ok {
		if req, id, class, err := buildInfer(rj, vals, info, prio); err == nil {
			modes, err := outputModesOf(rj)
			if err != nil {
				return nil, modes, id, class, err
			}
			return req, modes, id, class, nil
		}
	}
	rj, err := decodeInfer(body)
	if err != nil {
		return nil, outputModes{}, "", "", err
	}
	req, id, class, err := buildInfer(rj, nil, info, prio)
	if err != nil {
		return nil, outputModes{}, id, class, err
	}
	modes, err := outputModesOf(rj)
	if err != nil {
		return nil, modes, id, class, err
	}
	return req, modes, id, class, nil
}

// errFallback makes parseInferJSON take the slow path.
var errFallback = errors.New("server: fast path declined")

// buildInfer checks a decoded request and builds the InferRequest. vals,
// when set, are the inputs' values from fastDecode.
func buildInfer(rj *inferRequestJSON, vals []fastData, info ModelInfo, prio PriorityConfig) (*InferRequest, string, Class, error) {
	return buildInferWith(rj, func(i int) (Tensor, error) {
		if vals != nil {
			t, ok := rj.Inputs[i].tensorFast(vals[i])
			if !ok {
				return Tensor{}, errFallback
			}
			return t, nil
		}
		return rj.Inputs[i].tensor(i)
	}, info, prio)
}

// buildInferWith is buildInfer with each input's tensor from tensorOf:
// JSON data (fast or slow path) or the binary extension's raw bytes.
func buildInferWith(rj *inferRequestJSON, tensorOf func(i int) (Tensor, error), info ModelInfo, prio PriorityConfig) (*InferRequest, string, Class, error) {
	p, err := priorityParam(rj.Parameters)
	if err != nil {
		return nil, rj.ID, "", err
	}
	def := info.DefaultClass
	if def == "" {
		def = HP
	}
	class, err := prio.ClassOf(p, def)
	if err != nil {
		return nil, rj.ID, "", err
	}
	if len(rj.Inputs) == 0 {
		return nil, rj.ID, class, badInput("the request has no inputs; send \"inputs\": [{\"name\", \"shape\", \"datatype\", \"data\"}]")
	}
	req := &InferRequest{ID: rj.ID, Model: info.Name, Class: class, Inputs: make([]Tensor, len(rj.Inputs))}
	seen := make(map[string]bool, len(rj.Inputs))
	for i := range rj.Inputs {
		t, err := tensorOf(i)
		if err != nil {
			return nil, rj.ID, class, err
		}
		if seen[t.Name] {
			return nil, rj.ID, class, badInput("input %q appears twice; send each input once", t.Name)
		}
		seen[t.Name] = true
		req.Inputs[i] = t
	}
	if len(rj.Outputs) > 0 {
		req.Outputs = make([]string, len(rj.Outputs))
		for i, o := range rj.Outputs {
			if o.Name == "" {
				return nil, rj.ID, class, badInput("outputs[%d] has no \"name\"", i)
			}
			req.Outputs[i] = o.Name
		}
	}
	if err := checkAgainst(info, req.Inputs, req.Outputs); err != nil {
		return nil, rj.ID, class, err
	}
	req.checked = len(info.Inputs) > 0 // the model published what to check against
	return req, rj.ID, class, nil
}

// appendResponse appends r as JSON. Tensor data is formatted by datatype:
// integers as integers, FP16/BF16/FP32 as their shortest float32 form,
// BOOL as true/false. NaN and Inf have no JSON form and are an error.
func appendResponse(b []byte, r *inferResponseJSON, outs []Tensor) ([]byte, error) {
	return appendResponseBinary(b, r, outs, nil)
}

// appendResponseBinary is appendResponse where output i with bin[i] set
// (bin may be nil: none) carries "parameters": {"binary_data_size": N}
// instead of "data"; the caller appends the N raw bytes after the JSON.
func appendResponseBinary(b []byte, r *inferResponseJSON, outs []Tensor, bin []bool) ([]byte, error) {
	b = append(b, `{"model_name":`...)
	b = appendString(b, r.ModelName)
	if r.ModelVersion != "" {
		b = append(b, `,"model_version":`...)
		b = appendString(b, r.ModelVersion)
	}
	if r.ID != "" {
		b = append(b, `,"id":`...)
		b = appendString(b, r.ID)
	}
	b = append(b, `,"parameters":{"class":`...)
	b = appendString(b, string(r.Parameters.Class))
	b = append(b, `,"queue_time_ns":`...)
	b = strconv.AppendInt(b, r.Parameters.QueueNs, 10)
	b = append(b, `,"service_time_ns":`...)
	b = strconv.AppendInt(b, r.Parameters.ServiceNs, 10)
	b = append(b, `},"outputs":[`...)
	for i, t := range outs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, t.Name)
		b = append(b, `,"shape":[`...)
		shape := t.Shape
		if shape == nil {
			shape = []int64{int64(len(t.Data))}
		}
		for j, d := range shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, `],"datatype":`...)
		b = appendString(b, t.Datatype)
		if bin != nil && bin[i] {
			b = append(b, `,"parameters":{"binary_data_size":`...)
			b = strconv.AppendInt(b, int64(len(t.Data))*rawSize[t.Datatype], 10)
			b = append(b, "}}"...)
			continue
		}
		b = append(b, `,"data":[`...)
		rng, known := datatypes[t.Datatype]
		for j, v := range t.Data {
			if j > 0 {
				b = append(b, ',')
			}
			switch {
			case math.IsNaN(v) || math.IsInf(v, 0):
				return nil, fmt.Errorf("output %q value %d is %v, which JSON cannot carry", t.Name, j, v)
			case t.Datatype == "BOOL":
				b = strconv.AppendBool(b, v != 0)
			case known && rng.integral && v == math.Trunc(v) && v >= math.MinInt64 && v < math.MaxInt64:
				b = strconv.AppendInt(b, int64(v), 10)
			case t.Datatype == "FP32" || t.Datatype == "FP16" || t.Datatype == "BF16":
				b = appendFloat(b, v, 32)
			default:
				b = appendFloat(b, v, 64)
			}
		}
		b = append(b, "]}"...)
	}
	return append(b, "]}"...), nil
}

// appendFloat formats like encoding/json: plain decimals, exponents only
// for very small or large magnitudes.
func appendFloat(b []byte, f float64, bits int) []byte {
	abs := math.Abs(f)
	if bits == 32 {
		abs = float64(float32(abs))
	}
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	return strconv.AppendFloat(b, f, format, -1, bits)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	simple := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			simple = false
			break
		}
	}
	if simple {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
