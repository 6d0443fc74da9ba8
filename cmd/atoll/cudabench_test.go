package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"atoll/bench"
	"atoll/gpu"
	"atoll/gpu/sim"
)

// TestCUDAWorkloadOnSimulator runs the exact configuration `--backend cuda`
// builds — measured H200 profiles, model instances bound by cudaBinder,
// one run at a time — with the simulator standing in for the GPU, whose
// memory holds bytes and whose kernels compute nothing. It catches wiring
// faults of the GPU path (binder, arrivals, policies) on a machine without
// one, before device time is spent.
func TestCUDAWorkloadOnSimulator(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every policy on two model instances")
	}
	w := workloadFlags{gpuName: "H200", hp: "resnet50", hpBatch: 1, be: "mobilenetv2", beBatch: 1,
		arrival: bench.Poisson, sigma: 1, load: 0.5, seed: 1,
		duration: 60 * time.Millisecond, warmup: 10 * time.Millisecond, backend: "cuda"}
	c, err := w.config()
	if err != nil {
		t.Fatal(err)
	}
	if c.Parallel != 1 || c.Binder == nil {
		t.Fatalf("cuda config: Parallel %d, Binder set %v; want 1 run at a time with model instances", c.Parallel, c.Binder != nil)
	}
	c.NewDevice = func() (gpu.Device, error) { return sim.New(sim.Config{Spec: gpu.H200, Seed: 1}) }
	names := []string{"dedicated", "streams", "priority", "orion", "reef", "atoll"}
	if err := w.checkPolicies(names); err != nil {
		t.Fatal(err)
	}
	rs, err := bench.Suite(context.Background(), c, names)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.HPCompleted == 0 {
			t.Errorf("%s: no HP request completed in the measured span", r.Policy)
		}
		if r.Policy != "dedicated" && r.BEWorkPerSec == 0 {
			t.Errorf("%s: the BE client made no progress", r.Policy)
		}
	}
	if err := w.checkPolicies([]string{"timeslice"}); err == nil || !strings.Contains(err.Error(), "timeslice") {
		t.Errorf("timeslice on cuda: err %v, want a refusal naming it", err)
	}
}
