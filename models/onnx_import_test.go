package models

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"atoll/kernels"
	"atoll/models/onnx"
)

// A small CNN exercising every mapped pattern, written as an exporter
// would: Conv+BN+Relu, a residual Add (its shortcut computed before the
// block), MaxPool, a depthwise Conv+Clip(0,6), a 1x1 Conv, GlobalAveragePool,
// Flatten, Gemm (transB), and a second head path through Flatten of a
// multi-pixel tensor into Gemm+Relu (C-major flatten order).
func testONNX(rng *rand.Rand) *onnx.Model {
	rnd := func(name string, dims ...int64) *onnx.Tensor {
		n := int64(1)
		for _, d := range dims {
			n *= d
		}
		t := &onnx.Tensor{Name: name, Dims: dims, DataType: onnx.Float}
		for range n {
			t.Values = append(t.Values, rng.Float64()-0.5)
		}
		return t
	}
	pos := func(name string, n int64) *onnx.Tensor {
		t := rnd(name, n)
		for i := range t.Values {
			t.Values[i] = 0.5 + math.Abs(t.Values[i])
		}
		return t
	}
	ints := func(v ...int64) onnx.Attr { return onnx.Attr{Type: 7, Ints: v} }
	one := func(v int64) onnx.Attr { return onnx.Attr{Type: 2, I: v} }
	conv := func(name, x, w, b, y string, stride, pad, group int64) onnx.Node {
		in := []string{x, w}
		if b != "" {
			in = append(in, b)
		}
		return onnx.Node{Name: name, OpType: "Conv", Inputs: in, Outputs: []string{y},
			Attrs: map[string]onnx.Attr{"strides": ints(stride, stride), "pads": ints(pad, pad, pad, pad), "group": one(group), "kernel_shape": ints(3, 3)}}
	}
	g := onnx.Graph{Name: "tiny",
		Inputs:  []onnx.ValueInfo{{Name: "x", ElemType: onnx.Float, Shape: []onnx.Dim{{Param: "N"}, {Value: 3}, {Value: 8}, {Value: 8}}}},
		Outputs: []onnx.ValueInfo{{Name: "logits", ElemType: onnx.Float, Shape: []onnx.Dim{{Param: "N"}, {Value: 5}}}},
		Initializers: []*onnx.Tensor{
			rnd("w1", 4, 3, 3, 3), rnd("b1", 4),
			pos("bn.g", 4), rnd("bn.b", 4), rnd("bn.m", 4), pos("bn.v", 4),
			rnd("w2", 4, 4, 3, 3), rnd("b2", 4),
			rnd("wd", 4, 1, 3, 3), rnd("bd", 4),
			rnd("wp", 6, 4, 1, 1),
			rnd("fc.w", 5, 6), rnd("fc.b", 5),
			{Name: "zero", DataType: onnx.Float, Values: []float64{0}}, {Name: "six", DataType: onnx.Float, Values: []float64{6}},
		},
		Nodes: []onnx.Node{
			conv("/conv1/Conv", "x", "w1", "b1", "c1", 1, 1, 1),
			{Name: "/bn1/BatchNormalization", OpType: "BatchNormalization", Inputs: []string{"c1", "bn.g", "bn.b", "bn.m", "bn.v"}, Outputs: []string{"n1"},
				Attrs: map[string]onnx.Attr{"epsilon": {Type: 1, F: 1e-5}}},
			{Name: "/relu1/Relu", OpType: "Relu", Inputs: []string{"n1"}, Outputs: []string{"r1"}},
			conv("/conv2/Conv", "r1", "w2", "b2", "c2", 1, 1, 1),
			{Name: "/add/Add", OpType: "Add", Inputs: []string{"c2", "r1"}, Outputs: []string{"a"}},
			{Name: "/relu2/Relu", OpType: "Relu", Inputs: []string{"a"}, Outputs: []string{"r2"}},
			{Name: "/pool/MaxPool", OpType: "MaxPool", Inputs: []string{"r2"}, Outputs: []string{"p"},
				Attrs: map[string]onnx.Attr{"kernel_shape": ints(2, 2), "strides": ints(2, 2)}},
			conv("/dw/Conv", "p", "wd", "bd", "d", 1, 1, 4),
			{Name: "/clip/Clip", OpType: "Clip", Inputs: []string{"d", "zero", "six"}, Outputs: []string{"dc"}},
			{Name: "/proj/Conv", OpType: "Conv", Inputs: []string{"dc", "wp"}, Outputs: []string{"pj"}, Attrs: map[string]onnx.Attr{"kernel_shape": ints(1, 1)}},
			{Name: "/gap/GlobalAveragePool", OpType: "GlobalAveragePool", Inputs: []string{"pj"}, Outputs: []string{"gp"}},
			{Name: "/flat/Flatten", OpType: "Flatten", Inputs: []string{"gp"}, Outputs: []string{"f"}, Attrs: map[string]onnx.Attr{"axis": one(1)}},
			{Name: "/fc/Gemm", OpType: "Gemm", Inputs: []string{"f", "fc.w", "fc.b"}, Outputs: []string{"logits"}, Attrs: map[string]onnx.Attr{"transB": one(1)}},
		},
	}
	return &onnx.Model{IRVersion: 8, Opset: 17, Producer: "test", Graph: g}
}

