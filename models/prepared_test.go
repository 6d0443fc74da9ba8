package models_test

import (
	"testing"

	"atoll/models"
)

// TestPreparedFastMatchesReference: the serving executor (weights decoded
// and packed once, float32 fused products, an arena reused across calls)
// gives the reference's outputs within bf16 rounding on a CNN and a BERT,
// on the first call and on later ones (the arena and the packed weights
// reused), and Run in plain mode is the reference bit for bit.
func TestPreparedFastMatchesReference(t *testing.T) {
	for _, name := range []string{"tiny-resnet", "tiny-bert"} {
		var m models.Model
		var err error
		switch name {
		case "tiny-resnet":
			m, err = models.NewResNet(name, models.ResNetConfig{Blocks: [4]int{1, 1, 1, 1}, Image: 32, Width: 8, Classes: 10})
		default:
			m, err = models.NewBERT(name, models.BERTConfig{Layers: 2, Hidden: 64, Heads: 4, FFN: 128, Vocab: 50, Positions: 32, Types: 2, Seq: 32, Pooler: true})
		}
		if err != nil {
			t.Fatal(err)
		}
		g, err := m.Graph(2)
		if err != nil {
			t.Fatal(err)
		}
		w := models.InitWeights(g, 1)
		fast, err := models.Prepare(g, w, true)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := models.Prepare(g, w, false)
		if err != nil {
			t.Fatal(err)
		}
		for call := range 3 {
			in := models.InitInputs(g, uint64(call+2))
			ref, err := models.Reference(g, w, in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := fast.Output(in)
			if err != nil {
				t.Fatal(err)
			}
			if e := models.RelErr(got, ref[g.Output]); e > 1e-2 {
				t.Errorf("%s call %d: fast output's relative error %.3g, want ≤ 1e-2", name, call, e)
			}
			p, err := plain.Run(in)
			if err != nil {
				t.Fatal(err)
			}
			if e := models.RelErr(p[g.Output], ref[g.Output]); e != 0 {
				t.Errorf("%s call %d: plain prepared run differs from the reference by %.3g", name, call, e)
			}
		}
	}
}
