package cuda

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"atoll/gpu"
)

// Convolutions on cuBLASLt (gather, products, scatter) match the direct
// loop on the same bf16 inputs in every pass, on a stream, from a CUDA
// graph and on a partition's stream, including passes cut into several
// steps and filters whose rows are padded.
func TestGPUConv(t *testing.T) {
	d := openGPUWithBLAS(t)
	s, err := d.NewStream(gpu.StreamOptions{Priority: d.Info().Priorities.Least})
	must(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []gpu.Conv{
		{N: 2, H: 14, W: 14, C: 16, OutC: 32, R: 3, S: 3, Stride: 1, Pad: 1, In: gpu.BF16, Bias: true, BiasType: gpu.BF16, Act: gpu.EpiReLU, Accumulate: true},
		{N: 2, H: 15, W: 15, C: 3, OutC: 16, R: 7, S: 7, Stride: 2, Pad: 3, In: gpu.BF16},
		{N: 2, H: 9, W: 9, C: 16, OutC: 24, R: 3, S: 3, Stride: 2, Pad: 1, In: gpu.BF16, Pass: gpu.ConvData},
		{N: 2, H: 8, W: 8, C: 16, OutC: 24, R: 1, S: 1, Stride: 2, In: gpu.BF16, Pass: gpu.ConvData},
		{N: 4, H: 9, W: 9, C: 16, OutC: 24, R: 3, S: 3, Stride: 1, Pad: 1, In: gpu.BF16, Pass: gpu.ConvFilter},
		{N: 4, H: 9, W: 9, C: 16, OutC: 24, R: 3, S: 3, Stride: 2, Pad: 1, In: gpu.BF16, Pass: gpu.ConvFilter, Split: 2},
		{N: 4, H: 15, W: 15, C: 3, OutC: 16, R: 7, S: 7, Stride: 2, Pad: 3, In: gpu.BF16, Pass: gpu.ConvFilter, Split: 4},
		// Large enough to take several steps of the 64 MiB workspace.
		{N: 8, H: 112, W: 112, C: 64, OutC: 64, R: 3, S: 3, Stride: 1, Pad: 1, In: gpu.BF16},
		{N: 8, H: 112, W: 112, C: 64, OutC: 64, R: 3, S: 3, Stride: 1, Pad: 1, In: gpu.BF16, Pass: gpu.ConvData},
		{N: 8, H: 112, W: 112, C: 64, OutC: 64, R: 3, S: 3, Stride: 1, Pad: 1, In: gpu.BF16, Pass: gpu.ConvFilter, Split: 2},
		// R·S·C not a multiple of 8: padded steps (an epilogue; several
		// steps of the workspace).
		{N: 2, H: 15, W: 15, C: 3, OutC: 16, R: 7, S: 7, Stride: 2, Pad: 3, In: gpu.BF16, Bias: true, BiasType: gpu.BF16, Act: gpu.EpiReLU, Accumulate: true},
		{N: 24, H: 224, W: 224, C: 3, OutC: 64, R: 7, S: 7, Stride: 2, Pad: 3, In: gpu.BF16},
		{N: 24, H: 224, W: 224, C: 3, OutC: 64, R: 7, S: 7, Stride: 2, Pad: 3, In: gpu.BF16, Pass: gpu.ConvFilter, Split: 24},
	}
	for _, c := range cases {
		t.Logf("%s", c) // a hang names its case
		checkConv(t, d, c, rng, onStream(t, d, s))
	}
	checkConv(t, d, cases[0], rng, inGraph(t, d, s))
	onPartition(t, d, func(launch func(*gpu.Launch)) { checkConv(t, d, cases[5], rng, launch) })
}

// checkConv runs c through launch on bf16 operands of small integers and
// compares its output with directConv's.
func checkConv(t *testing.T, d *Device, c gpu.Conv, rng *rand.Rand, launch func(l *gpu.Launch)) {
	t.Helper()
	data := operands(c, rng)
	up := func(v []float64) gpu.Ptr {
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], bf16Bits(float32(x)))
		}
		p, err := d.Alloc(int64(len(b)))
		must(t, err)
		must(t, d.CopyToDevice(p, b))
		return p
	}
	want := directConv(c, data).out
	outEs := 2
	if c.OutType() == gpu.F32 {
		outEs = 4
	}
	var A, B, D, bias, C gpu.Ptr
	var err error
	D, err = d.Alloc(int64(outEs * len(want)))
	must(t, err)
	switch c.Pass {
	case gpu.ConvForward:
		A, B = up(data.x), up(data.w)
		if c.Bias {
			bias = up(data.bias)
		}
		if c.Accumulate {
			C = up(data.resid)
		}
	case gpu.ConvData:
		A, B = up(data.dy), up(data.w)
	case gpu.ConvFilter:
		A, B = up(data.x), up(data.dy)
	}
	f, err := d.Conv(c)
	must(t, err)
	l := &gpu.Launch{Name: "conv " + c.String(), Func: f, Grid: gpu.D1(1), Block: gpu.D1(128), Form: gpu.Plain}
	gpu.MatmulArgs(&l.Args, A, B, D, bias, C)
	launch(l)
	raw := make([]byte, outEs*len(want))
	must(t, d.CopyFromDevice(raw, D))
	var worst, scale float64
	for i, w := range want {
		var got float64
		if outEs == 4 {
			got = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		} else {
			got = bf16Value(binary.LittleEndian.Uint16(raw[2*i:]))
		}
		worst, scale = max(worst, math.Abs(got-w)), max(scale, math.Abs(w))
	}
	bound := 1e-2 // the bf16 rounding of the outputs
	if outEs == 4 {
		bound = 1e-5 // f32 sums
	}
	if rel := worst / max(scale, 1); !(rel <= bound) {
		t.Errorf("%s: max error %.3g of max |out| %.3g (relative %.3g > %.3g)", c, worst, scale, rel, bound)
	}
	for _, p := range []gpu.Ptr{A, B, C, D, bias} {
		if p != 0 {
			must(t, d.Free(p))
		}
	}
}

