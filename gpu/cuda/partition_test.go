package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"atoll/gpu"
)

const partitionKernels = `
static __device__ __forceinline__ unsigned long long gtimer() {
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}
// smid spins ns, then stores the SM it ran on into out[blockIdx.x].
extern "C" __global__ void smid(unsigned *out, unsigned long long ns) {
	unsigned long long t0 = gtimer();
	while (gtimer() - t0 < ns) {}
	if (threadIdx.x == 0) {
		unsigned id;
		asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
		out[blockIdx.x] = id;
	}
}
`

// smidKernel loads the smid kernel.
func smidKernel(t *testing.T, d *Device) gpu.Func {
	t.Helper()
	m, err := d.LoadModule(gpu.ModuleSource{Name: "partition_test", CUDA: partitionKernels})
	if err != nil {
		t.Fatal(err)
	}
	fn, err := m.Function("smid")
	if err != nil {
		t.Fatal(err)
	}
	return fn
}

// smids runs the smid kernel (grid blocks of 1024 threads, ns each) on s
// and returns the distinct SMs it ran on.
func smids(t *testing.T, d *Device, fn gpu.Func, s gpu.Stream, grid int, ns int64) map[uint32]bool {
	t.Helper()
	out, err := d.Alloc(int64(4 * grid))
	if err != nil {
		t.Fatal(err)
	}
	l := &gpu.Launch{Name: "smid", Func: fn, Grid: gpu.D1(grid), Block: gpu.D1(1024)}
	l.Args.Ptr(out).U64(uint64(ns))
	if err := d.Launch(s, l); err != nil {
		t.Fatal(err)
	}
	// CopyFromDevice runs on a stream of its own, which does not wait for
	// s: wait for the kernel first.
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4*grid)
	if err := d.CopyFromDevice(buf, out); err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	for i := range grid {
		seen[binary.LittleEndian.Uint32(buf[4*i:])] = true
	}
	return seen
}

