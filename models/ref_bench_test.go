package models

import "testing"

// BenchmarkReference: whole models at batch 1 on the CPU — the reference
// as checks run it (decoding the weights each call, the plain loop's
// products), and the prepared fast executor a daemon on the simulator
// computes each request with (weights decoded once, float32 fused
// products: Prepare(g, w, true)).
func BenchmarkReference(b *testing.B) {
	for _, name := range []string{"resnet50", "distilbert"} {
		m, err := Get(name)
		if err != nil {
			b.Fatal(err)
		}
		g, err := m.Graph(1)
		if err != nil {
			b.Fatal(err)
		}
		w, in := InitWeights(g, 1), InitInputs(g, 2)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Reference(g, w, in); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"-prepared-fast", func(b *testing.B) {
			p, err := Prepare(g, w, true)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := p.Output(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
