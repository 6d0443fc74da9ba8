package kernels

import (
	"errors"
	"testing"

	"atoll/gpu"
	"atoll/gpu/faulty"
	"atoll/gpu/sim"
)

// blasOps are ops the library hands to a BLAS, in every layout it asks for.
func blasOps() []Op {
	return []Op{
		GEMM{M: 20, N: 13, K: 7, In: BF16, Out: BF16},
		GEMM{M: 9, N: 24, K: 16, In: F16, Out: F32, Bias: true, Act: ActGELU},
		GEMM{M: 6, N: 10, K: 12, Batch: 3, In: BF16, Out: BF16, Bias: true, BiasType: BF16, Act: ActReLU},
		GEMM{M: 7, N: 16, K: 9, In: F16, Out: F16, Bias: true, BiasType: F16, Act: ActGELU},
		Conv2D{N: 2, H: 3, W: 4, C: 8, OutC: 12, R: 1, S: 1, Stride: 1, In: BF16, Bias: true, BiasType: BF16, Act: ActReLU, Residual: true},
		Conv2D{N: 2, H: 3, W: 4, C: 8, OutC: 12, R: 1, S: 1, In: BF16, Residual: true},
		Conv2D{N: 2, H: 3, W: 4, C: 8, OutC: 12, R: 1, S: 1, Stride: 1, In: BF16, BackwardData: true},
		Conv2D{N: 2, H: 3, W: 4, C: 8, OutC: 12, R: 1, S: 1, Stride: 1, In: F16, BackwardFilter: true},
		Conv2D{N: 4, H: 3, W: 2, C: 8, OutC: 12, R: 1, S: 1, Stride: 1, In: BF16, BackwardFilter: true, Split: 2},
	}
}

// naiveMatmul computes m over host values as gpu.Matmul documents it.
func naiveMatmul(m gpu.Matmul, a, b, bias, c []float64, act func(float64) float64) []float64 {
	batch := max(m.Batch, 1)
	sA, sB, sD := int64(m.M*m.K), int64(m.K*m.N), int64(m.M*m.N)
	if batch > 1 {
		sA, sB, sD = m.StrideA, m.StrideB, m.StrideD
	}
	d := make([]float64, int64(batch)*sD)
	for z := range int64(batch) {
		for i := range m.M {
			for j := range m.N {
				var s float64
				for k := range m.K {
					ai, bi := i*m.K+k, k*m.N+j
					if m.TransA {
						ai = k*m.M + i
					}
					if m.TransB {
						bi = j*m.K + k
					}
					s += a[z*sA+int64(ai)] * b[z*sB+int64(bi)]
				}
				if m.Bias {
					s += bias[j]
				}
				di := z*sD + int64(i*m.N+j)
				if m.Accumulate {
					s += c[di]
				}
				d[di] = act(s)
			}
		}
	}
	return d
}