// TestGPUPartition checks confinement with a kernel that records SM ids:
// a kernel wide enough for every SM, launched in a partition, runs on the
// partition's SMs only (and on memory allocated in the primary context);
// and a primary-context kernel launched while long blocks fill the
// partition starts at once on the SMs outside it.
func TestGPUPartition(t *testing.T) {
	d, _ := openGPU(t)
	spec := d.Info().Spec
	sms := gpu.PartitionFloor(spec, spec.SMs-spec.PartitionStep)
	part, err := d.NewPartition(sms)
	if err != nil {
		t.Fatal(err)
	}
	fn := smidKernel(t, d)
	ps, err := d.NewStream(gpu.StreamOptions{Context: part, Priority: d.Info().Priorities.Least})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := d.NewStream(gpu.StreamOptions{Priority: d.Info().Priorities.Greatest})
	if err != nil {
		t.Fatal(err)
	}
	if in := smids(t, d, fn, ps, 4*spec.SMs, 20_000); len(in) > sms {
		t.Errorf("a kernel in a partition of %d SMs ran on %d SMs", sms, len(in))
	} else {
		t.Logf("partition of %d SMs: the kernel ran on %d SMs", sms, len(in))
	}
	if all := smids(t, d, fn, hs, 4*spec.SMs, 20_000); len(all) != spec.SMs {
		t.Errorf("a primary-context kernel ran on %d SMs, want all %d", len(all), spec.SMs)
	}

	// Long blocks fill the partition (2 per SM, 20 ms); an HP kernel on
	// the SMs left must finish long before them.
	out, err := d.Alloc(int64(4 * 2 * sms))
	if err != nil {
		t.Fatal(err)
	}
	be := &gpu.Launch{Name: "smid", Func: fn, Grid: gpu.D1(2 * sms), Block: gpu.D1(1024)}
	be.Args.Ptr(out).U64(uint64(20 * time.Millisecond))
	if err := d.Launch(ps, be); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	hpOut, err := d.Alloc(4 * 8)
	if err != nil {
		t.Fatal(err)
	}
	hp := &gpu.Launch{Name: "smid", Func: fn, Grid: gpu.D1(spec.SMs - sms), Block: gpu.D1(1024)}
	hp.Args.Ptr(hpOut).U64(50_000)
	e0, _ := d.NewEvent()
	e1, _ := d.NewEvent()
	beDone, _ := d.NewEvent()
	t0 := d.Now()
	if err := d.Record(e0, hs); err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(hs, hp); err != nil {
		t.Fatal(err)
	}
	if err := d.Record(e1, hs); err != nil {
		t.Fatal(err)
	}
	if err := d.Record(beDone, ps); err != nil {
		t.Fatal(err)
	}
	for {
		done, err := d.Query(e1)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		if err := d.Wait(context.Background(), d.Now()+50*time.Microsecond); err != nil {
			t.Fatal(err)
		}
	}
	hpAt := d.Now() - t0
	if beFinished, _ := d.Query(beDone); beFinished {
		t.Errorf("the BE blocks (20 ms) finished before the HP kernel: the test shows nothing")
	}
	if hpAt > 5*time.Millisecond {
		t.Errorf("HP kernel of %d blocks took %v beside a full partition of %d SMs, want well under the BE blocks' 20 ms", spec.SMs-sms, hpAt, sms)
	}
	t.Logf("HP kernel beside the full partition: done %v after launch", hpAt)
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// TestGPUPartitionRest checks with SM ids that a partition and the rest
// of its split share no SM: kernels wide enough for every SM, one in each,
// run on disjoint sets that together cover at most the device.
func TestGPUPartitionRest(t *testing.T) {
	d, _ := openGPU(t)
	spec := d.Info().Spec
	sms := gpu.PartitionFloor(spec, spec.SMs*3/4)
	part, err := d.NewPartition(sms)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := d.NewPartitionRest(sms)
	if err != nil {
		t.Fatal(err)
	}
	fn := smidKernel(t, d)
	ps, err := d.NewStream(gpu.StreamOptions{Context: part, Priority: d.Info().Priorities.Least})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := d.NewStream(gpu.StreamOptions{Context: rest, Priority: d.Info().Priorities.Greatest})
	if err != nil {
		t.Fatal(err)
	}
	in := smids(t, d, fn, ps, 4*spec.SMs, 20_000)
	out := smids(t, d, fn, rs, 4*spec.SMs, 20_000)
	t.Logf("partition of %d SMs ran on %d SMs, its rest on %d", sms, len(in), len(out))
	if len(in) > sms || len(out) > spec.SMs-sms {
		t.Errorf("partition of %d SMs ran on %d, its rest (%d SMs) on %d", sms, len(in), spec.SMs-sms, len(out))
	}
	for id := range out {
		if in[id] {
			t.Errorf("SM %d ran work of both the partition and its rest", id)
		}
	}
}

// TestGPUBlockPlacement records where the block dispatcher puts a
// kernel's blocks (128 threads each, recording their SM): on an idle GPU,
// and while long blocks of another kernel — one per SM, of 128 or 1024
// threads, leaving room on each SM — hold the SMs of a partition or every
// SM. The simulator places a kernel's blocks one per SM with room per
// round, breadth first, lowest SM index first, and a partition on the
// highest SMs: beside a partition a kernel of up to the free SMs' count
// takes only free SMs, a wider one also the partition's SMs in its first
// round. On an H200 (results/placement-h200) kernels of 8 and 32 blocks
// took only free SMs; the wider kernels (66, 132, 264 blocks) say whether
// the GPU fills the free SMs first (docs/simulator.md, "Co-run
// interference").
func TestGPUBlockPlacement(t *testing.T) {
	d, _ := openGPU(t)
	spec := d.Info().Spec
	fn := smidKernel(t, d)
	pr := d.Info().Priorities
	hs, err := d.NewStream(gpu.StreamOptions{Priority: pr.Greatest})
	must(t, err)
	// launch starts grid blocks of 128 threads spinning ns on s and returns
	// a function that waits for them and gives each block's SM.
	launch := func(s gpu.Stream, grid, block int, ns int64) func() []uint32 {
		out, err := d.Alloc(int64(4 * grid))
		must(t, err)
		l := &gpu.Launch{Name: "smid", Func: fn, Grid: gpu.D1(grid), Block: gpu.D1(block)}
		l.Args.Ptr(out).U64(uint64(ns))
		must(t, d.Launch(s, l))
		return func() []uint32 {
			must(t, d.Synchronize())
			buf := make([]byte, 4*grid)
			must(t, d.CopyFromDevice(buf, out))
			ids := make([]uint32, grid)
			for i := range ids {
				ids[i] = binary.LittleEndian.Uint32(buf[4*i:])
			}
			return ids
		}
	}
	distinct := func(ids []uint32) map[uint32]int {
		m := map[uint32]int{}
		for _, id := range ids {
			m[id]++
		}
		return m
	}
	for _, g := range []int{8, 32, 66} {
		for range 2 {
			ids := launch(hs, g, 128, 20_000)()
			t.Logf("idle GPU: %d blocks on %d SMs: %v", g, len(distinct(ids)), ids)
		}
	}
	sms := gpu.PartitionFloor(spec, 96)
	part, err := d.NewPartition(sms)
	must(t, err)
	ps, err := d.NewStream(gpu.StreamOptions{Context: part, Priority: pr.Least})
	must(t, err)
	ls, err := d.NewStream(gpu.StreamOptions{Priority: pr.Least})
	must(t, err)
	for _, c := range []struct {
		name  string
		s     gpu.Stream
		grid  int
		block int
	}{
		{fmt.Sprintf("a partition of %d SMs", sms), ps, sms, 128},
		{fmt.Sprintf("a partition of %d SMs", sms), ps, sms, 1024},
		{"every SM", ls, spec.SMs, 128},
	} {
		for _, g := range []int{8, 32, 66, 132, 264} {
			wait := launch(c.s, c.grid, c.block, int64(20*time.Millisecond))
			time.Sleep(2 * time.Millisecond)
			hp := launch(hs, g, 128, 20_000)()
			be := distinct(wait())
			on := 0
			for _, id := range hp {
				if be[id] > 0 {
					on++
				}
			}
			t.Logf("beside long blocks on %s (%d blocks of %d threads on %d SMs): %d HP blocks, %d on SMs holding BE blocks, on %d SMs: %v",
				c.name, c.grid, c.block, len(be), g, on, len(distinct(hp)), hp)
		}
	}
}
