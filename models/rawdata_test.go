package models

import (
	"bytes"
	"errors"
	"testing"

	"atoll/kernels"
)

// DataFromRaw keeps the bytes NewData would encode, without copying them,
// and refuses a length that does not fit the shape.
func TestDataFromRaw(t *testing.T) {
	for _, dt := range []kernels.DType{kernels.BF16, kernels.F16, kernels.F32, kernels.I32} {
		vals := []float64{1, -2.5, 0, 3.25, -0.125, 7}
		if dt == kernels.I32 {
			vals = []float64{1, -2, 0, 3, -1 << 31, 1<<31 - 1}
		}
		want := NewData("x", dt, []int{2, 3}, vals)
		raw := bytes.Clone(want.Raw)
		d, err := DataFromRaw("x", dt, []int{2, 3}, raw)
		if err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		if !bytes.Equal(d.Raw, want.Raw) || &d.Raw[0] != &raw[0] || d.Elems() != 6 {
			t.Fatalf("%s: Raw %v (shared %v), want %v", dt, d.Raw, &d.Raw[0] == &raw[0], want.Raw)
		}
		for i, v := range d.Values() {
			if v != vals[i] {
				t.Fatalf("%s: value %d is %v, want %v", dt, i, v, vals[i])
			}
		}
		if _, err := DataFromRaw("x", dt, []int{2, 3}, raw[:len(raw)-1]); !errors.Is(err, ErrRawData) {
			t.Fatalf("%s: a short buffer: %v, want ErrRawData", dt, err)
		}
	}
}
