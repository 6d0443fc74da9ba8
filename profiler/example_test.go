package profiler_test

import (
	"fmt"

	"atoll/gpu"
	"atoll/models"
	"atoll/profiler"
	"atoll/profiles"
)

func ExampleEstimate() {
	m, err := models.Get("distilbert")
	if err != nil {
		panic(err)
	}
	layers, err := m.Ops(1)
	if err != nil {
		panic(err)
	}
	p, err := profiler.Estimate(gpu.H100SXM, m.Name(), 1, layers)
	if err != nil {
		panic(err)
	}
	// The estimate describes exactly the model's launches.
	fmt.Println(p.Source, p.Phase, len(p.Kernels) == len(layers), profiles.Check(p, models.Ops(layers), gpu.H100SXM))
	// Output: estimated inference true <nil>
}
