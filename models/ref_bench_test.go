package models

import "testing"

// BenchmarkReference: the CPU reference of whole models at batch 1 — what
// the simulated daemon computes per request.
func BenchmarkReference(b *testing.B) {
	for _, name := range []string{"resnet50", "distilbert"} {
		b.Run(name, func(b *testing.B) {
			m, err := Get(name)
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
		})
	}
}
