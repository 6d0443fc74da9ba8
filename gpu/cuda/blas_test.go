package cuda

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"atoll/gpu"
)

func TestBLASMissingLibrarySaysWhatToDo(t *testing.T) {
	_, err := openBLAS([]string{"libcublasLt-does-not-exist.so.99"})
	if err == nil {
		t.Fatal("opened a library that does not exist")
	}
	if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, ErrNoBLAS) {
		t.Errorf("error %v does not wrap errors.ErrUnsupported and ErrNoBLAS (callers fall back on it)", err)
	}
	for _, want := range []string{BLASEnv + "=/path", BLASEnv + "=off", "libcublasLt-does-not-exist.so.99"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestBLASErrors(t *testing.T) {
	ns := &BLASError{Call: "cublasLtMatmulAlgoGetHeuristic", Status: blasStatusNotSupp}
	if !errors.Is(ns, errors.ErrUnsupported) || !errors.Is(ns, gpu.ErrDriver) {
		t.Errorf("%v: NOT_SUPPORTED must read as unsupported and as a driver error", ns)
	}
	inv := &BLASError{Call: "cublasLtMatmul", Status: blasStatusInvalid, Hint: "x"}
	if errors.Is(inv, errors.ErrUnsupported) || !errors.Is(inv, gpu.ErrDriver) {
		t.Errorf("%v: INVALID_VALUE is a driver error, not a refusal", inv)
	}
	if got := inv.Error(); !strings.Contains(got, "CUBLAS_STATUS_INVALID_VALUE (7)") || !strings.Contains(got, "cublasLtMatmul") {
		t.Errorf("error text %q", got)
	}
	if err := blasCheck("x", 0, ""); err != nil {
		t.Errorf("status 0 gave %v", err)
	}
}

func bf16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

func bf16Value(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }

// matmulCase runs m on the GPU through launch (Launch, a graph, a
// partition's stream) and checks D against a float64 product of the same
// bf16 inputs.
func checkMatmul(t *testing.T, d *Device, m gpu.Matmul, launch func(l *gpu.Launch)) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(m.M), uint64(m.N)))
	batch := max(m.Batch, 1)
	sA, sB, sD := int64(m.M*m.K), int64(m.K*m.N), int64(m.M*m.N)
	if batch > 1 {
		sA, sB, sD = m.StrideA, m.StrideB, m.StrideD
	}
	fill := func(n int64) ([]float64, []byte) {
		v, raw := make([]float64, n), make([]byte, 2*n)
		for i := range v {
			h := bf16Bits(float32(rng.Float64()*2 - 1))
			v[i] = bf16Value(h)
			binary.LittleEndian.PutUint16(raw[2*i:], h)
		}
		return v, raw
	}
	a, araw := fill(sA * int64(batch))
	b, braw := fill(sB * int64(batch))
	c, craw := fill(sD * int64(batch))
	bias := make([]float64, m.N)
	braw32 := make([]byte, 4*m.N)
	if m.BiasType == gpu.BF16 {
		braw32 = braw32[:2*m.N]
	}
	for i := range bias {
		f := float32(rng.Float64() - 0.5)
		if m.BiasType == gpu.BF16 {
			h := bf16Bits(f)
			bias[i] = bf16Value(h)
			binary.LittleEndian.PutUint16(braw32[2*i:], h)
			continue
		}
		bias[i] = float64(f)
		binary.LittleEndian.PutUint32(braw32[4*i:], math.Float32bits(f))
	}
	up := func(raw []byte) gpu.Ptr {
		p, err := d.Alloc(int64(len(raw)))
		must(t, err)
		must(t, d.CopyToDevice(p, raw))
		return p
	}
	pa, pb, pc, pbias := up(araw), up(braw), up(craw), up(braw32)
	outSize := 2
	if m.Out == gpu.F32 {
		outSize = 4
	}
	pd, err := d.Alloc(sD * int64(batch) * int64(outSize))
	must(t, err)
	f, err := d.Matmul(m)
	must(t, err)
	l := &gpu.Launch{Name: "matmul", Func: f, Grid: gpu.D1(1), Block: gpu.D1(128)}
	var pbArg, pcArg gpu.Ptr
	if m.Bias {
		pbArg = pbias
	}
	if m.Accumulate {
		pcArg = pc
	}
	gpu.MatmulArgs(&l.Args, pa, pb, pd, pbArg, pcArg)
	launch(l)
	out := make([]byte, sD*int64(batch)*int64(outSize))
	must(t, d.CopyFromDevice(out, pd))
	var worst, scale float64
	for z := range batch {
		for i := range m.M {
			for j := range m.N {
				var s float64
				for k := range m.K {
					ai := int64(i*m.K + k)
					if m.TransA {
						ai = int64(k*m.M + i)
					}
					bi := int64(k*m.N + j)
					if m.TransB {
						bi = int64(j*m.K + k)
					}
					s += a[int64(z)*sA+ai] * b[int64(z)*sB+bi]
				}
				di := int64(z)*sD + int64(i*m.N+j)
				if m.Bias {
					s += bias[j]
				}
				if m.Accumulate {
					s += c[di]
				}
				if m.Act == gpu.EpiReLU {
					s = max(s, 0)
				}
				var got float64
				if m.Out == gpu.F32 {
					got = float64(math.Float32frombits(binary.LittleEndian.Uint32(out[4*di:])))
				} else {
					got = bf16Value(binary.LittleEndian.Uint16(out[2*di:]))
				}
				worst = max(worst, math.Abs(got-s))
				scale = max(scale, math.Abs(s))
			}
		}
	}
	bound := 1e-4
	if m.Out != gpu.F32 {
		bound = 1.0 / 128
	}
	if rel := worst / scale; !(rel <= bound) {
		t.Errorf("%s: max error %.3g of max |D| %.3g (relative %.3g > %.3g)", m, worst, scale, rel, bound)
	}
	for _, p := range []gpu.Ptr{pa, pb, pc, pbias, pd} {
		must(t, d.Free(p))
	}
}

