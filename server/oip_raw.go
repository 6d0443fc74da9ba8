package server

import (
	"bytes"
	"encoding/binary"
	"math"
)

// This file is the raw fast path for request inputs: binary tensor data
// (REST) and raw_input_contents (gRPC) whose datatype is the model input's
// storage type go to the engine as bytes (Tensor.Raw), checked on their
// bit patterns, instead of being decoded to float64, checked, and encoded
// back to the same bytes for the device.

// rawStorage are the datatypes a model input can be stored in on the
// device (kernels' F32, F16, BF16, I32): the ones whose raw bytes are the
// device's bytes.
var rawStorage = map[string]bool{"FP32": true, "FP16": true, "BF16": true, "INT32": true}

// rawFast reports whether an input of datatype dt goes to the engine as
// raw bytes: the engine takes raw inputs (RawInputs), dt is a storage
// type, and it is the model input's datatype (a mismatch keeps the
// decoding path, whose error names both datatypes).
func rawFast(accepts bool, info ModelInfo, name, dt string) bool {
	if !accepts || !rawStorage[dt] {
		return false
	}
	ti, ok := findTensor(info.Inputs, name)
	return ok && ti.Datatype == dt
}

// ownRaw is the one copy of a raw input out of a request buffer that will
// be reused (the REST API's pooled body): the Tensor owns the copy. It is
// never nil (Raw != nil marks a raw tensor, even an empty one).
func ownRaw(b []byte) []byte {
	if len(b) == 0 {
		return []byte{}
	}
	return bytes.Clone(b) // append to a fresh slice: no zeroing before the copy
}

// SWAR masks: for each lane, exponent mask + (lowest exponent bit) sets the
// lane's top bit exactly when the exponent is all ones (NaN or infinity).
// A lane never carries into the next one: the sum is at most the top bit.
const (
	bf16ExpMask = 0x7f807f807f807f80
	bf16ExpOne  = 0x0080008000800080
	fp16ExpMask = 0x7c007c007c007c00
	fp16ExpOne  = 0x0400040004000400
	fp32ExpMask = 0x7f8000007f800000
	fp32ExpOne  = 0x0080000000800000
	top16       = 0x8000800080008000
	top32       = 0x8000000080000000
)

// firstNonFinite is the index of the first NaN or infinity among the
// elements of b (raw FP16, BF16 or FP32), or -1 if all are finite (also
// for any other datatype). It tests 16 elements of 16 bits (8 of FP32) per
// step on the bit patterns, then finds the element with a scalar scan.
func firstNonFinite(dt string, b []byte) int {
	var mask, one, top uint64
	size := 2
	switch dt {
	case "BF16":
		mask, one, top = bf16ExpMask, bf16ExpOne, top16
	case "FP16":
		mask, one, top = fp16ExpMask, fp16ExpOne, top16
	case "FP32":
		mask, one, top, size = fp32ExpMask, fp32ExpOne, top32, 4
	default:
		return -1
	}
	le := binary.LittleEndian
	i := 0
	for ; i+32 <= len(b); i += 32 {
		w := b[i : i+32 : i+32]
		hit := ((le.Uint64(w[0:])&mask)+one)&top |
			((le.Uint64(w[8:])&mask)+one)&top |
			((le.Uint64(w[16:])&mask)+one)&top |
			((le.Uint64(w[24:])&mask)+one)&top
		if hit != 0 {
			break
		}
	}
	for ; i+size <= len(b); i += size {
		var nonFinite bool
		if size == 2 {
			h := uint64(le.Uint16(b[i:]))
			nonFinite = ((h&mask)+one)&top != 0
		} else {
			u := uint64(le.Uint32(b[i:]))
			nonFinite = ((u&mask)+one)&top != 0
		}
		if nonFinite {
			return i / size
		}
	}
	return -1
}

// rawValue is element i of raw b of a storage datatype, as float64 (for
// error messages).
func rawValue(dt string, b []byte, i int) float64 {
	le := binary.LittleEndian
	switch dt {
	case "BF16":
		return float64(math.Float32frombits(uint32(le.Uint16(b[2*i:])) << 16))
	case "FP16":
		return fp16ToFloat(le.Uint16(b[2*i:]))
	case "FP32":
		return float64(math.Float32frombits(le.Uint32(b[4*i:])))
	case "INT32":
		return float64(int32(le.Uint32(b[4*i:])))
	}
	return math.NaN()
}

// firstOutOfRange is the index of the first raw INT32 element of b outside
// [0, bound), or -1.
func firstOutOfRange(b []byte, bound int) int {
	le := binary.LittleEndian
	ub := uint32(max(0, min(bound, math.MaxInt32)))
	for i := 0; i+4 <= len(b); i += 4 {
		if le.Uint32(b[i:]) >= ub { // negative int32s are >= 2^31 as uint32
			return i / 4
		}
	}
	return -1
}