// naive evaluates the test graph in NCHW float64, straight from the ONNX
// semantics (independently of the importer's layout conversions).
func naive(m *onnx.Model, x []float64, n int) []float64 {
	init := map[string][]float64{}
	dims := map[string][]int64{}
	for _, t := range m.Graph.Initializers {
		init[t.Name], dims[t.Name] = t.Values, t.Dims
	}
	type img struct {
		c, h, w int
		v       []float64 // [n][c][h][w]
	}
	at := func(t img, b, c, y, x int) float64 { return t.v[((b*t.c+c)*t.h+y)*t.w+x] }
	conv := func(in img, w, bias string, stride, pad, group int) img {
		d := dims[w]
		oc, icg, r, s := int(d[0]), int(d[1]), int(d[2]), int(d[3])
		oh, ow := (in.h+2*pad-r)/stride+1, (in.w+2*pad-s)/stride+1
		out := img{oc, oh, ow, make([]float64, n*oc*oh*ow)}
		ocg := oc / group
		for b := range n {
			for o := range oc {
				gi := o / ocg
				for y := range oh {
					for xx := range ow {
						acc := 0.0
						if bias != "" {
							acc = init[bias][o]
						}
						for ci := range icg {
							c := gi*icg + ci
							for ky := range r {
								for kx := range s {
									iy, ix := y*stride-pad+ky, xx*stride-pad+kx
									if iy >= 0 && iy < in.h && ix >= 0 && ix < in.w {
										acc += at(in, b, c, iy, ix) * init[w][((o*icg+ci)*r+ky)*s+kx]
									}
								}
							}
						}
						out.v[((b*oc+o)*oh+y)*ow+xx] = acc
					}
				}
			}
		}
		return out
	}
	apply := func(t img, f func(c int, v float64) float64) img {
		o := img{t.c, t.h, t.w, make([]float64, len(t.v))}
		for i, v := range t.v {
			o.v[i] = f((i/(t.h*t.w))%t.c, v)
		}
		return o
	}
	x0 := img{3, 8, 8, x}
	c1 := conv(x0, "w1", "b1", 1, 1, 1)
	n1 := apply(c1, func(c int, v float64) float64 {
		return (v-init["bn.m"][c])/math.Sqrt(init["bn.v"][c]+1e-5)*init["bn.g"][c] + init["bn.b"][c]
	})
	r1 := apply(n1, func(_ int, v float64) float64 { return max(v, 0) })
	c2 := conv(r1, "w2", "b2", 1, 1, 1)
	r2 := img{4, 8, 8, make([]float64, len(c2.v))}
	for i := range c2.v {
		r2.v[i] = max(c2.v[i]+r1.v[i], 0)
	}
	p := img{4, 4, 4, make([]float64, n*4*16)}
	for b := range n {
		for c := range 4 {
			for y := range 4 {
				for xx := range 4 {
					m := math.Inf(-1)
					for ky := range 2 {
						for kx := range 2 {
							m = max(m, at(r2, b, c, 2*y+ky, 2*xx+kx))
						}
					}
					p.v[((b*4+c)*4+y)*4+xx] = m
				}
			}
		}
	}
	d := conv(p, "wd", "bd", 1, 1, 4)
	dc := apply(d, func(_ int, v float64) float64 { return min(max(v, 0), 6) })
	// 1x1 projection: reuse conv with r = s = 1, pad 0.
	pj := conv(dc, "wp", "", 1, 0, 1)
	out := make([]float64, n*5)
	for b := range n {
		for j := range 5 {
			acc := init["fc.b"][j]
			for c := range 6 {
				mean := 0.0
				for i := range 16 {
					mean += pj.v[(b*6+c)*16+i]
				}
				acc += mean / 16 * init["fc.w"][j*6+c]
			}
			out[b*5+j] = acc
		}
	}
	return out
}

