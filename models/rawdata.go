package models

import (
	"errors"
	"fmt"
	"slices"

	"atoll/kernels"
)

// ErrRawData: bytes that cannot be a tensor of the given type and shape
// (their length is not the shape's elements times the type's size).
var ErrRawData = errors.New("models: raw tensor data does not fit its shape")

// DataFromRaw makes a tensor of raw bytes already in dt's storage form
// (little-endian, row-major: what NewData would encode), without decoding
// them. The Data takes ownership of raw: it does not copy it, so the
// caller must not modify raw afterwards. Values are not checked (NaN and
// out-of-range integers pass); the error wraps ErrRawData when raw's
// length is not the shape's elements times dt's size.
func DataFromRaw(name string, dt kernels.DType, shape []int, raw []byte) (*Data, error) {
	d := &Data{Name: name, DType: dt, Shape: slices.Clone(shape), Raw: raw}
	if size := dt.Size(); size <= 0 || len(raw) != d.Elems()*size {
		return nil, fmt.Errorf("%w: tensor %q: %d bytes, but shape %v of %s needs %d × %d; send the elements in %s's raw form", ErrRawData, name, len(raw), shape, dt, d.Elems(), size, dt)
	}
	return d, nil
}