// BenchmarkGPUConv times ResNet-50's convolution passes at batch 32 on
// cuBLASLt, the gathers and scatters included (device time per pass, from
// events around a run of launches):
//
//	bin/cuda.test -test.run '^$' -test.bench GPUConv
func BenchmarkGPUConv(b *testing.B) {
	d := openGPUWithBLAS(b)
	s, err := d.NewStream(gpu.StreamOptions{Priority: d.Info().Priorities.Least})
	must(b, err)
	e0, err := d.NewEvent()
	must(b, err)
	e1, err := d.NewEvent()
	must(b, err)
	conv1 := gpu.Conv{N: 32, H: 224, W: 224, C: 3, OutC: 64, R: 7, S: 7, Stride: 2, Pad: 3, In: gpu.BF16}
	l1 := gpu.Conv{N: 32, H: 56, W: 56, C: 64, OutC: 64, R: 3, S: 3, Stride: 1, Pad: 1, In: gpu.BF16}
	l3 := gpu.Conv{N: 32, H: 28, W: 28, C: 256, OutC: 256, R: 3, S: 3, Stride: 2, Pad: 1, In: gpu.BF16}
	var cases []gpu.Conv
	for _, c := range []gpu.Conv{conv1, l1, l3} {
		fwd, dgrad, wgrad := c, c, c
		dgrad.Pass = gpu.ConvData
		wgrad.Pass, wgrad.Split = gpu.ConvFilter, c.N
		cases = append(cases, fwd, dgrad, wgrad)
	}
	for _, c := range cases {
		b.Run(c.String(), func(b *testing.B) {
			oh, ow := c.Out()
			alloc := func(n int) gpu.Ptr {
				p, err := d.Alloc(int64(n))
				must(b, err)
				must(b, d.Memset32(s, p, 0, n/4))
				return p
			}
			x, w, y := alloc(2*c.N*c.H*c.W*c.C+16), alloc(4*c.N*c.R*c.S*c.C*c.OutC), alloc(2*c.N*oh*ow*c.OutC)
			defer func() { must(b, d.Free(x)); must(b, d.Free(w)); must(b, d.Free(y)) }()
			A, B, D := x, w, y
			switch c.Pass {
			case gpu.ConvData:
				A, B, D = y, w, x
			case gpu.ConvFilter:
				A, B, D = x, y, w
			}
			f, err := d.Conv(c)
			must(b, err)
			l := &gpu.Launch{Name: "conv", Func: f, Grid: gpu.D1(1), Block: gpu.D1(128), Form: gpu.Plain}
			gpu.MatmulArgs(&l.Args, A, B, D, 0, 0)
			must(b, d.Launch(s, l)) // warm: plans, workspace
			must(b, d.Synchronize())
			b.ResetTimer()
			must(b, d.Record(e0, s))
			for range b.N {
				must(b, d.Launch(s, l))
			}
			must(b, d.Record(e1, s))
			must(b, d.Synchronize())
			t0, err := d.Time(e0)
			must(b, err)
			t1, err := d.Time(e1)
			must(b, err)
			b.ReportMetric(float64((t1-t0).Microseconds())/float64(b.N), "µs/pass")
		})
	}
}

