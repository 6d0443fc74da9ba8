package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"atoll/bench"
	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/models"
	"atoll/profiler"
	"atoll/profiles"
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
	// In parallel with the documented-command tests only (the package's
	// other tests, which read cudaGPUName, have run by then: parallel
	// tests start after the sequential ones).
	t.Parallel()
	defer func(f func() (string, error)) { cudaGPUName = f }(cudaGPUName)
	cudaGPUName = func() (string, error) { return "NVIDIA H200", nil }
	w := workloadFlags{hp: "resnet50", hpBatch: 1, be: "mobilenetv2", beBatch: 1,
		arrival: bench.Poisson, sigma: 1, load: 0.5, seed: 1,
		duration: 60 * time.Millisecond, warmup: 10 * time.Millisecond, backend: "cuda"}
	c, err := w.config()
	if err != nil {
		t.Fatal(err)
	}
	if c.Parallel != 1 || c.Binder == nil {
		t.Fatalf("cuda config: Parallel %d, Binder set %v; want 1 run at a time with model instances", c.Parallel, c.Binder != nil)
	}
	// A BLAS, as the GPUs whose profiles these are had (cuBLASLt): the
	// instances refuse those profiles without one.
	c.NewDevice = func() (gpu.Device, error) { return sim.New(sim.Config{Spec: gpu.H200, Seed: 1, BLAS: true}) }
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

// TestCUDAWorkloadGPUKind: --backend cuda takes the GPU kind from the
// device, refuses a --gpu naming another kind, and says what to do without
// a GPU.
func TestCUDAWorkloadGPUKind(t *testing.T) {
	defer func(f func() (string, error)) { cudaGPUName = f }(cudaGPUName)
	base := workloadFlags{hp: "resnet50", hpBatch: 1, be: "none", arrival: bench.Poisson, sigma: 1, load: 0.5,
		duration: time.Millisecond, backend: "cuda"}
	cudaGPUName = func() (string, error) { return "NVIDIA H200", nil }
	w := base
	if _, err := w.config(); err != nil || w.gpuName != "H200" {
		t.Errorf("no --gpu on an H200: gpu %q, err %v; want H200's measured profiles", w.gpuName, err)
	}
	for _, v := range []string{"0.1,0", "0.27,0.6"} {
		w = base
		if err := w.corun.Set(v); err != nil {
			t.Fatal(err)
		}
		if _, err := w.config(); err == nil || !strings.Contains(err.Error(), "--sim-corun is a simulator parameter") {
			t.Errorf("--sim-corun %s on the GPU: %v, want the refusal", v, err)
		}
	}
	for flag, set := range map[string]func(*workloadFlags){
		"--sim-launch-cost":     func(w *workloadFlags) { w.hostCost = launchCosts{time.Microsecond, time.Microsecond, time.Microsecond} },
		"--sim-query-cost":      func(w *workloadFlags) { w.queryCost = 3 * time.Microsecond },
		"--sim-completion-cost": func(w *workloadFlags) { w.completion = time.Microsecond },
		"--sim-decide-cost":     func(w *workloadFlags) { w.decide = time.Microsecond },
		"--sim-event-cost":      func(w *workloadFlags) { w.eventCost = time.Microsecond },
		"--sim-notice":          func(w *workloadFlags) { w.notice.Set("1us") },
		"--sim-kernel-gap":      func(w *workloadFlags) { w.kernelGap.Set("2us") },
		"--sim-profile-gap":     func(w *workloadFlags) { w.gap = time.Microsecond },
		"--sim-wake":            func(w *workloadFlags) { w.wake = time.Microsecond },
		"--sim-graph-yield":     func(w *workloadFlags) { w.graphKeep = true },
	} {
		w = base
		set(&w)
		if _, err := w.config(); err == nil || !strings.Contains(err.Error(), flag+" is a simulator parameter") {
			t.Errorf("%s set on the GPU: %v, want the refusal", flag, err)
		}
	}
	w = base
	w.gpuName = "H100-SXM"
	if _, err := w.config(); err == nil || !strings.Contains(err.Error(), "drop --gpu") {
		t.Errorf("--gpu H100-SXM on an H200: %v", err)
	}
	cudaGPUName = func() (string, error) { return "NVIDIA A100-SXM4-80GB", nil }
	w = base
	if _, err := w.config(); err == nil || !strings.Contains(err.Error(), "atoll profile") {
		t.Errorf("an A100 has no profiles: %v, want the refusal naming atoll profile", err)
	}
	defer func(f func(string, string, int, string) (*profiles.Profile, error)) { lookupProfile = f }(lookupProfile)
	cudaGPUName = func() (string, error) { return "NVIDIA H200", nil }
	lookupProfile = func(g, m string, b int, ph string) (*profiles.Profile, error) {
		p, err := profiles.Lookup(g, m, b, ph)
		if err != nil {
			return nil, err
		}
		q := *p
		q.Source = profiles.SourceEstimated
		return &q, nil
	}
	w = base
	if _, err := w.config(); err == nil || !strings.Contains(err.Error(), "needs measured profiles") {
		t.Errorf("an estimated HP profile on the GPU: %v, want the refusal", err)
	}
	lookupProfile = profiles.Lookup
	cudaGPUName = func() (string, error) { return "", errors.New("cuda: no device") }
	w = base
	if _, err := w.config(); err == nil || !strings.Contains(err.Error(), "--backend sim") {
		t.Errorf("no GPU: %v", err)
	}
}

