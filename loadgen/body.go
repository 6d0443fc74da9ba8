package loadgen

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
)

// Body is a prepared inference request body for one class: the inputs are
// generated once from the model metadata and the per-request id is spliced
// in, so the send path does not marshal.
type Body struct {
	prefix, suffix []byte
}

// Bytes is the body of request id.
func (b *Body) Bytes(id int) []byte {
	out := make([]byte, 0, len(b.prefix)+len(b.suffix)+12)
	out = append(out, b.prefix...)
	out = strconv.AppendInt(out, int64(id), 10)
	return append(out, b.suffix...)
}

type reqTensor struct {
	Name     string  `json:"name"`
	Shape    []int64 `json:"shape"`
	Datatype string  `json:"datatype"`
	Data     any     `json:"data"`
}

type reqBody struct {
	Parameters map[string]any `json:"parameters,omitempty"`
	Inputs     []reqTensor    `json:"inputs"`
}

// NewBody builds the inference body for model metadata m: every input gets
// the declared shape with each variable (-1) dimension set to batch, and
// random values of the declared datatype from seed. priority > 0 is sent as
// the request's "priority" parameter (1 is highest); 0 leaves the model's
// default class.
func NewBody(m *Metadata, batch int, priority int, seed uint64) (*Body, error) {
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
		rb.Inputs = append(rb.Inputs, reqTensor{Name: in.Name, Shape: shape, Datatype: in.Datatype, Data: data})
	}
	js, err := json.Marshal(rb)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding request: %v", ErrConfig, err)
	}
	// js is {...}; splice "id":"<n>", in after the brace.
	return &Body{prefix: []byte(`{"id":"`), suffix: append([]byte(`",`), js[1:]...)}, nil
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
	case "FP16", "BF16", "FP32", "FP64":
		out := make([]float32, n) // float32 is exact in every float type's range used here and short in JSON
		for i := range out {
			out[i] = float32(rng.Float64()*2 - 1)
		}
		return out, nil
	case "INT8":
		return ints(-128, 128), nil
	case "UINT8":
		return ints(0, 256), nil
	case "INT16", "INT32", "INT64":
		return ints(-1000, 1000), nil
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
