package server

import (
	"encoding/binary"
	"fmt"
	"math"
)

// This file is the raw tensor layout shared by the gRPC API
// (raw_input_contents, raw_output_contents) and the REST API's binary
// tensor data extension: elements flattened in row-major order, each in
// its datatype's little-endian fixed-size form, without padding. It is the
// one implementation of that layout; both APIs call it.

// rawSize is each fixed-size datatype's element size in bytes.
var rawSize = map[string]int64{
	"BOOL": 1, "INT8": 1, "UINT8": 1,
	"INT16": 2, "UINT16": 2, "FP16": 2, "BF16": 2,
	"INT32": 4, "UINT32": 4, "FP32": 4,
	"INT64": 8, "UINT64": 8, "FP64": 8,
}

// decodeRaw reads n elements of datatype dt from b, which must hold
// exactly n of them. With finite set (inputs) its values need no
// checkValues: every raw integer is in its type's range, BOOL bytes other
// than 0 and 1 are refused, and so are NaN and infinities (checked on the
// bits, which is cheap). Without it NaN and infinities pass (outputs). The
// datatype is switched on once, outside the element loop: a ResNet-50
// input is 150,528 elements.
func decodeRaw(dt string, n int64, b []byte, finite bool) ([]float64, error) {
	size, ok := rawSize[dt]
	if !ok {
		return nil, fmt.Errorf("datatype %s has no raw form", dt)
	}
	if int64(len(b)) != n*size {
		return nil, fmt.Errorf("shape needs %d values of %d bytes (%d bytes), raw_input_contents has %d bytes", n, size, n*size, len(b))
	}
	le := binary.LittleEndian
	out := make([]float64, n)
	switch dt {
	case "BOOL":
		for i, e := range b {
			if e > 1 {
				return nil, fmt.Errorf("value %d: BOOL byte is %d; send 0 or 1", i, e)
			}
			out[i] = float64(e)
		}
	case "INT8":
		for i, e := range b {
			out[i] = float64(int8(e))
		}
	case "UINT8":
		for i, e := range b {
			out[i] = float64(e)
		}
	case "INT16":
		for i := range out {
			out[i] = float64(int16(le.Uint16(b[2*i:])))
		}
	case "UINT16":
		for i := range out {
			out[i] = float64(le.Uint16(b[2*i:]))
		}
	case "FP16":
		for i := range out {
			h := le.Uint16(b[2*i:])
			if finite && h&0x7c00 == 0x7c00 {
				return nil, nonFinite(i, fp16ToFloat(h))
			}
			out[i] = fp16ToFloat(h)
		}
	case "BF16":
		for i := range out {
			u := uint32(le.Uint16(b[2*i:])) << 16
			if finite && u&0x7f800000 == 0x7f800000 {
				return nil, nonFinite(i, float64(math.Float32frombits(u)))
			}
			out[i] = float64(math.Float32frombits(u))
		}
	case "INT32":
		for i := range out {
			out[i] = float64(int32(le.Uint32(b[4*i:])))
		}
	case "UINT32":
		for i := range out {
			out[i] = float64(le.Uint32(b[4*i:]))
		}
	case "FP32":
		for i := range out {
			u := le.Uint32(b[4*i:])
			if finite && u&0x7f800000 == 0x7f800000 {
				return nil, nonFinite(i, float64(math.Float32frombits(u)))
			}
			out[i] = float64(math.Float32frombits(u))
		}
	case "INT64":
		for i := range out {
			out[i] = float64(int64(le.Uint64(b[8*i:])))
		}
	case "UINT64":
		for i := range out {
			out[i] = float64(le.Uint64(b[8*i:]))
		}
	case "FP64":
		for i := range out {
			u := le.Uint64(b[8*i:])
			if finite && u&0x7ff0000000000000 == 0x7ff0000000000000 {
				return nil, nonFinite(i, math.Float64frombits(u))
			}
			out[i] = math.Float64frombits(u)
		}
	}
	return out, nil
}

func nonFinite(i int, v float64) error {
	return fmt.Errorf("value %d is %v; send finite values", i, v)
}

// checkValues checks decoded input values against their datatype: finite,
// integral for the integer types, and in range. Values decoded from raw
// bytes can only fail the first check (an FP16/BF16/FP32/FP64 NaN or
// infinity); values from gRPC contents can fail any.
func checkValues(dt string, data []float64) error {
	rng := datatypes[dt]
	for j, v := range data {
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			return fmt.Errorf("value %d is %v; send finite values", j, v)
		case rng.integral && v != math.Trunc(v):
			return fmt.Errorf("value %d: %v is not an integer, and the datatype is %s", j, v, dt)
		case v < rng.min || v > rng.max:
			return fmt.Errorf("value %d: %v is out of range for %s", j, v, dt)
		}
	}
	return nil
}

