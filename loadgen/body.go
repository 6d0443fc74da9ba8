package loadgen

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// DataFormat is how a request carries its tensors.
type DataFormat string

const (
	// DataBinary sends the inputs as the Open Inference Protocol's binary
	// tensor data extension (raw little-endian bytes after the JSON part,
	// Inference-Header-Content-Length) and asks for binary outputs. The
	// zero DataFormat means DataBinary.
	DataBinary DataFormat = "binary"
	// DataJSON sends the inputs as JSON numbers and takes JSON outputs:
	// milliseconds per large tensor to print and parse, on both ends.
	DataJSON DataFormat = "json"
)

// ParseDataFormat checks a --data value.
func ParseDataFormat(s string) (DataFormat, error) {
	switch DataFormat(s) {
	case DataBinary, DataJSON:
		return DataFormat(s), nil
	case "":
		return DataBinary, nil
	}
	return "", fmt.Errorf("%w: data format %q: want binary (the binary tensor data extension) or json", ErrConfig, s)
}

// Body is a prepared inference request body for one class: the inputs are
// generated and encoded once from the model metadata and only the
// per-request id is spliced in, so the send path neither marshals nor
// copies the tensor data. Safe for concurrent use (read-only).
type Body struct {
	prefix, suffix []byte // the JSON part around the id
	raw            []byte // the inputs' raw bytes after the JSON part (binary only)
	binary         bool
}

// Binary reports whether the body uses the binary tensor data extension.
func (b *Body) Binary() bool { return b.binary }

// Len is the length of request id's body in bytes.
func (b *Body) Len(id int) int { return b.JSONLen(id) + len(b.raw) }

// JSONLen is the length of the JSON part of request id's body: the value of
// its Inference-Header-Content-Length header when Binary.
func (b *Body) JSONLen(id int) int {
	return len(b.prefix) + len(strconv.AppendInt(nil, int64(id), 10)) + len(b.suffix)
}

// Bytes is the body of request id, copied into one slice (the sender uses
// pieces instead; see Client.Infer).
func (b *Body) Bytes(id int) []byte {
	out := make([]byte, 0, b.Len(id)+12)
	out = append(out, b.prefix...)
	out = strconv.AppendInt(out, int64(id), 10)
	out = append(out, b.suffix...)
	return append(out, b.raw...)
}

// pieces are request id's body as shared read-only slices and a small
// fresh head holding the id.
func (b *Body) pieces(id int) (head, suffix, raw []byte) {
	head = make([]byte, 0, len(b.prefix)+20)
	head = append(head, b.prefix...)
	head = strconv.AppendInt(head, int64(id), 10)
	return head, b.suffix, b.raw
}

type reqTensor struct {
	Name       string         `json:"name"`
	Shape      []int64        `json:"shape"`
	Datatype   string         `json:"datatype"`
	Parameters map[string]any `json:"parameters,omitempty"`
	Data       any            `json:"data,omitempty"`
}

type reqBody struct {
	Parameters map[string]any `json:"parameters,omitempty"`
	Inputs     []reqTensor    `json:"inputs"`
}

// NewBody builds the inference body for model metadata m: every input gets
// the declared shape with each variable (-1) dimension set to batch, and
// random values of the declared datatype from seed. priority > 0 is sent as
// the request's "priority" parameter (1 is highest); 0 leaves the model's
// default class. format picks JSON or binary tensor data (the same values
// either way).
func NewBody(m *Metadata, batch int, priority int, seed uint64, format DataFormat) (*Body, error) {
	format, err := ParseDataFormat(string(format))
	if err != nil {
		return nil, err
	}
	if batch < 1 {
		return nil, fmt.Errorf("%w: batch must be at least 1, got %d", ErrConfig, batch)
	}
	if priority < 0 {
		return nil, fmt.Errorf("%w: priority must be 0 (model default) or a positive level (1 is highest), got %d", ErrConfig, priority)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	var rb reqBody
	if priority > 0 {
		rb.Parameters = map[string]any{"priority": priority}
	}
	bin := format == DataBinary
	if bin {
		if rb.Parameters == nil {
			rb.Parameters = map[string]any{}
		}
		rb.Parameters["binary_data_output"] = true
	}
	var raw []byte
	total := 0
	for _, in := range m.Inputs {
		shape := make([]int64, len(in.Shape))
		n := 1
		for i, d := range in.Shape {
			switch {
			case d == -1:
				d = int64(batch)
			case d < 0:
				return nil, fmt.Errorf("%w: model %q input %q has dimension %d (want -1 or a size)", ErrServer, m.Name, in.Name, d)
			}
			shape[i] = d
			if d > maxElements || n*int(d) > maxElements {
				return nil, fmt.Errorf("%w: model %q input %q of shape %v is over %d elements; use a smaller --batch", ErrConfig, m.Name, in.Name, shape, maxElements)
			}
			n *= int(d)
		}
		total += n
		if total > maxElements {
			return nil, fmt.Errorf("%w: model %q inputs total over %d elements; use a smaller --batch", ErrConfig, m.Name, maxElements)
		}
		data, err := randomData(rng, in.Datatype, n)
		if err != nil {
			return nil, fmt.Errorf("model %q input %q: %w", m.Name, in.Name, err)
		}
		t := reqTensor{Name: in.Name, Shape: shape, Datatype: in.Datatype, Data: data}
		if bin {
			start := len(raw)
			raw = appendRaw(raw, in.Datatype, data)
			t.Data = nil
			t.Parameters = map[string]any{"binary_data_size": len(raw) - start}
		}
		rb.Inputs = append(rb.Inputs, t)
	}
	js, err := json.Marshal(rb)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding request: %v", ErrConfig, err)
	}
	// js is {...}; splice "id":"<n>", in after the brace.
	return &Body{prefix: []byte(`{"id":"`), suffix: append([]byte(`",`), js[1:]...), raw: raw, binary: bin}, nil
}