func TestFromONNXMatchesANaiveEvaluation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	om := testONNX(rng)
	// Through the wire format, as a file would come.
	dec, err := onnx.Decode(om.Marshal(), "")
	if err != nil {
		t.Fatal(err)
	}
	m, w, err := FromONNX("tiny-onnx", dec)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "tiny-onnx" || m.Weights() != w {
		t.Errorf("model %q, weights %p / %p", m.Name(), m.Weights(), w)
	}
	const n = 2
	g, err := m.Graph(n)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, l := range g.Layers {
		kinds = append(kinds, l.Op.Kernel())
	}
	if len(g.Layers) != 8 {
		t.Errorf("%d layers (%v), want 8: conv1 (+BN, ReLU), conv2 (+residual, ReLU), maxpool, depthwise, its bias (+ReLU6), proj, avgpool, fc", len(g.Layers), kinds)
	}
	// The same image in NCHW for the naive evaluation and NHWC (bf16) for
	// atoll's reference.
	nchw := make([]float64, n*3*8*8)
	for i := range nchw {
		nchw[i] = rng.Float64() - 0.5
	}
	nchw = Round(kernels.BF16, nchw)
	nhwc := make([]float64, len(nchw))
	for b := range n {
		for c := range 3 {
			for y := range 8 {
				for x := range 8 {
					nhwc[((b*8+y)*8+x)*3+c] = nchw[((b*3+c)*8+y)*8+x]
				}
			}
		}
	}
	in := &Bundle{}
	in.Add(NewData("input", kernels.BF16, []int{n, 8, 8, 3}, nhwc))
	acts, err := Reference(g, w, in)
	if err != nil {
		t.Fatal(err)
	}
	got, want := acts[g.Output], naive(dec, nchw, n)
	if e := RelErr(got, want); e > 0.03 {
		t.Errorf("imported model's output differs from the naive ONNX evaluation: relative error %.4f (bf16 tolerance 0.03)\n got %.4f\nwant %.4f", e, got, want)
	} else {
		t.Logf("relative error %.4f over %d logits", e, len(got))
	}
}

func TestFromONNXRefusesWhatItCannotRun(t *testing.T) {
	for _, tc := range []struct {
		edit func(m *onnx.Model)
		want string
	}{
		{func(m *onnx.Model) { m.Graph.Nodes[5].OpType = "Sigmoid" }, `node "/relu2/Relu" (Sigmoid): atoll has no kernel`},
		{func(m *onnx.Model) { m.Graph.Nodes[0].Attrs["pads"] = onnx.Attr{Type: 7, Ints: []int64{1, 0, 1, 0}} }, "equal padding"},
		{func(m *onnx.Model) { m.Graph.Nodes[0].Attrs["dilations"] = onnx.Attr{Type: 7, Ints: []int64{2, 2}} }, "dilation 1"},
		{func(m *onnx.Model) { m.Graph.Nodes[8].Inputs[2] = "zero" }, "Clip(0, 0)"},
		{func(m *onnx.Model) { m.Graph.Inputs[0].Shape[0] = onnx.Dim{Value: 4} }, "fixed batch of 4"},
		{func(m *onnx.Model) { m.Graph.Inputs[0].Shape[2] = onnx.Dim{Param: "H"} }, "static C, H and W"},
		{func(m *onnx.Model) { m.Graph.Initializers = m.Graph.Initializers[2:] }, "weight \"w1\" must be a 4-d initializer"},
		{func(m *onnx.Model) { m.Graph.Nodes[7].Attrs["group"] = onnx.Attr{Type: 2, I: 2} }, "group 2"},
		{func(m *onnx.Model) { m.Graph.Nodes[1].Inputs[0] = "x" }, "batch norm not directly after a convolution"},
		{func(m *onnx.Model) { m.Graph.Nodes[0].Domain = "com.microsoft" }, "domain"},
		{func(m *onnx.Model) { m.Graph.Inputs[0].ElemType = onnx.Int64 }, `input "x" is INT64`},
	} {
		om := testONNX(rand.New(rand.NewPCG(1, 2)))
		tc.edit(om)
		_, _, err := FromONNX("bad", om)
		if !errors.Is(err, ErrONNX) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want ErrONNX containing %q", err, tc.want)
		}
	}
}

