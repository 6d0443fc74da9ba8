package models_test

import (
	"errors"
	"math"
	"testing"

	"atoll/kernels"
	"atoll/models"
)

var tinyVGG = models.VGGConfig{Image: 32, WidthDiv: 16, Hidden: 64, Classes: 10}

var tinyBERT = models.BERTConfig{Layers: 2, Hidden: 32, Heads: 4, FFN: 64, Vocab: 50, Positions: 16, Types: 2, Seq: 8, Pooler: true}

func graphOf(t *testing.T, m models.Model, err error, batch int) *models.Graph {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Graph(batch)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// bf rounds to bf16 (what every activation is stored as).
func bf(v []float64) []float64 { return models.Round(kernels.BF16, v) }

// The CPU reference of a reduced ResNet against an independent forward
// pass written here from the architecture (torchvision's bottleneck with
// BN folded), rounding at the same points.
func TestReferenceResNet(t *testing.T) {
	m, err := models.NewResNet("tiny-resnet", tinyResNet)
	g := graphOf(t, m, err, 2)
	w, in := models.InitWeights(g, 3), models.InitInputs(g, 4)
	got, err := models.Reference(g, w, in)
	if err != nil {
		t.Fatal(err)
	}
	W := func(name string) []float64 { d, _ := w.Get(name); return d.Values() }
	x0, _ := in.Get("input")
	cfg := tinyResNet
	n := 2
	x := tensor4{x0.Values(), n, cfg.Image, cfg.Image, 3}
	conv := func(name string, x tensor4, k, stride, pad int, relu bool, resid *tensor4) tensor4 {
		wt := W(name + ".weight")
		b := W(name + ".bias")
		oc := len(b)
		return convNHWC(x, wt, b, k, stride, pad, oc, relu, resid)
	}
	x = conv("conv1", x, 7, 2, 3, true, nil)
	x = maxpool(x)
	for stage, count := range cfg.Blocks {
		for i := range count {
			p := "layer" + string(rune('1'+stage)) + "." + string(rune('0'+i))
			s := 1
			if i == 0 && stage > 0 {
				s = 2
			}
			y := conv(p+".conv1", x, 1, 1, 0, true, nil)
			y = conv(p+".conv2", y, 3, s, 1, true, nil)
			short := x
			if i == 0 {
				short = conv(p+".downsample", x, 1, s, 0, false, nil)
			}
			x = conv(p+".conv3", y, 1, 1, 0, true, &short)
		}
	}
	pooled := make([]float64, n*x.c)
	for img := range n {
		for p := range x.h * x.w {
			for ch := range x.c {
				pooled[img*x.c+ch] += x.v[(img*x.h*x.w+p)*x.c+ch] / float64(x.h*x.w)
			}
		}
	}
	pooled = bf(pooled)
	logits := bf(matmul(pooled, W("fc.weight"), W("fc.bias"), n, x.c, cfg.Classes))
	if e := models.RelErr(got["layer4.0.conv3"], x.v); e > 1e-3 {
		t.Errorf("layer4.0.conv3: relative error %.2g against the independent forward", e)
	}
	if e := models.RelErr(got[g.Output], logits); e > 1e-3 {
		t.Errorf("logits: relative error %.2g against the independent forward", e)
	}
	if norm(logits) == 0 || math.IsNaN(norm(logits)) {
		t.Errorf("degenerate logits %v", logits)
	}
	// Another seed gives other logits (the check above is not vacuous).
	other, err := models.Reference(g, models.InitWeights(g, 5), in)
	if err != nil {
		t.Fatal(err)
	}
	if e := models.RelErr(other[g.Output], logits); e < 0.1 {
		t.Errorf("weights from another seed change the logits by only %.2g", e)
	}
}

type tensor4 struct {
	v          []float64
	n, h, w, c int
}

func convNHWC(x tensor4, w, b []float64, k, stride, pad, oc int, relu bool, resid *tensor4) tensor4 {
	oh := (x.h+2*pad-k)/stride + 1
	ow := (x.w+2*pad-k)/stride + 1
	y := tensor4{make([]float64, x.n*oh*ow*oc), x.n, oh, ow, oc}
	for img := range x.n {
		for oy := range oh {
			for ox := range ow {
				for o := range oc {
					s := b[o]
					for ry := range k {
						for rx := range k {
							iy, ix := oy*stride-pad+ry, ox*stride-pad+rx
							if iy < 0 || ix < 0 || iy >= x.h || ix >= x.w {
								continue
							}
							for ch := range x.c {
								s += x.v[((img*x.h+iy)*x.w+ix)*x.c+ch] * w[((ry*k+rx)*x.c+ch)*oc+o]
							}
						}
					}
					i := ((img*oh+oy)*ow+ox)*oc + o
					if resid != nil {
						s += resid.v[i]
					}
					if relu {
						s = math.Max(s, 0)
					}
					y.v[i] = s
				}
			}
		}
	}
	y.v = bf(y.v)
	return y
}

func maxpool(x tensor4) tensor4 {
	oh := (x.h+2-3)/2 + 1
	y := tensor4{make([]float64, x.n*oh*oh*x.c), x.n, oh, oh, x.c}
	for img := range x.n {
		for oy := range oh {
			for ox := range oh {
				for ch := range x.c {
					m := math.Inf(-1)
					for ry := range 3 {
						for rx := range 3 {
							iy, ix := oy*2-1+ry, ox*2-1+rx
							if iy >= 0 && ix >= 0 && iy < x.h && ix < x.w {
								m = math.Max(m, x.v[((img*x.h+iy)*x.w+ix)*x.c+ch])
							}
						}
					}
					y.v[((img*oh+oy)*oh+ox)*x.c+ch] = m
				}
			}
		}
	}
	return y
}

// matmul is a [m,k] x b [k,n] + bias.
func matmul(a, b, bias []float64, m, k, n int) []float64 {
	c := make([]float64, m*n)
	for i := range m {
		for j := range n {
			s := 0.0
			if bias != nil {
				s = bias[j]
			}
			for p := range k {
				s += a[i*k+p] * b[p*n+j]
			}
			c[i*n+j] = s
		}
	}
	return c
}

func norm(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s)
}

