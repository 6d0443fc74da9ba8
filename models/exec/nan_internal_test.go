package exec

import (
	"encoding/binary"
	"testing"

	"atoll/kernels"
)

// nanBytes fills every element, whatever the count, with its type's quiet
// NaN.
func TestNaNBytes(t *testing.T) {
	for _, d := range []kernels.DType{kernels.F32, kernels.I32, kernels.F16, kernels.BF16} {
		for _, n := range []int{0, 1, 2, 3, 7, 1000, 4099} {
			raw := nanBytes(d, n)
			if len(raw) != n*d.Size() {
				t.Fatalf("%v × %d: %d bytes", d, n, len(raw))
			}
			for i := range n {
				var got, want uint32
				switch d.Size() {
				case 4:
					got, want = binary.LittleEndian.Uint32(raw[4*i:]), 0x7fc00000
				case 2:
					got, want = uint32(binary.LittleEndian.Uint16(raw[2*i:])), 0x7fc0
					if d == kernels.F16 {
						want = 0x7e00
					}
				}
				if got != want {
					t.Fatalf("%v × %d: element %d is %#x, want %#x", d, n, i, got, want)
				}
			}
		}
	}
}
