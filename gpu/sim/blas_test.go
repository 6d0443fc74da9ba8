package sim

import (
	"errors"
	"testing"

	"atoll/gpu"
)

// The simulator is a BLAS only when configured as one: then the same
// product gives the same Func, another product another, an invalid one is
// refused; otherwise every product is unsupported and Info names no BLAS.
func TestSimBLAS(t *testing.T) {
	m := gpu.Matmul{M: 8, N: 16, K: 32, In: gpu.BF16, Out: gpu.BF16}
	off, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := off.Matmul(m); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("without Config.BLAS: %v, want errors.ErrUnsupported", err)
	}
	if off.Info().BLAS != "" {
		t.Errorf("Info().BLAS = %q without a BLAS", off.Info().BLAS)
	}
	d, err := New(Config{BLAS: true})
	if err != nil {
		t.Fatal(err)
	}
	f1, err := d.Matmul(m)
	if err != nil {
		t.Fatal(err)
	}
	f2, _ := d.Matmul(m)
	m.TransB = true
	f3, _ := d.Matmul(m)
	if f1 != f2 || f1 == f3 || d.FuncName(f1) == d.FuncName(f3) {
		t.Errorf("Funcs %d %d %d (%q, %q): want the same product once, another product apart", f1, f2, f3, d.FuncName(f1), d.FuncName(f3))
	}
	if _, err := d.Matmul(gpu.Matmul{M: 1, N: 1, K: 1, In: gpu.F32, Out: gpu.F32}); !errors.Is(err, gpu.ErrInvalidLaunch) {
		t.Errorf("f32 inputs: %v, want ErrInvalidLaunch", err)
	}
	if d.Info().BLAS == "" {
		t.Error("Info().BLAS is empty with Config.BLAS")
	}
	// Convolutions the same way.
	c := gpu.Conv{N: 2, H: 8, W: 8, C: 16, OutC: 32, R: 3, S: 3, Stride: 1, Pad: 1, In: gpu.BF16}
	if _, err := off.Conv(c); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("conv without Config.BLAS: %v, want errors.ErrUnsupported", err)
	}
	c1, err := d.Conv(c)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := d.Conv(c)
	c.Pass = gpu.ConvData
	c3, _ := d.Conv(c)
	if c1 != c2 || c1 == c3 || c1 == f1 {
		t.Errorf("conv Funcs %d %d %d (product %d): want the same convolution once, another pass apart", c1, c2, c3, f1)
	}
	c.Bias = true // a data pass has no bias
	if _, err := d.Conv(c); !errors.Is(err, gpu.ErrInvalidLaunch) {
		t.Errorf("a biased data pass: %v, want ErrInvalidLaunch", err)
	}
}