// onStream runs a launch on st to completion.
func onStream(t *testing.T, d *Device, st gpu.Stream) func(*gpu.Launch) {
	return func(l *gpu.Launch) {
		must(t, d.Launch(st, l))
		must(t, d.Synchronize())
	}
}

// inGraph runs a launch as a one-step CUDA graph replayed on s, to
// completion.
func inGraph(t *testing.T, d *Device, s gpu.Stream) func(*gpu.Launch) {
	e, err := d.NewEvent()
	must(t, err)
	return func(l *gpu.Launch) {
		g, err := d.NewGraph(s, []gpu.GraphStep{{Launch: l, Event: e}})
		must(t, err)
		must(t, d.LaunchGraph(g, s))
		must(t, d.Synchronize())
		must(t, d.DestroyGraph(g))
	}
}

// onPartition calls check with launches on a stream of a 64-SM partition
// (a green context), where the device makes one.
func onPartition(t *testing.T, d *Device, check func(launch func(*gpu.Launch))) {
	if err := gpu.CheckPartition(d.Info().Spec, 64); err != nil {
		return
	}
	c, err := d.NewPartition(64)
	if err != nil {
		t.Logf("no partition here (%v): skipped", err)
		return
	}
	ps, err := d.NewStream(gpu.StreamOptions{Context: c, Priority: d.Info().Priorities.Least})
	must(t, err)
	check(onStream(t, d, ps))
	must(t, d.DestroyStream(ps))
}

// cuBLASLt's products match a float64 product of the same inputs, for every
// operand layout the kernels library asks for, launched on a stream, from a
// CUDA graph and on a green context's stream.
func TestGPUMatmul(t *testing.T) {
	d := openGPUWithBLAS(t)
	t.Logf("BLAS: %s", d.BLASName())
	s, err := d.NewStream(gpu.StreamOptions{Priority: d.Info().Priorities.Least})
	must(t, err)
	cases := []gpu.Matmul{
		{M: 70, N: 48, K: 96, In: gpu.BF16, Out: gpu.F32},
		{M: 70, N: 48, K: 96, In: gpu.BF16, Out: gpu.BF16, Act: gpu.EpiReLU, Accumulate: true},
		{M: 70, N: 48, K: 96, In: gpu.BF16, Out: gpu.F32, Bias: true, Act: gpu.EpiReLU},
		{M: 70, N: 48, K: 96, In: gpu.BF16, Out: gpu.BF16, Bias: true, BiasType: gpu.BF16, Act: gpu.EpiReLU, Accumulate: true},
		{M: 96, N: 40, K: 72, TransB: true, In: gpu.BF16, Out: gpu.BF16},
		{M: 40, N: 56, K: 200, TransA: true, In: gpu.BF16, Out: gpu.F32},
		{M: 40, N: 56, K: 100, TransA: true, In: gpu.BF16, Out: gpu.F32, Batch: 2, StrideA: 100 * 40, StrideB: 100 * 56, StrideD: 40 * 56},
	}
	for _, m := range cases {
		checkMatmul(t, d, m, onStream(t, d, s))
	}
	// The same product twice in a row is the same Func.
	f1, err := d.Matmul(cases[0])
	must(t, err)
	f2, err := d.Matmul(cases[0])
	must(t, err)
	if f1 != f2 {
		t.Errorf("the same product gave Funcs %d and %d", f1, f2)
	}
	checkMatmul(t, d, cases[1], inGraph(t, d, s))
	onPartition(t, d, func(launch func(*gpu.Launch)) { checkMatmul(t, d, cases[2], launch) })
	// An f32 bias with a bf16 output is refused as unsupported (the
	// library then runs its own kernel).
	if _, err := d.Matmul(gpu.Matmul{M: 8, N: 8, K: 8, In: gpu.BF16, Out: gpu.BF16, Bias: true}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("f32 bias, bf16 output: %v, want errors.ErrUnsupported", err)
	}
	// A bad product is refused before anything runs.
	if _, err := d.Matmul(gpu.Matmul{M: 1, N: 1, K: 0, In: gpu.BF16, Out: gpu.BF16}); !errors.Is(err, gpu.ErrInvalidLaunch) {
		t.Errorf("K=0: %v, want ErrInvalidLaunch", err)
	}
}

// openGPUWithBLAS opens the GPU as openGPU does and skips where no cuBLASLt was
// found.
func openGPUWithBLAS(t testing.TB) *Device {
	t.Helper()
	d, _ := openGPU(t)
	if name := d.BLASName(); strings.HasPrefix(name, "none") {
		t.Skipf("no cuBLASLt here: %s", name)
	}
	return d
}
