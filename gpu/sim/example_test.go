package sim_test

import (
	"context"
	"fmt"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
)

func Example() {
	d, err := sim.New(sim.Config{Spec: gpu.H100SXM})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	mod, _ := d.LoadModule(gpu.ModuleSource{Name: "demo"})
	f, _ := mod.Function("gemm")
	s, _ := d.NewStream(gpu.StreamOptions{Priority: -5})
	done, _ := d.NewEvent()

	// 3 waves of 264 blocks; 150 µs when alone, as profiled.
	l := gpu.Launch{Name: "gemm", Func: f, Grid: gpu.D1(792), Block: gpu.D1(1024),
		Cost: gpu.Cost{Duration: 150 * time.Microsecond, ComputeFrac: 0.8, MemoryFrac: 0.3}}
	if err := d.Launch(s, &l); err != nil {
		panic(err)
	}
	_ = d.Record(done, s)

	// Wait returns when the event completes (or at the deadline).
	for ok := false; !ok; ok, _ = d.Query(done) {
		_ = d.Wait(context.Background(), d.Now()+time.Second)
	}
	t, _ := d.Time(done)
	fmt.Println("done at", t) // 4 µs launch latency + 150 µs
	// Output: done at 154µs
}
