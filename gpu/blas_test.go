package gpu

import (
	"errors"
	"strings"
	"testing"
)

// A convolution a BLAS cannot take is refused before any device sees it,
// with ErrInvalidLaunch and a message naming what is wrong.
func TestConvCheck(t *testing.T) {
	ok := Conv{N: 2, H: 8, W: 8, C: 16, OutC: 32, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16}
	if err := ok.Check(); err != nil {
		t.Fatalf("%s: %v", ok, err)
	}
	for _, c := range []struct {
		mod  func(*Conv)
		want string
	}{
		{func(c *Conv) { c.N = 0 }, "sizes must be positive"},
		{func(c *Conv) { c.R, c.Pad = 11, 0 }, "filter must fit"},
		{func(c *Conv) { c.Stride = -1 }, "sizes must be positive"},
		{func(c *Conv) { c.In = F32 }, "bf16 or f16"},
		{func(c *Conv) { c.Pass = 7 }, "unknown pass"},
		{func(c *Conv) { c.Split = 2 }, "Split belongs to the filter pass"},
		{func(c *Conv) { c.Pass, c.Split = ConvFilter, 3 }, "must divide N"},
		{func(c *Conv) { c.Pass, c.Bias = ConvData, true }, "belong to the forward pass"},
		{func(c *Conv) { c.Pass, c.Act = ConvFilter, EpiReLU }, "belong to the forward pass"},
		{func(c *Conv) { c.BiasType = 9 }, "unknown bias type"},
		{func(c *Conv) { c.Act = 9 }, "unknown epilogue"},
	} {
		bad := ok
		c.mod(&bad)
		err := bad.Check()
		if !errors.Is(err, ErrInvalidLaunch) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrInvalidLaunch saying %q", bad, err, c.want)
		}
	}
	f := ok
	f.Pass, f.Split = ConvFilter, 2
	if f.OutType() != F32 || ok.OutType() != BF16 {
		t.Errorf("OutType: filter with splits %s, forward %s; want f32 and bf16", f.OutType(), ok.OutType())
	}
	if oh, ow := (Conv{H: 224, W: 224, R: 7, S: 7, Stride: 2, Pad: 3}).Out(); oh != 112 || ow != 112 {
		t.Errorf("conv1's output %dx%d, want 112x112", oh, ow)
	}
}

// A padded A (LdA) must hold a stored row.
func TestMatmulLdA(t *testing.T) {
	m := Matmul{M: 10, N: 8, K: 147, LdA: 152, In: BF16, Out: BF16}
	if err := m.Check(); err != nil || !strings.Contains(m.String(), "lda=152") {
		t.Errorf("%s: %v", m, err)
	}
	m.LdA = 100
	if err := m.Check(); !errors.Is(err, ErrInvalidLaunch) {
		t.Errorf("LdA 100 < K 147: %v, want ErrInvalidLaunch", err)
	}
	m.TransA, m.LdA = true, 8 // A stored [K][M]: rows of M = 10
	if err := m.Check(); !errors.Is(err, ErrInvalidLaunch) {
		t.Errorf("TransA, LdA 8 < M 10: %v, want ErrInvalidLaunch", err)
	}
}