// The CPU reference of a 2-layer BERT against an independent forward pass
// written here per token and per head (Q, K and V as separate matrices
// sliced out of the fused projection), rounding at the same points.
func TestReferenceBERT(t *testing.T) {
	m, err := models.NewBERT("tiny-bert", tinyBERT)
	g := graphOf(t, m, err, 2)
	w, in := models.InitWeights(g, 7), models.InitInputs(g, 8)
	got, err := models.Reference(g, w, in)
	if err != nil {
		t.Fatal(err)
	}
	W := func(name string) []float64 { d, _ := w.Get(name); return d.Values() }
	cfg := tinyBERT
	n, S, h, H := 2, cfg.Seq, cfg.Hidden, cfg.Heads
	d := h / H
	idsD, _ := in.Get("input_ids")
	ids := idsD.Values()
	word, pos, typ := W("embeddings.word_embeddings.weight"), W("embeddings.position_embeddings.weight"), W("embeddings.token_type_embeddings.weight")
	x := make([]float64, n*S*h)
	for tok := range n * S {
		for j := range h {
			x[tok*h+j] = word[int(ids[tok])*h+j]
		}
	}
	x = bf(x)
	for tok := range n * S {
		for j := range h {
			x[tok*h+j] += pos[(tok%S)*h+j] + typ[j]
		}
	}
	x = bf(x)
	x = layerNorm(x, W("embeddings.layernorm.weight"), W("embeddings.layernorm.bias"), h)
	for l := range cfg.Layers {
		p := "encoder." + string(rune('0'+l))
		qkv := bf(matmul(x, W(p+".attention.qkv.weight"), W(p+".attention.qkv.bias"), n*S, h, 3*h))
		ctx := make([]float64, n*S*h)
		for img := range n {
			for head := range H {
				q := func(i, k int) float64 { return qkv[(img*S+i)*3*h+head*d+k] }
				kk := func(i, k int) float64 { return qkv[(img*S+i)*3*h+h+head*d+k] }
				v := func(i, k int) float64 { return qkv[(img*S+i)*3*h+2*h+head*d+k] }
				scores := make([]float64, S*S)
				for i := range S {
					for j := range S {
						for k := range d {
							scores[i*S+j] += q(i, k) * kk(j, k)
						}
						scores[i*S+j] /= math.Sqrt(float64(d))
					}
				}
				probs := bf(softmaxRows(bf(scores), S))
				part := make([]float64, S*d)
				for i := range S {
					for k := range d {
						for j := range S {
							part[i*d+k] += probs[i*S+j] * v(j, k)
						}
					}
				}
				for i := range S {
					for k := range d {
						ctx[(img*S+i)*h+head*d+k] = part[i*d+k]
					}
				}
			}
		}
		ctx = bf(ctx)
		ao := bf(matmul(ctx, W(p+".attention.output.weight"), W(p+".attention.output.bias"), n*S, h, h))
		x = layerNorm(bf(add(ao, x)), W(p+".attention.layernorm.weight"), W(p+".attention.layernorm.bias"), h)
		f1 := matmul(x, W(p+".ffn.intermediate.weight"), W(p+".ffn.intermediate.bias"), n*S, h, cfg.FFN)
		for i, v := range f1 {
			f1[i] = 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
		}
		f2 := bf(matmul(bf(f1), W(p+".ffn.output.weight"), W(p+".ffn.output.bias"), n*S, cfg.FFN, h))
		x = layerNorm(bf(add(f2, x)), W(p+".ffn.layernorm.weight"), W(p+".ffn.layernorm.bias"), h)
	}
	cls := make([]float64, n*h)
	for img := range n {
		copy(cls[img*h:(img+1)*h], x[img*S*h:])
	}
	pooled := bf(matmul(cls, W("pooler.dense.weight"), W("pooler.dense.bias"), n, h, h))
	for i, v := range pooled {
		pooled[i] = math.Tanh(v)
	}
	pooled = bf(pooled)
	last := "encoder.1.ffn.layernorm"
	if e := models.RelErr(got[last], x); e > 1e-3 {
		t.Errorf("%s: relative error %.2g against the independent forward", last, e)
	}
	if e := models.RelErr(got[g.Output], pooled); e > 1e-3 {
		t.Errorf("pooler: relative error %.2g against the independent forward", e)
	}
	if norm(pooled) == 0 {
		t.Errorf("degenerate pooler output")
	}
}

