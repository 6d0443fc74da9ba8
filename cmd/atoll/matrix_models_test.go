package main

import (
	"slices"
	"strings"
	"testing"

	"atoll/bench"
)

// matrixModels lists every profile a matrix's cells need once, HP and
// BE, batch 1 where a cell names none.
func TestMatrixModels(t *testing.T) {
	spec, err := bench.ReadMatrix(strings.NewReader(`name: m
policies: [atoll]
cells:
  - {name: a, hp: resnet50, be: resnet50-train, beBatch: 32, load: 0.5}
  - {name: b, hp: resnet50, be: vgg19, load: 0.5}
  - {name: c, hp: bert-base, hpBatch: 2, be: resnet50-train, beBatch: 32, load: 0.3}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := matrixModels(spec)
	want := []modelBatch{{"resnet50", 1}, {"resnet50-train", 32}, {"vgg19", 1}, {"bert-base", 2}}
	if !slices.Equal(got, want) {
		t.Errorf("matrixModels = %v, want %v", got, want)
	}
}
