package models_test

import (
	"bytes"
	"fmt"

	"atoll/models"
)

func ExampleGet() {
	m, err := models.Get("resnet50")
	if err != nil {
		panic(err)
	}
	layers, err := m.Ops(1)
	if err != nil {
		panic(err)
	}
	fmt.Println(m.Phase(), layers[0].Name, layers[0].Op.Shape())
	// Output: inference conv1 N=1 224x224x3 -> 112x112x64 k=7x7 s=2
}

// A reduced ResNet's dataflow, seeded weights written to and read back
// from a safetensors file, and its CPU reference output.
func ExampleReference() {
	m, err := models.NewResNet("tiny", models.ResNetConfig{Blocks: [4]int{1, 1, 1, 1}, Image: 32, Width: 8, Classes: 10})
	if err != nil {
		panic(err)
	}
	g, err := m.Graph(1)
	if err != nil {
		panic(err)
	}
	conv3 := g.Layers[5]
	fmt.Println(conv3.Name, "reads", conv3.In, "and", conv3.W)

	var file bytes.Buffer
	if err := models.WriteSafetensors(&file, models.InitWeights(g, 1)); err != nil {
		panic(err)
	}
	w, err := models.LoadWeights(g, &file)
	if err != nil {
		panic(err)
	}
	vals, err := models.Reference(g, w, models.InitInputs(g, 2))
	if err != nil {
		panic(err)
	}
	fmt.Println(g.Output, len(vals[g.Output]), "logits")
	// Output:
	// layer1.0.conv3 reads [layer1.0.conv2 layer1.0.downsample] and [layer1.0.conv3.weight layer1.0.conv3.bias]
	// fc 10 logits
}