// TestFromONNXFlattenOrder: a Gemm reading a flattened multi-pixel tensor
// gets its weight reordered from ONNX's C-major features to atoll's NHWC
// ones (VGG's classifier).
func TestFromONNXFlattenOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	w := &onnx.Tensor{Name: "w", Dims: []int64{2, 3, 3, 3}, DataType: onnx.Float}
	fc := &onnx.Tensor{Name: "fc", Dims: []int64{3, 2 * 2 * 2}, DataType: onnx.Float}
	for range 54 {
		w.Values = append(w.Values, rng.Float64()-0.5)
	}
	for range 24 {
		fc.Values = append(fc.Values, rng.Float64()-0.5)
	}
	om := &onnx.Model{IRVersion: 8, Opset: 17, Graph: onnx.Graph{
		Inputs:       []onnx.ValueInfo{{Name: "x", Shape: []onnx.Dim{{Value: 1}, {Value: 3}, {Value: 4}, {Value: 4}}}},
		Outputs:      []onnx.ValueInfo{{Name: "y"}},
		Initializers: []*onnx.Tensor{w, fc},
		Nodes: []onnx.Node{
			{Name: "conv", OpType: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"c"}, Attrs: map[string]onnx.Attr{"strides": {Type: 7, Ints: []int64{2, 2}}, "pads": {Type: 7, Ints: []int64{1, 1, 1, 1}}}},
			{Name: "flat", OpType: "Flatten", Inputs: []string{"c"}, Outputs: []string{"f"}},
			{Name: "fc", OpType: "Gemm", Inputs: []string{"f", "fc"}, Outputs: []string{"g"}, Attrs: map[string]onnx.Attr{"transB": {Type: 2, I: 1}}},
			{Name: "relu", OpType: "Relu", Inputs: []string{"g"}, Outputs: []string{"y"}},
		}}}
	m, wb, err := FromONNX("flat", om)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := m.Graph(1)
	x := make([]float64, 48) // NHWC [1,4,4,3]
	for i := range x {
		x[i] = Round(kernels.BF16, []float64{rng.Float64() - 0.5})[0]
	}
	in := &Bundle{}
	in.Add(NewData("input", kernels.BF16, []int{1, 4, 4, 3}, x))
	acts, err := Reference(g, wb, in)
	if err != nil {
		t.Fatal(err)
	}
	// Naive: conv in NCHW, flatten C-major, Gemm, ReLU.
	var cv [2][2][2]float64 // [o][y][x]
	for o := range 2 {
		for y := range 2 {
			for xx := range 2 {
				for c := range 3 {
					for ky := range 3 {
						for kx := range 3 {
							iy, ix := 2*y-1+ky, 2*xx-1+kx
							if iy >= 0 && iy < 4 && ix >= 0 && ix < 4 {
								cv[o][y][xx] += x[(iy*4+ix)*3+c] * w.Values[((o*3+c)*3+ky)*3+kx]
							}
						}
					}
				}
			}
		}
	}
	want := make([]float64, 3)
	for j := range 3 {
		for o := range 2 {
			for y := range 2 {
				for xx := range 2 {
					want[j] += cv[o][y][xx] * fc.Values[j*8+(o*2+y)*2+xx]
				}
			}
		}
		want[j] = max(want[j], 0)
	}
	if e := RelErr(acts[g.Output], want); e > 0.03 {
		t.Errorf("relative error %.4f: got %v, want %v", e, acts[g.Output], want)
	}
}

func TestONNXDecodeErrors(t *testing.T) {
	good := testONNX(rand.New(rand.NewPCG(1, 2))).Marshal()
	for _, tc := range []struct {
		data []byte
		want string
	}{
		{good[:len(good)/2], "truncated"},
		{[]byte("not a model at all"), ""},
		{nil, "no graph"},
	} {
		if _, err := onnx.Decode(tc.data, ""); !errors.Is(err, onnx.ErrFormat) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q...: %v, want ErrFormat containing %q", tc.data[:min(len(tc.data), 10)], err, tc.want)
		}
	}
}

func FuzzONNXDecode(f *testing.F) {
	f.Add(testONNX(rand.New(rand.NewPCG(1, 2))).Marshal())
	f.Add([]byte{})
	// Real exports (encoders: the folding and recognition paths).
	for _, p := range []string{"testdata/onnx/legacy/tiny-bert.onnx", "testdata/onnx/legacy/tiny-distilbert.onnx"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := onnx.Decode(data, "")
		if err != nil {
			if !errors.Is(err, onnx.ErrFormat) {
				t.Fatalf("error does not wrap ErrFormat: %v", err)
			}
			return
		}
		// Whatever decodes either maps or is refused with ErrONNX.
		if _, _, err := FromONNX("fuzz", m); err != nil && !errors.Is(err, ErrONNX) {
			t.Fatalf("FromONNX: %v", err)
		}
	})
}

// TestTinyONNXFile keeps cmd/atoll's committed test model equal to
// testONNX (ATOLL_WRITE_ONNX=1 rewrites it).
func TestTinyONNXFile(t *testing.T) {
	const path = "../cmd/atoll/testdata/onnx/tiny-cnn.onnx"
	data := testONNX(rand.New(rand.NewPCG(1, 2))).Marshal()
	if os.Getenv("ATOLL_WRITE_ONNX") != "" {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("%s differs from testONNX; rewrite it with ATOLL_WRITE_ONNX=1 go test -run TinyONNXFile ./models", path)
	}
	m, err := Get(path)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := Get("tiny-cnn"); err != nil || again.Name() != m.Name() || m.Name() != "tiny-cnn" {
		t.Errorf("Get by the imported name: %v, %q", err, again.Name())
	}
}
