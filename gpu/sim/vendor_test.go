package sim

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
)

// nvjet is a launch shaped as cuBLASLt's GEMMs on sm_90 are
// (results/vendor-launches-h200): 384 threads, 168 registers, 200 KB of
// shared memory, so one block per SM.
func nvjet(grid int, share float64) gpu.VendorLaunch {
	return gpu.VendorLaunch{Name: "nvjet", Grid: grid, Block: 384, Registers: 168, SharedMem: 200 << 10, Share: share}
}

// A vendor call runs as its launches, one after another on the stream
// with the turn between them, each its share of the call's time, and the
// call as a whole takes what the profile says the one launch takes.
func TestVendorCallRunsItsLaunches(t *testing.T) {
	const gap = us
	call := plain("conv", 1000, 128, 101*us)
	call.Vendor = []gpu.VendorLaunch{{Name: "im2col", Grid: 500, Block: 256, Share: 0.25}, nvjet(132, 0.75)}
	r := newRig(t, Config{KernelGap: gap})
	r.launch(r.stream(0), call)
	r.drain()
	lat := gpu.H100SXM.LaunchLatency
	// The profiled 101 µs held one turn after the kernel (profileHeld);
	// the call's two launches take the rest less the turn between them.
	net := 101*us - gap - gap
	first, second := lat+net/4, lat+net/4+gap+net*3/4
	if got := r.ends()[1]; !near(got, first, 1) {
		t.Errorf("the gather ends at %v, want %v", got, first)
	}
	if got := r.starts()[2]; !near(got, first+gap, 1) {
		t.Errorf("the product starts at %v, want %v (a turn after the gather)", got, first+gap)
	}
	if got := r.ends()[2]; !near(got, second, 1) {
		t.Errorf("the call ends at %v, want %v", got, second)
	}
	one := newRig(t, Config{KernelGap: gap})
	call.Vendor = nil
	one.launch(one.stream(0), call)
	one.drain()
	if got := one.ends()[1]; !near(got, second, 1) {
		t.Errorf("the same call as one launch ends at %v, the vendor launches at %v: want the same", got, second)
	}
}

// A whole-SM vendor launch keeps a more urgent kernel off its SMs until
// it ends, where the stand-in geometry of the same call (small blocks)
// would have let it in beside.
func TestVendorLaunchHoldsWholeSMs(t *testing.T) {
	hpEnd := func(vendor bool) time.Duration {
		r := newRig(t, Config{})
		hi, lo := r.stream(-5), r.stream(0)
		be := plain("gemm", 132*2, 128, 100*us)
		if vendor {
			be.Vendor = []gpu.VendorLaunch{nvjet(132, 1)}
		}
		r.launch(lo, be)
		if err := r.d.Wait(context.Background(), 20*us); err != nil {
			t.Fatal(err)
		}
		hp := plain("hp", 132, 128, 10*us)
		hp.SharedMem = 32 << 10
		r.launch(hi, hp)
		r.drain()
		return r.ends()[2]
	}
	lat := gpu.H100SXM.LaunchLatency
	if got, want := hpEnd(false), 20*us+lat+10*us; !near(got, want, 1) {
		t.Errorf("beside the stand-in blocks HP ends at %v, want %v (it fits beside them)", got, want)
	}
	if got, want := hpEnd(true), lat+100*us+10*us; !near(got, want, 1) {
		t.Errorf("beside the whole-SM launch HP ends at %v, want %v (after it)", got, want)
	}
}

// A graph keeps its launches' vendor launches; a confined stream runs a
// call with partition points as one launch timed by them; a vendor launch
// that does not fit an SM, or on a form other than Plain, is refused.
func TestVendorCallGraphPartitionAndChecks(t *testing.T) {
	r := newRig(t, Config{})
	s := r.stream(0)
	call := plain("gemm", 264, 128, 50*us)
	call.Func = r.f
	call.Vendor = []gpu.VendorLaunch{nvjet(66, 0.5), nvjet(132, 0.5)}
	g, err := r.d.NewGraph(s, []gpu.GraphStep{{Launch: &call}})
	if err != nil {
		t.Fatal(err)
	}
	call.Vendor[0].Grid = 1 // the graph copied them
	if err := r.d.LaunchGraph(g, s); err != nil {
		t.Fatal(err)
	}
	r.drain()
	if n := len(r.ends()); n != 2 {
		t.Errorf("the graph's call ran as %d kernels, want 2", n)
	}
	placed := 0
	for _, e := range r.trace {
		if e.Kind == TraceDispatch && e.Kernel == 1 {
			placed += e.Blocks * len(e.SMs)
		}
	}
	if placed != 66 {
		t.Errorf("the graph's first vendor launch placed %d blocks, want 66", placed)
	}

	p := newRig(t, Config{})
	ctx, err := p.d.NewPartition(64)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := p.d.NewStream(gpu.StreamOptions{Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	conf := call
	conf.Grid = gpu.D1(64)
	conf.Cost.Partition = []gpu.CostPoint{{SMs: 64, Duration: 80 * us}, {SMs: 132, Duration: 50 * us}}
	p.launch(ps, conf)
	p.drain()
	if n := len(p.ends()); n != 1 {
		t.Errorf("confined with partition points the call ran as %d kernels, want 1", n)
	}

	bad := call
	bad.Vendor = []gpu.VendorLaunch{{Name: "huge", Grid: 1, Block: 128, SharedMem: 300 << 10, Share: 1}}
	if err := r.d.Launch(s, &bad); !errors.Is(err, gpu.ErrInvalidLaunch) {
		t.Errorf("a vendor launch over the shared memory limit: %v, want ErrInvalidLaunch", err)
	}
	bad.Vendor = []gpu.VendorLaunch{nvjet(132, 0)}
	if err := r.d.Launch(s, &bad); !errors.Is(err, gpu.ErrInvalidLaunch) {
		t.Errorf("a vendor launch of no share: %v, want ErrInvalidLaunch", err)
	}
	if _, err := r.d.NewGraph(s, []gpu.GraphStep{{Launch: &bad}}); !errors.Is(err, gpu.ErrInvalidLaunch) {
		t.Errorf("a graph of a vendor launch of no share: %v, want ErrInvalidLaunch", err)
	}
	bad.Vendor, bad.Form = []gpu.VendorLaunch{nvjet(132, 1)}, gpu.Reset
	if err := r.d.Launch(s, &bad); !errors.Is(err, gpu.ErrInvalidLaunch) || !strings.Contains(err.Error(), "vendor") {
		t.Errorf("vendor launches on a reset launch: %v, want ErrInvalidLaunch naming them", err)
	}
}
