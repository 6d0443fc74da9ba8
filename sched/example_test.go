package sched_test

import (
	"context"
	"fmt"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/policies"
	"atoll/sched"
	"atoll/sched/schedtest"
)

// Example runs an HP client beside a BE client on the simulated GPU under
// atoll's policy (preemption on) and prints what the trace holds.
func Example() {
	dev, err := sim.New(sim.Config{Spec: gpu.H100SXM})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	// Ten 50 µs kernels per HP request; BE iterations of long multi-wave
	// kernels and short ones.
	hp, _ := schedtest.ParseProfile("hp", `
q dur=50us grid=132 block=256 class=compute
k dur=50us grid=132 block=256 class=memory
`)
	be, _ := schedtest.ParseProfile("train", `
fwd dur=400us grid=4224 block=256 class=compute
act dur=20us grid=528 block=256 class=memory
bwd dur=800us grid=8448 block=256 class=compute
`)
	var arrivals []time.Duration
	for t := time.Millisecond; t < 50*time.Millisecond; t += 2 * time.Millisecond {
		arrivals = append(arrivals, t)
	}
	pol, _ := policies.ByName("atoll:preempt=true")
	tr, err := sched.Run(context.Background(), dev, sched.Workload{
		HP: []sched.HPWorkload{{Name: "hp", Profile: hp, Arrivals: arrivals}},
		BE: []sched.BEWorkload{{Name: "train", Profile: be}},
	}, sched.Options{Policy: pol, Duration: 50 * time.Millisecond, Warmup: 5 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	fmt.Println("policy:", tr.Policy)
	fmt.Println("requests measured:", len(tr.Requests))
	fmt.Println("BE work done:", tr.BEWork > 0)
	fmt.Println("preemptions recorded:", len(tr.Preemptions) > 0)
	// Output:
	// policy: atoll
	// requests measured: 23
	// BE work done: true
	// preemptions recorded: true
}
