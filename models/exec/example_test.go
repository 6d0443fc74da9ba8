package exec_test

import (
	"context"
	"fmt"

	"atoll/gpu/sim"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
)

// A reduced VGG on the simulator: every layer has a kernel, so a whole
// forward pass runs (the simulator times it; a GPU also computes it).
func ExampleNew() {
	dev, err := sim.New(sim.Config{})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	m, err := models.NewVGG("tiny-vgg", models.VGGConfig{Image: 32, WidthDiv: 16, Hidden: 64, Classes: 10})
	if err != nil {
		panic(err)
	}
	g, err := m.Graph(1)
	if err != nil {
		panic(err)
	}
	in, err := exec.New(dev, kernels.New(dev), g, models.InitWeights(g, 1), models.InitInputs(g, 2))
	if err != nil {
		panic(err)
	}
	defer in.Close()
	if err := in.Run(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println(in.Runnable(), "of", len(g.Layers), "layers ran; took device time:", in.LastRun() > 0)
	// Output: 24 of 24 layers ran; took device time: true
}
