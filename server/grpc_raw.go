package server

import (
	"encoding/binary"
	"fmt"
	"math"
)

// This file is the raw tensor layout of the gRPC API (raw_input_contents,
// raw_output_contents): elements flattened in row-major order, each in its
// datatype's little-endian fixed-size form, without padding.

// rawSize is each fixed-size datatype's element size in bytes.
var rawSize = map[string]int64{
	"BOOL": 1, "INT8": 1, "UINT8": 1,
	"INT16": 2, "UINT16": 2, "FP16": 2, "BF16": 2,
	"INT32": 4, "UINT32": 4, "FP32": 4,
	"INT64": 8, "UINT64": 8, "FP64": 8,
}

// decodeRaw reads n elements of datatype dt from b, which must hold
// exactly n of them.
func decodeRaw(dt string, n int64, b []byte) ([]float64, error) {
	size, ok := rawSize[dt]
	if !ok {
		return nil, fmt.Errorf("datatype %s has no raw form", dt)
	}
	if int64(len(b)) != n*size {
		return nil, fmt.Errorf("shape needs %d values of %d bytes (%d bytes), raw_input_contents has %d bytes", n, size, n*size, len(b))
	}
	le := binary.LittleEndian
	out := make([]float64, n)
	for i := range out {
		e := b[int64(i)*size : int64(i+1)*size]
		switch dt {
		case "BOOL":
			if e[0] > 1 {
				return nil, fmt.Errorf("value %d: BOOL byte is %d; send 0 or 1", i, e[0])
			}
			out[i] = float64(e[0])
		case "INT8":
			out[i] = float64(int8(e[0]))
		case "UINT8":
			out[i] = float64(e[0])
		case "INT16":
			out[i] = float64(int16(le.Uint16(e)))
		case "UINT16":
			out[i] = float64(le.Uint16(e))
		case "FP16":
			out[i] = fp16ToFloat(le.Uint16(e))
		case "BF16":
			out[i] = float64(math.Float32frombits(uint32(le.Uint16(e)) << 16))
		case "INT32":
			out[i] = float64(int32(le.Uint32(e)))
		case "UINT32":
			out[i] = float64(le.Uint32(e))
		case "FP32":
			out[i] = float64(math.Float32frombits(le.Uint32(e)))
		case "INT64":
			out[i] = float64(int64(le.Uint64(e)))
		case "UINT64":
			out[i] = float64(le.Uint64(e))
		case "FP64":
			out[i] = math.Float64frombits(le.Uint64(e))
		}
	}
	return out, nil
}

// encodeRaw writes data in datatype dt's raw form. Integral values must be
// in range already (encodeOutputs checks them).
func encodeRaw(dt string, data []float64) ([]byte, error) {
	size, ok := rawSize[dt]
	if !ok {
		return nil, fmt.Errorf("datatype %s has no raw form", dt)
	}
	le := binary.LittleEndian
	b := make([]byte, int64(len(data))*size)
	for i, v := range data {
		e := b[int64(i)*size : int64(i+1)*size]
		switch dt {
		case "BOOL":
			if v != 0 {
				e[0] = 1
			}
		case "INT8":
			e[0] = byte(int8(v))
		case "UINT8":
			e[0] = byte(v)
		case "INT16":
			le.PutUint16(e, uint16(int16(v)))
		case "UINT16":
			le.PutUint16(e, uint16(v))
		case "FP16":
			le.PutUint16(e, floatToFP16(v))
		case "BF16":
			le.PutUint16(e, floatToBF16(v))
		case "INT32":
			le.PutUint32(e, uint32(int32(v)))
		case "UINT32":
			le.PutUint32(e, uint32(v))
		case "FP32":
			le.PutUint32(e, math.Float32bits(float32(v)))
		case "INT64":
			le.PutUint64(e, uint64(saturateInt64(v)))
		case "UINT64":
			le.PutUint64(e, saturateUint64(v))
		case "FP64":
			le.PutUint64(e, math.Float64bits(v))
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
