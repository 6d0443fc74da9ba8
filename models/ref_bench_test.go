package models

import "testing"

// BenchmarkReferenceResNet50: the CPU reference of a whole ResNet-50 at
// batch 1 — what the simulated daemon computes per request.
func BenchmarkReferenceResNet50(b *testing.B) {
	m, err := Get("resnet50")
	if err != nil {
		b.Fatal(err)
	}
	g, err := m.Graph(1)
	if err != nil {
		b.Fatal(err)
	}
	w, in := InitWeights(g, 1), InitInputs(g, 2)
	b.ResetTimer()
	for range b.N {
		if _, err := Reference(g, w, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReferenceDistilBERT: the CPU reference of DistilBERT at batch 1
// (sequence 128).
func BenchmarkReferenceDistilBERT(b *testing.B) {
	m, err := Get("distilbert")
	if err != nil {
		b.Fatal(err)
	}
	g, err := m.Graph(1)
	if err != nil {
		b.Fatal(err)
	}
	w, in := InitWeights(g, 1), InitInputs(g, 2)
	b.ResetTimer()
	for range b.N {
		if _, err := Reference(g, w, in); err != nil {
			b.Fatal(err)
		}
	}
}