func add(a, b []float64) []float64 {
	c := make([]float64, len(a))
	for i := range a {
		c[i] = a[i] + b[i]
	}
	return c
}

func layerNorm(x, g, b []float64, cols int) []float64 {
	y := make([]float64, len(x))
	for r := 0; r < len(x)/cols; r++ {
		row := x[r*cols : (r+1)*cols]
		mean, vr := 0.0, 0.0
		for _, v := range row {
			mean += v / float64(cols)
		}
		for _, v := range row {
			vr += (v - mean) * (v - mean) / float64(cols)
		}
		for j, v := range row {
			y[r*cols+j] = (v-mean)/math.Sqrt(vr+1e-5)*g[j] + b[j]
		}
	}
	return bf(y)
}

func softmaxRows(x []float64, cols int) []float64 {
	y := make([]float64, len(x))
	for r := 0; r < len(x)/cols; r++ {
		m, s := math.Inf(-1), 0.0
		for _, v := range x[r*cols : (r+1)*cols] {
			m = math.Max(m, v)
		}
		for _, v := range x[r*cols : (r+1)*cols] {
			s += math.Exp(v - m)
		}
		for j, v := range x[r*cols : (r+1)*cols] {
			y[r*cols+j] = math.Exp(v-m) / s
		}
	}
	return y
}

// A ResNet training step runs on the CPU reference: the loss is finite,
// every weight moves, and a second step on the same batch (from the
// updated weights and momentum) lowers the loss — the gradients point
// downhill through every layer. Labels outside [0, classes) are refused.
func TestReferenceTraining(t *testing.T) {
	cfg := tinyResNet
	cfg.Train = true
	m, err := models.NewResNet("tiny-train", cfg)
	g := graphOf(t, m, err, 4)
	w, in := models.InitWeights(g, 1), models.InitInputs(g, 2)
	vals, err := models.Reference(g, w, in)
	if err != nil {
		t.Fatal(err)
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	loss1 := mean(vals[g.Output])
	if math.IsNaN(loss1) || math.IsInf(loss1, 0) || loss1 <= 0 {
		t.Fatalf("loss %v", loss1)
	}
	// Second step: the updated weights and momentum as the new state.
	w2 := &models.Bundle{Metadata: w.Metadata}
	for _, d := range w.Tensors() {
		if models.RelErr(vals[d.Name], d.Values()) == 0 {
			t.Errorf("weight %s did not change", d.Name)
		}
		w2.Add(models.NewData(d.Name, d.DType, d.Shape, vals[d.Name]))
	}
	vals2, err := models.Reference(g, w2, in)
	if err != nil {
		t.Fatal(err)
	}
	if loss2 := mean(vals2[g.Output]); !(loss2 < loss1) {
		t.Errorf("loss after one SGD step %.5f, before %.5f: want lower", loss2, loss1)
	}
	// Bad labels.
	labels, _ := in.Get("labels")
	bad := &models.Bundle{}
	v := labels.Values()
	v[1] = float64(cfg.Classes)
	for _, d := range in.Tensors() {
		if d.Name == "labels" {
			d = models.NewData(d.Name, d.DType, d.Shape, v)
		}
		bad.Add(d)
	}
	if _, err := models.Reference(g, w, bad); !errors.Is(err, models.ErrLabels) {
		t.Errorf("Reference with label %d of %d classes: %v, want ErrLabels", cfg.Classes, cfg.Classes, err)
	}
}

// MobileNetV2 and VGG-19 are wired too: the reference runs their real
// shapes at batch 1 (skipped in -short; VGG-19's 20 GMACs take a while).
func TestReferenceZooShapes(t *testing.T) {
	if testing.Short() {
		t.Skip("full-size references take seconds")
	}
	for _, name := range []string{"mobilenetv2"} {
		m, err := models.Get(name)
		g := graphOf(t, m, err, 1)
		got, err := models.Reference(g, models.InitWeights(g, 1), models.InitInputs(g, 2))
		if err != nil {
			t.Fatal(err)
		}
		out := got[g.Output]
		if len(out) != 1000 || norm(out) == 0 || math.IsNaN(norm(out)) || math.IsInf(norm(out), 0) {
			t.Errorf("%s: output of %d values, norm %v", name, len(out), norm(out))
		}
	}
}