// The product matmulOf hands a BLAS computes what the op's CPU reference
// computes, from the operands it names: layouts, transposes, strides,
// bias, residual and activation all agree.
func TestMatmulOfMatchesReference(t *testing.T) {
	dev, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for i, op := range blasOps() {
		m, at, ok := matmulOf(op)
		if !ok {
			t.Fatalf("op %d (%s %s) is not covered", i, op.Kernel(), op.Shape())
		}
		if err := m.Check(); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		b, err := Alloc(dev, op, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		ref, err := Reference(op, b)
		if err != nil {
			t.Fatal(err)
		}
		host := func(j int) []float64 {
			if j < 0 {
				return nil
			}
			return b.T[j].Host
		}
		var a Act
		switch o := op.(type) {
		case GEMM:
			a = o.Act
		case Conv2D:
			a = o.Act
		}
		got := naiveMatmul(m, host(at[0]), host(at[1]), host(at[3]), host(at[4]), func(x float64) float64 { return act(x, a) })
		out := b.T[at[2]]
		if out.Role != Output || len(ref) != 1 || len(ref[0]) != len(got) {
			t.Fatalf("op %d: D is tensor %d (%s, role %v) of %d values; the reference has %d outputs", i, at[2], out.Name, out.Role, len(got), len(ref))
		}
		if e := RelErr(got, ref[0]); e > 1e-12 {
			t.Errorf("op %d (%s %s as %s): relative error %.3g against the reference", i, op.Kernel(), op.Shape(), m, e)
		}
	}
}

func blasLibrary(t *testing.T, cfg sim.Config) (*sim.Device, *Library) {
	t.Helper()
	dev, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev, New(dev)
}

// plainLaunch allocates op's buffers on dev and builds its whole Plain
// launch with lib.
func plainLaunch(t *testing.T, dev gpu.Device, lib *Library, op Op) (*gpu.Launch, Buffers) {
	t.Helper()
	b, err := Alloc(dev, op, 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lib.Launch(op, gpu.Plain, b, Control{})
	if err != nil {
		t.Fatal(err)
	}
	return l, b
}

// Whole Plain launches of covered ops go to the BLAS with their operands in
// MatmulArgs order; every other launch, op and setting keeps the library's
// own kernels.
func TestLibraryUsesTheBLAS(t *testing.T) {
	dev, lib := blasLibrary(t, sim.Config{BLAS: true})
	conv := Conv2D{N: 2, H: 8, W: 8, C: 8, OutC: 136, R: 1, S: 1, Stride: 1, In: BF16, Bias: true, BiasType: BF16, Act: ActReLU, Residual: true}
	l, b := plainLaunch(t, dev, lib, conv)
	if !IsBLAS(l) || dev.FuncName(l.Func) == "" {
		t.Fatalf("launch %q (func %q) is not on the BLAS", l.Name, dev.FuncName(l.Func))
	}
	var want gpu.Args
	gpu.MatmulArgs(&want, b.T[0].Ptr, b.T[1].Ptr, b.T[2].Ptr, b.T[3].Ptr, b.T[4].Ptr)
	if string(l.Args.Bytes()) != string(want.Bytes()) {
		t.Errorf("arguments % x, want X, W, Y, bias, resid: % x", l.Args.Bytes(), want.Bytes())
	}
	if l.Form != gpu.Plain || l.Grid.Count() == 0 || l.Cost.FLOPs != conv.FLOPs() {
		t.Errorf("launch %+v: want Plain with the op's grid and cost", l)
	}
	if n, why := lib.BLASOps(); n != 1 || why != nil {
		t.Errorf("BLASOps = %d, %v; want 1, nil", n, why)
	}
	words, err := dev.NewHostWords(2)
	if err != nil {
		t.Fatal(err)
	}
	counter, err := dev.Alloc(CounterBytes)
	if err != nil {
		t.Fatal(err)
	}
	for name, launch := range map[string]func() (*gpu.Launch, error){
		"reset": func() (*gpu.Launch, error) { return lib.Launch(conv, gpu.Reset, b, Control{Flag: words[0]}) },
		"resumable": func() (*gpu.Launch, error) {
			return lib.Launch(conv, gpu.Resumable, b, Control{Flag: words[0], Counter: counter, Done: words[1]})
		},
		"sliced": func() (*gpu.Launch, error) { return lib.Launch(conv, gpu.Plain, b, Control{Blocks: 1}) },
	} {
		l, err := launch()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if IsBLAS(l) {
			t.Errorf("%s launch %q went to the BLAS", name, l.Name)
		}
	}
	for _, op := range []Op{
		GEMM{M: 8, N: 8, K: 8, In: BF16, Out: BF16, Act: ActReLU6},
		Conv2D{N: 1, H: 5, W: 5, C: 8, OutC: 8, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16, Act: ActReLU6},
		LayerNorm{Rows: 4, Cols: 64, In: BF16},
	} {
		if l, _ := plainLaunch(t, dev, lib, op); IsBLAS(l) {
			t.Errorf("%s %s went to the BLAS", op.Kernel(), op.Shape())
		}
	}
	// Convolutions that are not products run on the BLAS as convolutions.
	for _, op := range []Op{
		Conv2D{N: 1, H: 5, W: 5, C: 8, OutC: 8, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16},
		Conv2D{N: 1, H: 6, W: 6, C: 8, OutC: 8, R: 1, S: 1, Stride: 2, In: BF16},
	} {
		if l, _ := plainLaunch(t, dev, lib, op); !IsBLAS(l) {
			t.Errorf("%s %s did not go to the BLAS", op.Kernel(), op.Shape())
		}
	}
	lib.NoBLAS = true
	if l, err := lib.Launch(conv, gpu.Plain, b, Control{}); err != nil || IsBLAS(l) {
		t.Errorf("NoBLAS: launch %v, %v; want the own kernel", l, err)
	}
}

// A device without a BLAS, or one that refuses a product, leaves the op on
// the library's own kernel and says why; a failing BLAS call fails the
// launch.
func TestLibraryWithoutTheBLAS(t *testing.T) {
	dev, lib := blasLibrary(t, sim.Config{})
	op := GEMM{M: 20, N: 13, K: 7, In: BF16, Out: BF16}
	if l, _ := plainLaunch(t, dev, lib, op); IsBLAS(l) {
		t.Fatalf("launch %q went to a BLAS the device does not have", l.Name)
	}
	if n, why := lib.BLASOps(); n != 0 || !errors.Is(why, errors.ErrUnsupported) {
		t.Errorf("BLASOps = %d, %v; want 0 and the device's refusal", n, why)
	}

	inner, _ := blasLibrary(t, sim.Config{BLAS: true})
	fd := faulty.New(inner)
	fd.FailMethod("Matmul", 1)
	flib := New(fd)
	fb, err := Alloc(fd, op, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := flib.Launch(op, gpu.Plain, fb, Control{}); !errors.Is(err, gpu.ErrDriver) {
		t.Errorf("a failing Matmul gave %v; want the driver error", err)
	}
	if l, err := flib.Launch(op, gpu.Plain, fb, Control{}); err != nil || !IsBLAS(l) {
		t.Errorf("after the failure: %v, %v; want the BLAS launch", l, err)
	}
	// A failing Conv the same way.
	conv := Conv2D{N: 1, H: 5, W: 5, C: 8, OutC: 8, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16}
	fd.FailMethod("Conv", 1)
	cb, err := Alloc(fd, conv, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := flib.Launch(conv, gpu.Plain, cb, Control{}); !errors.Is(err, gpu.ErrDriver) {
		t.Errorf("a failing Conv gave %v; want the driver error", err)
	}
	if l, err := flib.Launch(conv, gpu.Plain, cb, Control{}); err != nil || !IsBLAS(l) {
		t.Errorf("after the failure: %v, %v; want the BLAS launch", l, err)
	}
}

// The convolution convOf hands a BLAS names the op's tensors in the roles
// and sizes gpu.Conv gives them, and carries the op's geometry, pass,
// split and forward epilogue; products matmulOf covers are not asked again.
func TestConvOfNamesTheOperands(t *testing.T) {
	ops := []Conv2D{
		{N: 2, H: 9, W: 9, C: 8, OutC: 16, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16},
		{N: 2, H: 9, W: 9, C: 8, OutC: 16, R: 3, S: 3, Stride: 2, Pad: 1, In: BF16, Bias: true, BiasType: BF16, Act: ActReLU, Residual: true},
		{N: 2, H: 12, W: 12, C: 3, OutC: 8, R: 7, S: 7, Stride: 2, Pad: 3, In: BF16},
		{N: 2, H: 9, W: 9, C: 8, OutC: 16, R: 3, S: 3, Stride: 2, Pad: 1, In: BF16, BackwardData: true},
		{N: 2, H: 8, W: 8, C: 8, OutC: 8, R: 1, S: 1, Stride: 2, In: F16, BackwardData: true},
		{N: 4, H: 9, W: 9, C: 8, OutC: 16, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16, BackwardFilter: true},
		{N: 4, H: 9, W: 9, C: 8, OutC: 16, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16, BackwardFilter: true, Split: 2},
	}
	for i, op := range ops {
		c, at, ok := convOf(op)
		if !ok {
			t.Fatalf("op %d (%s) is not covered", i, op.Shape())
		}
		if err := c.Check(); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		oh, ow := op.Out()
		if c2h, c2w := c.Out(); c2h != oh || c2w != ow || c.R != op.R || c.Pad != op.Pad || c.Split != op.Split || c.Bias != op.Bias || c.Accumulate != op.Residual {
			t.Fatalf("op %d: %s for %s", i, c, op.Shape())
		}
		x, w, y := c.N*c.H*c.W*c.C, c.R*c.S*c.C*c.OutC, c.N*oh*ow*c.OutC
		want := map[gpu.ConvPass][3]int{gpu.ConvForward: {x, w, y}, gpu.ConvData: {y, w, x}, gpu.ConvFilter: {x, y, w * max(c.Split, 1)}}[c.Pass]
		ts, err := Tensors(op)
		if err != nil {
			t.Fatal(err)
		}
		for j, n := range want {
			if got := ts[at[j]].Elems; got != n {
				t.Errorf("op %d (%s): operand %d is tensor %d (%s) of %d values, want %d", i, c, j, at[j], ts[at[j]].Name, got, n)
			}
		}
		if ts[at[2]].Role != Output {
			t.Errorf("op %d: D is tensor %d (%s), not the output", i, at[2], ts[at[2]].Name)
		}
		if op.Residual && ts[at[4]].Elems != y {
			t.Errorf("op %d: the residual is tensor %d of %d values, want %d", i, at[4], ts[at[4]].Elems, y)
		}
		if op.Bias && ts[at[3]].Elems != c.OutC {
			t.Errorf("op %d: the bias is tensor %d of %d values, want %d", i, at[3], ts[at[3]].Elems, c.OutC)
		}
	}
	for _, op := range blasOps() {
		if _, _, ok := convOf(op); ok {
			if _, _, mm := matmulOf(op); mm {
				continue // a 1x1 product: matmulOf answers first
			}
			t.Errorf("%s is a convolution for the BLAS and not a product", op.Shape())
		}
	}
}