// BenchmarkGPUHostLaunch times the host's side of one launch by kind — an
// own kernel, a batch-1 cuBLASLt product, batch-1 convolutions (gathers
// included) — each followed by an event record as the scheduler's driver
// does, 128 queued between synchronizations (outside the timer):
//
//	bin/cuda.test -test.run '^$' -test.bench GPUHostLaunch -test.benchtime 2000x
func BenchmarkGPUHostLaunch(b *testing.B) {
	d, k := openGPU(b)
	if name := d.BLASName(); strings.HasPrefix(name, "none") {
		b.Skipf("no cuBLASLt here: %s", name)
	}
	s, err := d.NewStream(gpu.StreamOptions{Priority: d.Info().Priorities.Greatest})
	must(b, err)
	ev, err := d.NewEvent()
	must(b, err)
	alloc := func(n int) gpu.Ptr {
		p, err := d.Alloc(int64(n))
		must(b, err)
		must(b, d.Memset32(s, p, 0, n/4))
		return p
	}
	mm := gpu.Matmul{M: 1, N: 1000, K: 2048, In: gpu.BF16, Out: gpu.BF16}
	fm, err := d.Matmul(mm)
	must(b, err)
	lm := &gpu.Launch{Name: "matmul", Func: fm, Grid: gpu.D1(1), Block: gpu.D1(128)}
	gpu.MatmulArgs(&lm.Args, alloc(2*2048+16), alloc(2*2048*1000), alloc(2*1000+16), 0, 0)
	conv := func(c gpu.Conv) *gpu.Launch {
		f, err := d.Conv(c)
		must(b, err)
		oh, ow := c.Out()
		l := &gpu.Launch{Name: "conv", Func: f, Grid: gpu.D1(1), Block: gpu.D1(128)}
		gpu.MatmulArgs(&l.Args, alloc(2*c.N*c.H*c.W*c.C+16), alloc(4*c.R*c.S*c.C*c.OutC), alloc(2*c.N*oh*ow*c.OutC), 0, 0)
		return l
	}
	cases := []struct {
		name string
		l    *gpu.Launch
	}{
		{"kernel", &gpu.Launch{Name: "empty", Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(32)}},
		{"matmul-bs1", lm},
		{"conv1x1-bs1", conv(gpu.Conv{N: 1, H: 56, W: 56, C: 64, OutC: 256, R: 1, S: 1, Stride: 1, In: gpu.BF16})},
		{"conv3x3-bs1", conv(gpu.Conv{N: 1, H: 56, W: 56, C: 64, OutC: 64, R: 3, S: 3, Stride: 1, Pad: 1, In: gpu.BF16})},
	}
	for _, c := range cases {
		must(b, d.Launch(s, c.l)) // warm: plans, workspaces
		must(b, d.Synchronize())
		for _, rec := range []bool{false, true} {
			name := c.name
			if rec {
				name += "+record"
			}
			b.Run(name, func(b *testing.B) {
				i := 0
				for b.Loop() {
					must(b, d.Launch(s, c.l))
					if rec {
						must(b, d.Record(ev, s))
					}
					if i++; i%128 == 0 {
						b.StopTimer()
						must(b, d.Synchronize())
						b.StartTimer()
					}
				}
				must(b, d.Synchronize())
			})
		}
	}
}