// checkOutput checks an engine's output before it is encoded: a datatype
// the protocol has, and for the integer types integral values in range
// (appendRaw and the contents encoders rely on that).
func checkOutput(t Tensor) error {
	rng, known := datatypes[t.Datatype]
	if !known {
		return fmt.Errorf("%w: output %q has datatype %q, which the protocol cannot carry", ErrInternal, t.Name, t.Datatype)
	}
	if rng.integral {
		for j, v := range t.Data {
			if v != math.Trunc(v) || v < rng.min || v > rng.max {
				return fmt.Errorf("%w: output %q value %d is %v, which %s cannot hold", ErrInternal, t.Name, j, v, t.Datatype)
			}
		}
	}
	return nil
}

// encodeRaw writes data in datatype dt's raw form. Integral values must be
// in range already (checkOutput checks them).
func encodeRaw(dt string, data []float64) ([]byte, error) {
	size, ok := rawSize[dt]
	if !ok {
		return nil, fmt.Errorf("datatype %s has no raw form", dt)
	}
	return appendRaw(make([]byte, 0, int64(len(data))*size), dt, data)
}

// appendRaw appends data in datatype dt's raw form to b.
func appendRaw(b []byte, dt string, data []float64) ([]byte, error) {
	size, ok := rawSize[dt]
	if !ok {
		return nil, fmt.Errorf("datatype %s has no raw form", dt)
	}
	start := len(b)
	b = append(b, make([]byte, int64(len(data))*size)...)
	e := b[start:]
	le := binary.LittleEndian
	switch dt {
	case "BOOL":
		for i, v := range data {
			if v != 0 {
				e[i] = 1
			}
		}
	case "INT8":
		for i, v := range data {
			e[i] = byte(int8(v))
		}
	case "UINT8":
		for i, v := range data {
			e[i] = byte(v)
		}
	case "INT16":
		for i, v := range data {
			le.PutUint16(e[2*i:], uint16(int16(v)))
		}
	case "UINT16":
		for i, v := range data {
			le.PutUint16(e[2*i:], uint16(v))
		}
	case "FP16":
		for i, v := range data {
			le.PutUint16(e[2*i:], floatToFP16(v))
		}
	case "BF16":
		for i, v := range data {
			le.PutUint16(e[2*i:], floatToBF16(v))
		}
	case "INT32":
		for i, v := range data {
			le.PutUint32(e[4*i:], uint32(int32(v)))
		}
	case "UINT32":
		for i, v := range data {
			le.PutUint32(e[4*i:], uint32(v))
		}
	case "FP32":
		for i, v := range data {
			le.PutUint32(e[4*i:], math.Float32bits(float32(v)))
		}
	case "INT64":
		for i, v := range data {
			le.PutUint64(e[8*i:], uint64(saturateInt64(v)))
		}
	case "UINT64":
		for i, v := range data {
			le.PutUint64(e[8*i:], saturateUint64(v))
		}
	case "FP64":
		for i, v := range data {
			le.PutUint64(e[8*i:], math.Float64bits(v))
		}
	}
	return b, nil
}

// fp16ToFloat decodes an IEEE 754 binary16 value.
func fp16ToFloat(h uint16) float64 {
	exp, frac := int(h>>10)&0x1f, float64(h&0x3ff)
	var v float64
	switch exp {
	case 0: // zero or subnormal: frac * 2^-24
		v = math.Ldexp(frac, -24)
	case 0x1f:
		v = math.Inf(1)
		if frac != 0 {
			v = math.NaN()
		}
	default: // (1024 + frac) * 2^(exp-25)
		v = math.Ldexp(1024+frac, exp-25)
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

// floatToFP16 encodes v as IEEE 754 binary16, rounding to nearest even;
// magnitudes past the largest half round to infinity.
func floatToFP16(v float64) uint16 {
	var sign uint16
	if math.Signbit(v) {
		sign, v = 0x8000, -v
	}
	switch {
	case math.IsNaN(v):
		return 0x7e00
	case v >= 65520: // halfway between 65504 and 2^16 rounds to infinity
		return sign | 0x7c00
	case v < 0x1p-14: // subnormal; 1024 rounds up into the smallest normal
		return sign | uint16(math.RoundToEven(v*0x1p24))
	}
	frac, exp := math.Frexp(v) // v = frac * 2^exp, frac in [0.5, 1)
	e := exp - 1
	m := math.RoundToEven((2*frac - 1) * 1024)
	if m == 1024 {
		m, e = 0, e+1
	}
	return sign | uint16(e+15)<<10 | uint16(m)
}

// floatToBF16 encodes v as bfloat16 (the top half of its float32),
// rounding the float32 to nearest even.
func floatToBF16(v float64) uint16 {
	f := math.Float32bits(float32(v))
	if math.IsNaN(v) {
		return uint16(f>>16) | 0x40
	}
	return uint16((f + 0x7fff + (f>>16)&1) >> 16)
}
