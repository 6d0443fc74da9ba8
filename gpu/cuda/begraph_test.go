package cuda

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/scenario"
)

// TestGPUBEGraphsBesideHP runs scenario.BEGraphsBesideHP on the GPU: does a
// least-priority stream of full-device spin kernels slow a
// greatest-priority pass of 20 small kernels more in graphs than launched
// one at a time, and by how much beside kernels of 5, 20 and 80 µs? The
// simulator's side: gpu/scenario TestBEGraphsBesideHPOnSim.
//
//	go test -c -o bin/cuda.test ./gpu/cuda
//	(cd gpu/cuda && ../../bin/cuda.test -test.run 'BEGraphsBesideHP$' -test.v)
func TestGPUBEGraphsBesideHP(t *testing.T) {
	d, _ := openGPU(t)
	r, err := scenario.BEGraphsBesideHP(context.Background(), d, []int{5, 20, 80}, 2, scenario.Held{})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + r.Table())
	for _, x := range r.Rows {
		if x.HPPass < r.Alone/2 || x.BEPerMs <= 0 {
			t.Errorf("BE %d µs, %s: HP pass %v against %v alone, BE %.1f kernels/ms: the timing is wrong", x.BlockUs, x.Mode, x.HPPass, r.Alone, x.BEPerMs)
		}
	}
}

// TestGPUWholeSMBesideWaves runs scenario.WholeSMBesideWaves on the GPU: HP
// kernels whose blocks each take a whole SM (as cuBLASLt's GEMMs do) beside
// least-priority waves of 5 and 20 µs blocks in graphs. The simulator's
// side: gpu/scenario TestWholeSMBesideWavesOnSim.
//
//	go test -c -o bin/cuda.test ./gpu/cuda
//	(cd gpu/cuda && ../../bin/cuda.test -test.run 'WholeSMBesideWaves$' -test.v)
func TestGPUWholeSMBesideWaves(t *testing.T) {
	d, _ := openGPU(t)
	r, err := scenario.WholeSMBesideWaves(context.Background(), d, []int{5, 20}, 3, scenario.Held{})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + r.Table())
	for _, x := range r.Rows {
		if x.HPPass < r.Alone/2 || x.BEPerMs <= 0 {
			t.Errorf("BE %d µs: HP pass %v against %v alone, BE %.1f kernels/ms: the timing is wrong", x.BlockUs, x.HPPass, r.Alone, x.BEPerMs)
		}
	}
}

// stampSource's kernel spins its argument's nanoseconds and has each
// block's first thread write its start and end on the GPU's global timer
// and its SM.
var stampSource = gpu.ModuleSource{Name: "block-stamps", CUDA: `
extern "C" __global__ void stamp(unsigned long long* out, unsigned long long ns) {
	unsigned long long t0, t;
	unsigned int sm;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
	do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
	if (threadIdx.x == 0) {
		out[3 * blockIdx.x] = t0;
		out[3 * blockIdx.x + 1] = t;
		out[3 * blockIdx.x + 2] = sm;
	}
}
`}

// stamp is what a block of stampSource's kernel records: when it started
// and ended (the global timer, ns) and its SM.
type stamp struct{ start, end, sm uint64 }

// stamper runs stampSource's kernel on d: launch makes a launch of shape
// sh whose blocks spin ns and stamp buf; read reads n blocks' stamps.
func stamper(t *testing.T, d *Device) (launch func(sh scenario.Shape, ns int, buf gpu.Ptr) *gpu.Launch, read func(buf gpu.Ptr, n int) []stamp) {
	t.Helper()
	mod, err := d.LoadModule(stampSource)
	must(t, err)
	f, err := mod.Function("stamp")
	must(t, err)
	launch = func(sh scenario.Shape, ns int, buf gpu.Ptr) *gpu.Launch {
		l := &gpu.Launch{Name: "stamp", Func: f, Grid: gpu.D1(sh.Blocks), Block: gpu.D1(sh.Threads), SharedMem: sh.SharedMem}
		l.Args.Ptr(buf).U64(uint64(ns))
		return l
	}
	read = func(buf gpu.Ptr, n int) []stamp {
		raw := make([]byte, n*24)
		must(t, d.CopyFromDevice(raw, buf))
		out := make([]stamp, n)
		for i := range out {
			out[i] = stamp{binary.LittleEndian.Uint64(raw[24*i:]), binary.LittleEndian.Uint64(raw[24*i+8:]), binary.LittleEndian.Uint64(raw[24*i+16:])}
		}
		return out
	}
	return launch, read
}