// The matrix's shared device keeps the graphs of the device it wraps: a
// run through it submits its HP requests as graphs (an embedded gpu.Device
// alone hid them, and a GPU matrix ran kernel by kernel).
func TestSharedDeviceKeepsGraphs(t *testing.T) {
	dev, err := sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	w := workloadFlags{hp: "resnet50", hpBatch: 1, be: "none", arrival: bench.Poisson, sigma: 1, load: 0.5,
		seed: 1, backend: "sim", duration: 50 * time.Millisecond, graphs: true}
	c, err := w.config()
	if err != nil {
		t.Fatal(err)
	}
	c.NewDevice = func() (gpu.Device, error) { return sharedDevice{dev}, nil }
	rs, err := bench.Suite(context.Background(), c, []string{"dedicated"})
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if r.HPGraphs != "on" || r.GraphLaunches == 0 {
		t.Errorf("through the shared device: HP graphs %q, %d graph launches", r.HPGraphs, r.GraphLaunches)
	}
}

type staleDevice struct{ gpu.Device }

func (staleDevice) StaleGraphEvents() int { return 7 }

// The shared device forwards the device's stale graph-event count, which
// embedding alone would hide from the run's report.
func TestSharedDeviceForwardsStaleCount(t *testing.T) {
	dev, err := sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if n := (sharedDevice{staleDevice{dev}}).StaleGraphEvents(); n != 7 {
		t.Errorf("through the shared device: %d, want 7", n)
	}
	if n := (sharedDevice{dev}).StaleGraphEvents(); n != 0 {
		t.Errorf("a device that keeps no count: %d, want 0", n)
	}
}

// TestCUDABatchedOnSimulator: --hp-max-batch on --backend cuda binds each
// batched pass to a model instance at its batch (the simulator standing
// in for the GPU), and under a queue passes serve several requests.
func TestCUDABatchedOnSimulator(t *testing.T) {
	defer func(f func() (string, error)) { cudaGPUName = f }(cudaGPUName)
	cudaGPUName = func() (string, error) { return "NVIDIA H200", nil }
	defer func(f func(string, string, int, string) (*profiles.Profile, error)) { lookupProfile = f }(lookupProfile)
	lookupProfile = func(g, m string, b int, ph string) (*profiles.Profile, error) {
		if b == 1 {
			return profiles.Lookup(g, m, b, ph)
		}
		// A stand-in for a measured profile at batch b: the roofline
		// estimate, marked measured (the GPU path refuses estimates).
		spec, _ := gpu.LookupSpec(g)
		mod, err := models.Get(m)
		if err != nil {
			return nil, err
		}
		gr, err := mod.Graph(b)
		if err != nil {
			return nil, err
		}
		p, err := profiler.Estimate(spec, m, b, gr.Layers)
		if err != nil {
			return nil, err
		}
		p.Source = profiles.SourceMeasured
		return p, nil
	}
	w := workloadFlags{hp: "resnet50", hpBatch: 1, be: "none", arrival: bench.Poisson, sigma: 1, load: 1.5, seed: 1,
		duration: 40 * time.Millisecond, warmup: 5 * time.Millisecond, backend: "cuda", graphs: true, maxBatch: 4}
	c, err := w.config()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.HPBatched) != 2 || c.HPBatched[0].Batch != 2 || c.HPBatched[1].Batch != 4 {
		t.Fatalf("--hp-max-batch 4: %d batched profiles, want batches 2 and 4", len(c.HPBatched))
	}
	c.NewDevice = func() (gpu.Device, error) { return sim.New(sim.Config{Spec: gpu.H200, Seed: 1, BLAS: true}) }
	rs, err := bench.Suite(context.Background(), c, []string{"atoll"})
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if r.Workload.HPBatches != "2,4" || r.HPByBatch["2"]+r.HPByBatch["4"] == 0 {
		t.Errorf("load 1.5 with passes of 2 and 4: batches %q, requests by batch %v; want some served together", r.Workload.HPBatches, r.HPByBatch)
	}
	if !strings.Contains(bench.Describe(r), "by the batch of their pass") {
		t.Errorf("the header does not say how requests were batched:\n%s", bench.Describe(r))
	}
	w.maxBatch = -1
	if _, err := w.config(); err == nil || !strings.Contains(err.Error(), "--hp-max-batch -1") {
		t.Errorf("--hp-max-batch -1: %v, want the refusal naming the flag", err)
	}
	w.maxBatch = 8
	lookupProfile = profiles.Lookup
	if _, err := w.config(); err == nil || !strings.Contains(err.Error(), "atoll profile --model resnet50 --batch 8") {
		t.Errorf("--hp-max-batch 8 without a profile at batch 8: %v, want the command that makes one", err)
	}
}
