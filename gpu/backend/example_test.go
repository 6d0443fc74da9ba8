package backend_test

import (
	"fmt"

	"atoll/gpu"
	"atoll/gpu/backend"
	"atoll/gpu/sim"
)

// Open the simulated H100; Backend "cuda" opens the real GPU the same way.
func ExampleOpen() {
	dev, err := backend.Open(backend.Config{Backend: "sim", Sim: sim.Config{Spec: gpu.H100SXM}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	in := dev.Info()
	fmt.Println(in.Backend, in.Spec.SMs, "SMs, partitions in steps of", in.Spec.PartitionStep)
	// Output: sim 132 SMs, partitions in steps of 8
}