// TestGPUBlockStarts measures how far apart a kernel's blocks start and
// end on an idle GPU (the simulator starts a wave's blocks at one instant
// and ends them together), and, for two whole-SM kernels in one graph, when
// the second's blocks start after the first's end (the turn, block by
// block):
//
//	(cd gpu/cuda && ../../bin/cuda.test -test.run 'BlockStarts$' -test.v)
func TestGPUBlockStarts(t *testing.T) {
	d, _ := openGPU(t)
	launch, read := stamper(t, d)
	s, err := d.NewStream(gpu.StreamOptions{Priority: d.Info().Priorities.Greatest})
	must(t, err)
	const maxBlocks = 2048
	bufs := make([]gpu.Ptr, 2)
	for i := range bufs {
		bufs[i], err = d.Alloc(maxBlocks * 24)
		must(t, err)
	}
	spread := func(xs []stamp) (startSpread, endSpread time.Duration, firstEnd, lastEnd uint64) {
		minS, maxS, minE, maxE := uint64(math.MaxUint64), uint64(0), uint64(math.MaxUint64), uint64(0)
		for _, x := range xs {
			minS, maxS, minE, maxE = min(minS, x.start), max(maxS, x.start), min(minE, x.end), max(maxE, x.end)
		}
		return time.Duration(maxS - minS), time.Duration(maxE - minE), minE, maxE
	}
	wave := scenario.WholeSMBE
	per, _, err := d.Info().Spec.Occupancy(wave.Threads, 0, wave.SharedMem)
	must(t, err)
	wave.Blocks = d.Info().Spec.SMs * per
	for _, c := range []struct {
		name string
		sh   scenario.Shape
		ns   int
	}{
		{"whole-SM kernel (scenario.WholeSMHP), 10 µs", scenario.WholeSMHP, 10_000},
		{"a wave of scenario.WholeSMBE blocks, 5 µs", wave, 5_000},
		{"a wave of scenario.WholeSMBE blocks, 20 µs", wave, 20_000},
	} {
		for trial := range 3 {
			must(t, d.Launch(s, launch(c.sh, c.ns, bufs[0])))
			must(t, d.Synchronize())
			xs := read(bufs[0], c.sh.Blocks)
			ss, es, _, _ := spread(xs)
			for _, x := range xs {
				if x.end-x.start < uint64(c.ns) {
					t.Fatalf("%s: a block spun %d ns, want %d", c.name, x.end-x.start, c.ns)
				}
			}
			t.Logf("%s, trial %d: %d blocks start within %v, end within %v", c.name, trial, len(xs), ss, es)
		}
	}
	// Two whole-SM kernels in a graph: when do the second's blocks start
	// after the first's blocks end?
	steps := []gpu.GraphStep{{Launch: launch(scenario.WholeSMHP, 10_000, bufs[0])}, {Launch: launch(scenario.WholeSMHP, 10_000, bufs[1])}}
	g, err := d.NewGraph(s, steps)
	must(t, err)
	defer d.DestroyGraph(g)
	for trial := range 3 {
		must(t, d.LaunchGraph(g, s))
		must(t, d.Synchronize())
		a, b := read(bufs[0], scenario.WholeSMHP.Blocks), read(bufs[1], scenario.WholeSMHP.Blocks)
		_, _, firstEnd, lastEnd := spread(a)
		ss, _, _, _ := spread(b)
		firstStart := uint64(math.MaxUint64)
		for _, x := range b {
			firstStart = min(firstStart, x.start)
		}
		t.Logf("graph of two whole-SM kernels, trial %d: the first's blocks end within %v; the second's first block starts %v after the first's last end (%v after its first end), its blocks within %v",
			trial, time.Duration(lastEnd-firstEnd), time.Duration(int64(firstStart)-int64(lastEnd)), time.Duration(int64(firstStart)-int64(firstEnd)), ss)
		if firstStart < lastEnd {
			t.Errorf("the graph's second kernel started before its first ended")
		}
	}
}

