package sim

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"atoll/gpu"
)

// demoWorkload simulates span of a demo-like co-location: an HP stream of
// Poisson requests (60-160 kernels, 1-2 ms alone, load about 0.5) beside a
// BE stream that keeps two large training kernels (thousands of blocks)
// in flight. It returns the HP requests served and BE kernels completed.
func demoWorkload(tb testing.TB, cfg Config, span time.Duration) (requests, beKernels int) {
	d, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	mod, _ := d.LoadModule(gpu.ModuleSource{Name: "demo"})
	f, _ := mod.Function("k")
	hp, _ := d.NewStream(gpu.StreamOptions{Priority: -5})
	be, _ := d.NewStream(gpu.StreamOptions{Priority: 0})
	rng := rand.New(rand.NewPCG(42, 1))
	ctx := context.Background()

	// A request template pool: odd grids on purpose (they fragment SMs).
	grids := []int{49, 66, 98, 132, 196, 264, 392, 528, 1000}
	type req struct{ ls []gpu.Launch }
	var reqs []req
	for range 16 {
		n := 60 + rng.IntN(101)
		total := time.Duration(1000+rng.IntN(1000)) * us
		var r req
		for i := range n {
			l := gpu.Launch{Name: "hp", Func: f, Grid: gpu.D1(grids[rng.IntN(len(grids))]), Block: gpu.D1(256),
				Cost: gpu.Cost{Duration: total / time.Duration(n), ComputeFrac: 0.2 + 0.6*rng.Float64(), MemoryFrac: 0.1 + 0.7*rng.Float64()}}
			if i%7 == 3 {
				l.Block, l.Registers = gpu.D1(128), 64
			}
			r.ls = append(r.ls, l)
		}
		reqs = append(reqs, r)
	}
	bes := []gpu.Launch{
		{Name: "gemm", Func: f, Grid: gpu.D1(4096), Block: gpu.D1(256), SharedMem: 64 << 10, Registers: 128,
			Cost: gpu.Cost{Duration: 12 * time.Millisecond, ComputeFrac: 0.85, MemoryFrac: 0.3}},
		{Name: "elementwise", Func: f, Grid: gpu.D1(16384), Block: gpu.D1(512),
			Cost: gpu.Cost{Duration: 3 * time.Millisecond, ComputeFrac: 0.15, MemoryFrac: 0.9}},
		{Name: "conv", Func: f, Grid: gpu.D1(6000), Block: gpu.D1(1024), Registers: 32,
			Cost: gpu.Cost{Duration: 8 * time.Millisecond, ComputeFrac: 0.6, MemoryFrac: 0.5}},
	}
	hpEv, _ := d.NewEvent()
	beEv := [2]gpu.Event{}
	for i := range beEv {
		beEv[i], _ = d.NewEvent()
	}
	launchBE := func(i int) {
		l := bes[beKernels%len(bes)]
		if err := d.Launch(be, &l); err != nil {
			tb.Fatal(err)
		}
		_ = d.Record(beEv[i], be)
	}
	launchBE(0)
	launchBE(1)
	meanReq := 1500 * us
	next := time.Duration(0)
	for d.Now() < span {
		if d.Now() >= next {
			r := reqs[rng.IntN(len(reqs))]
			for i := range r.ls {
				if err := d.Launch(hp, &r.ls[i]); err != nil {
					tb.Fatal(err)
				}
			}
			_ = d.Record(hpEv, hp)
			requests++
			next += time.Duration(rng.ExpFloat64() * float64(meanReq) / 0.5)
		}
		if err := d.Wait(ctx, min(next, span)); err != nil {
			tb.Fatal(err)
		}
		for i := range beEv {
			if ok, _ := d.Query(beEv[i]); ok {
				beKernels++
				launchBE(i)
			}
		}
	}
	return requests, beKernels
}

// BenchmarkSimulate10s: wall time to simulate 10 s of the demo workload
// (ns/op is the wall time per simulated 10 s).
func BenchmarkSimulate10s(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"exact", Config{}},
		{"coalesce=2us", Config{Coalesce: 2 * us}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var req, bek int
			for b.Loop() {
				req, bek = demoWorkload(b, c.cfg, 10*time.Second)
			}
			b.ReportMetric(float64(req), "requests")
			b.ReportMetric(float64(bek), "be-kernels")
		})
	}
}

func TestDemoWorkloadShort(t *testing.T) {
	req, bek := demoWorkload(t, Config{}, 200*time.Millisecond)
	if req < 30 || bek < 5 {
		t.Errorf("200 ms served %d requests and %d BE kernels", req, bek)
	}
}
