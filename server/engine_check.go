package server

import (
	"fmt"
	"math"
	"strings"

	"atoll/kernels"
	"atoll/models"
)

func engDatatype(d kernels.DType) string {
	switch d {
	case kernels.F32:
		return "FP32"
	case kernels.F16:
		return "FP16"
	case kernels.BF16:
		return "BF16"
	case kernels.I32:
		return "INT32"
	}
	return strings.ToUpper(d.String())
}

func engShape(s []int) []int64 {
	out := make([]int64, len(s))
	for i, d := range s {
		out[i] = int64(d)
	}
	return out
}

// check validates req against the model — its names, datatypes and shapes
// with checkAgainst (unless a decoder has), then its values — and builds the
// input bundle.
func (m *engModel) check(req *InferRequest) (*models.Bundle, error) {
	if !req.checked {
		if err := checkAgainst(m.info, req.Inputs, req.Outputs); err != nil {
			return nil, err
		}
	}
	if m.onnx != nil {
		return m.checkONNX(req)
	}
	b := &models.Bundle{}
	for _, t := range req.Inputs {
		ti, _ := findTensor(m.info.Inputs, t.Name)
		n := 1
		for _, d := range ti.Shape {
			n *= int(d)
		}
		gt, _ := m.graph.Tensor(t.Name)
		if t.Raw != nil {
			d, err := m.checkRaw(t, gt, n)
			if err != nil {
				return nil, err
			}
			b.Add(d)
			continue
		}
		if len(t.Data) != n {
			return nil, fmt.Errorf("%w: input %q has %d values; shape %v needs %d", ErrBadInput, t.Name, len(t.Data), ti.Shape, n)
		}
		if bound, isInt := m.intMax[t.Name]; isInt {
			for i, v := range t.Data {
				if v != math.Trunc(v) || v < 0 || v >= float64(bound) {
					return nil, fmt.Errorf("%w: input %q value %d is %v; it must be an integer in [0, %d)", ErrBadInput, t.Name, i, v, bound)
				}
			}
		} else {
			for i, v := range t.Data {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return nil, fmt.Errorf("%w: input %q value %d is %v; send finite numbers", ErrBadInput, t.Name, i, v)
				}
			}
		}
		b.Add(models.NewData(t.Name, gt.DType, gt.Shape, t.Data))
	}
	return b, nil
}

// AcceptsRaw implements RawInputs: check takes raw inputs in the model
// input's storage type and the bundle keeps their bytes.
func (e *engineImpl) AcceptsRaw() bool { return true }

// checkRaw is check for an input that came as raw bytes in the model
// input's datatype (Tensor.Raw, the raw fast path): the values are checked
// on their bit patterns (finite floats; integer inputs in [0, bound)) with
// the messages the decoding path gives, and the bundle takes the bytes as
// they are (they are what the device gets; the simulator's CPU reference
// decodes them itself, engReference). The caller has matched the name,
// datatype and shape.
func (m *engModel) checkRaw(t Tensor, gt models.Tensor, n int) (*models.Data, error) {
	size := gt.DType.Size()
	if len(t.Raw) != n*size {
		return nil, fmt.Errorf("%w: input %q has %d bytes; shape %v of %s needs %d × %d = %d", ErrBadInput, t.Name, len(t.Raw), t.Shape, t.Datatype, n, size, n*size)
	}
	if bound, isInt := m.intMax[t.Name]; isInt {
		if i := firstOutOfRange(t.Raw, bound); i >= 0 {
			return nil, fmt.Errorf("%w: input %q value %d is %v; it must be an integer in [0, %d)", ErrBadInput, t.Name, i, rawValue(t.Datatype, t.Raw, i), bound)
		}
	} else if i := firstNonFinite(t.Datatype, t.Raw); i >= 0 {
		// The decoding path's words (decodeRaw, via badInput).
		return nil, badInput("input %q: %v", t.Name, nonFinite(i, rawValue(t.Datatype, t.Raw, i)))
	}
	d, err := models.DataFromRaw(t.Name, gt.DType, gt.Shape, t.Raw)
	if err != nil {
		return nil, fmt.Errorf("%w: input %q: %w", ErrBadInput, t.Name, err)
	}
	return d, nil
}

// checkONNX is check's value part for an imported model: one input as the
// file has it (float32 [N, C, H, W], or integer token ids [N, Seq]),
// converted into the graph's input by models.ONNXIO.GraphInput, which
// checks every value.
func (m *engModel) checkONNX(req *InferRequest) (*models.Bundle, error) {
	t := req.Inputs[0] // checkAgainst: the one input, named, typed and shaped as the model's
	vals := t.Data
	if t.Raw != nil { // the binary extension's bytes, little-endian
		var err error
		if vals, err = decodeRaw(t.Datatype, int64(len(t.Raw))/max(1, rawSize[t.Datatype]), t.Raw, true); err != nil {
			return nil, fmt.Errorf("%w: input %q: %w", ErrBadInput, t.Name, err)
		}
	}
	b, err := m.onnx.GraphInput(m.graph, vals)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	return b, nil
}