// appendRaw appends values from randomData in the binary tensor data
// extension's layout: little-endian, row-major, no padding; BOOL one byte.
// randomData's FP16 and BF16 values are exact in those types, so both
// formats carry the same numbers.
func appendRaw(b []byte, datatype string, data any) []byte {
	le := binary.LittleEndian
	switch v := data.(type) {
	case []bool:
		for _, x := range v {
			if x {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
	case []float64: // FP64
		for _, x := range v {
			b = le.AppendUint64(b, math.Float64bits(x))
		}
	case []float32:
		for _, x := range v {
			switch datatype {
			case "FP16":
				b = le.AppendUint16(b, exactFP16(x))
			case "BF16":
				b = le.AppendUint16(b, uint16(math.Float32bits(x)>>16))
			default:
				b = le.AppendUint32(b, math.Float32bits(x))
			}
		}
	case []int64:
		for _, x := range v {
			switch datatype {
			case "INT8", "UINT8":
				b = append(b, byte(x))
			case "INT16", "UINT16":
				b = le.AppendUint16(b, uint16(x))
			case "INT32", "UINT32":
				b = le.AppendUint32(b, uint32(x))
			default:
				b = le.AppendUint64(b, uint64(x))
			}
		}
	}
	return b
}

// exactFP16 converts a float32 that IEEE binary16 holds exactly as a
// normal number or zero (randomData's k/1024 values) to its bits.
func exactFP16(x float32) uint16 {
	f := math.Float32bits(x)
	sign := uint16(f>>16) & 0x8000
	if f&0x7fffffff == 0 {
		return sign
	}
	exp := int(f>>23&0xff) - 127 + 15
	return sign | uint16(exp)<<10 | uint16(f>>13&0x3ff)
}

func randomData(rng *rand.Rand, datatype string, n int) (any, error) {
	ints := func(lo, hi int64) []int64 { // [lo, hi)
		out := make([]int64, n)
		for i := range out {
			out[i] = lo + rng.Int64N(hi-lo)
		}
		return out
	}
	switch datatype {
	case "FP16", "BF16":
		// k/1024 (FP16) and k/128 (BF16) in [-1, 1): exact in the type, so
		// JSON and binary bodies carry the same numbers.
		steps := int64(1024)
		if datatype == "BF16" {
			steps = 128
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.Int64N(2*steps)-steps) / float32(steps)
		}
		return out, nil
	case "FP32":
		out := make([]float32, n) // short in JSON; JSON's shortest form rounds back to the same float32
		for i := range out {
			out[i] = float32(rng.Float64()*2 - 1)
		}
		return out, nil
	case "FP64":
		out := make([]float64, n) // float32 values, held as float64 so JSON prints them exactly
		for i := range out {
			out[i] = float64(float32(rng.Float64()*2 - 1))
		}
		return out, nil
	case "INT8":
		return ints(-128, 128), nil
	case "UINT8":
		return ints(0, 256), nil
	case "INT16", "INT32", "INT64":
		// Non-negative: integer inputs are ids and indices (token ids,
		// positions), and the daemon refuses negative ones.
		return ints(0, 1000), nil
	case "UINT16", "UINT32", "UINT64":
		return ints(0, 1000), nil
	case "BOOL":
		out := make([]bool, n)
		for i := range out {
			out[i] = rng.IntN(2) == 1
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: datatype %q is not supported by the load generator (want FP16, BF16, FP32, FP64, INT8-64, UINT8-64 or BOOL)", ErrConfig, datatype)
}
