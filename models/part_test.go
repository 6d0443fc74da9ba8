package models

import (
	"strings"
	"testing"

	"atoll/kernels"
)

// convParts cuts a pass into the fewest power-of-two slices of the images
// whose patches fit, never more than the images, and never cuts a product.
func TestConvParts(t *testing.T) {
	stem := kernels.Conv2D{N: 32, H: 224, W: 224, C: 3, OutC: 64, R: 7, S: 7, Stride: 2, Pad: 3, In: kernels.BF16}
	for _, tc := range []struct {
		c    kernels.Conv2D
		max  int64
		want int
	}{
		{stem, 0, 2},       // 32·112·112·152·2 B = 122 MB over 64 MiB
		{stem, 1 << 40, 1}, // fits
		{stem, 1, 32},      // one image a launch at most
		{kernels.Conv2D{N: 32, H: 56, W: 56, C: 64, OutC: 256, R: 1, S: 1, Stride: 1, In: kernels.BF16}, 1, 1},       // a product
		{kernels.Conv2D{N: 6, H: 56, W: 56, C: 64, OutC: 64, R: 3, S: 3, Stride: 1, Pad: 1, In: kernels.BF16}, 1, 2}, // 6 = 2·3
	} {
		if got := convParts(tc.c, tc.max); got != tc.want {
			t.Errorf("convParts(%s, %d) = %d, want %d", tc.c.Shape(), tc.max, got, tc.want)
		}
	}
}

// The dataflow check refuses a part outside its whole and a sliced tensor
// that does not cut evenly.
func TestGraphCheckParts(t *testing.T) {
	m, err := NewResNet("x", ResNetConfig{Blocks: [4]int{1, 1, 1, 1}, Image: 32, Width: 8, Classes: 10, Train: true, MaxPatchBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Graph(2)
	if err != nil {
		t.Fatal(err)
	}
	at := -1
	for i, l := range g.Layers {
		if l.Part.Of == 2 {
			at = i
			break
		}
	}
	if at < 0 {
		t.Fatal("no layer in two parts")
	}
	for name, tc := range map[string]struct {
		p    Part
		want string
	}{
		"index past the parts": {Part{I: 2, Of: 2}, "is part 2 of 2"},
		"negative index":       {Part{I: -1, Of: 2}, "is part -1 of 2"},
		"uneven slices":        {Part{I: 0, Of: 3}, "does not cut into 3 slices"},
	} {
		bad := *g
		bad.Layers = append([]Layer(nil), g.Layers...)
		bad.Layers[at].Part = tc.p
		if err := bad.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: check = %v, want %q", name, err, tc.want)
		}
	}
}