// TestGPUPartialWavePlacement asks where the GPU puts the blocks of a
// kernel that fills less than a wave: one per SM across the GPU first
// (breadth first, as the simulator places them) or packed onto fewer SMs;
// and how many blocks of a whole-SM kernel (scenario.WholeSMHP) on the
// greatest priority start while that kernel's blocks are still resident.
// A ResNet-152 request beside BERT-base's training step, whose long
// kernels are one wave of 144 blocks two to an SM, slows 2.2× on an H200
// and 3.0–3.5× simulated (results/corun-h200 s35):
//
//	(cd gpu/cuda && ../../bin/cuda.test -test.run 'PartialWavePlacement$' -test.v)
func TestGPUPartialWavePlacement(t *testing.T) {
	d, _ := openGPU(t)
	launch, read := stamper(t, d)
	pr := d.Info().Priorities
	lo, err := d.NewStream(gpu.StreamOptions{Priority: pr.Least})
	must(t, err)
	hi, err := d.NewStream(gpu.StreamOptions{Priority: pr.Greatest})
	must(t, err)
	const maxBlocks = 2048
	beBuf, err := d.Alloc(maxBlocks * 24)
	must(t, err)
	hpBuf, err := d.Alloc(maxBlocks * 24)
	must(t, err)
	hp := scenario.WholeSMHP
	for _, c := range []struct {
		name string
		be   scenario.Shape
	}{
		{"144 blocks of 256 threads, 100 KB each (two fit an SM)", scenario.Shape{Blocks: 144, Threads: 256, SharedMem: 100 << 10}},
		{"66 blocks of 256 threads, 100 KB each (two fit an SM)", scenario.Shape{Blocks: 66, Threads: 256, SharedMem: 100 << 10}},
		{"264 blocks of 256 threads, 16 KB each (eight fit an SM)", scenario.Shape{Blocks: 264, Threads: 256, SharedMem: 16 << 10}},
	} {
		for trial := range 3 {
			must(t, d.Launch(lo, launch(c.be, 200_000, beBuf)))
			// Let BE's blocks be placed before HP's kernel arrives.
			for t0 := d.Now(); d.Now()-t0 < 50*time.Microsecond; {
			}
			must(t, d.Launch(hi, launch(hp, 10_000, hpBuf)))
			must(t, d.Synchronize())
			be, h := read(beBuf, c.be.Blocks), read(hpBuf, hp.Blocks)
			perSM := map[uint64]int{}
			firstEnd := uint64(math.MaxUint64)
			for _, x := range be {
				perSM[x.sm]++
				firstEnd = min(firstEnd, x.end)
				if x.end-x.start < 200_000 {
					t.Fatalf("%s: a BE block spun %d ns, want 200 µs", c.name, x.end-x.start)
				}
			}
			most := 0
			for _, n := range perSM {
				most = max(most, n)
			}
			early := 0
			for _, x := range h {
				if x.start < firstEnd {
					early++
				}
			}
			t.Logf("%s, trial %d: on %d SMs (at most %d on one); %d of HP's %d whole-SM blocks started while they ran",
				c.name, trial, len(perSM), most, early, hp.Blocks)
		}
	}
}
