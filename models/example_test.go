package models_test

import (
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
