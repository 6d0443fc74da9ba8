package models_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"atoll/kernels"
	"atoll/models"
)

func sampleBundle() *models.Bundle {
	b := &models.Bundle{Metadata: map[string]string{"format": "atoll", "note": "test"}}
	b.Add(models.NewData("conv.weight", kernels.BF16, []int{3, 3, 2, 4}, ramp(72, 0.37)))
	b.Add(models.NewData("conv.bias", kernels.F32, []int{4}, ramp(4, 1.1)))
	b.Add(models.NewData("half", kernels.F16, []int{5}, ramp(5, -0.3)))
	b.Add(models.NewData("ids", kernels.I32, []int{2, 3}, []float64{0, 1, 2, 30521, -4, 7}))
	b.Add(models.NewData("scalar", kernels.F32, []int{}, []float64{42}))
	b.Add(models.NewData("empty", kernels.BF16, []int{0, 7}, nil))
	return b
}

func ramp(n int, k float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = k * float64(i-n/2) / 3
	}
	return v
}

func encode(t *testing.T, b *models.Bundle) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := models.WriteSafetensors(&buf, b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Write, read back through a file: names, types, shapes, bytes and
// metadata survive; values are the rounded ones.
func TestSafetensorsRoundTrip(t *testing.T) {
	b := sampleBundle()
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := os.WriteFile(path, encode(t, b), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := models.ReadSafetensors(f)
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != b.Len() || got.Metadata["note"] != "test" || got.Metadata["format"] != "atoll" {
		t.Fatalf("read %d tensors, metadata %v", got.Len(), got.Metadata)
	}
	for _, want := range b.Tensors() {
		d, ok := got.Get(want.Name)
		if !ok {
			t.Fatalf("%s missing", want.Name)
		}
		if d.DType != want.DType || !slices.Equal(d.Shape, want.Shape) || !bytes.Equal(d.Raw, want.Raw) {
			t.Errorf("%s: got %s%v %d bytes, want %s%v %d bytes", want.Name, d.DType, d.Shape, len(d.Raw), want.DType, want.Shape, len(want.Raw))
		}
	}
	ids, _ := got.Get("ids")
	if v := ids.Values(); v[3] != 30521 || v[4] != -4 {
		t.Errorf("ids = %v", v)
	}
	w, _ := got.Get("conv.weight")
	if v := w.Values(); v[1] == 0 || float64(float32(v[1])) != v[1] {
		t.Errorf("bf16 values not decoded: %v", v[:3])
	}
	// The data section is 8-byte aligned.
	raw := encode(t, b)
	if n := binary.LittleEndian.Uint64(raw); n%8 != 0 {
		t.Errorf("header length %d not a multiple of 8", n)
	}
}

// A header written by hand in the reference implementation's layout (keys
// in any order, no metadata) is read.
func TestSafetensorsForeignHeader(t *testing.T) {
	hdr := `{"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`
	f := file(hdr, []byte{0, 0, 128, 63, 0, 0, 0, 64})
	b, err := models.ReadSafetensors(bytes.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := b.Get("a")
	bb, _ := b.Get("b")
	if a.Values()[0] != 1 || bb.Values()[0] != 2 {
		t.Errorf("a=%v b=%v", a.Values(), bb.Values())
	}
}

func file(hdr string, data []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	out = append(out, hdr...)
	return append(out, data...)
}

func TestSafetensorsErrors(t *testing.T) {
	good := encode(t, sampleBundle())
	eight := make([]byte, 8)
	for _, tc := range []struct {
		name string
		file []byte
		want string // in the message
	}{
		{"empty", nil, "truncated"},
		{"short length", []byte{1, 2, 3}, "truncated"},
		{"header past end", file(`{}`, nil)[:9], "truncated"},
		{"huge header", binary.LittleEndian.AppendUint64(nil, 1<<40), "limit"},
		{"truncated data", good[:len(good)-3], "past the end"},
		{"not json", file(`{"a":`, nil), "JSON"},
		{"not object", file(`[1,2]`, nil), "not a JSON object"},
		{"bad dtype", file(`{"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}`, eight), `"x": dtype "F64" not supported`},
		{"wrong size", file(`{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, eight), `"x": F32[3] needs 12 bytes`},
		{"backwards", file(`{"x":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}}`, eight), "backwards"},
		{"overlap", file(`{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight), "overlap"},
		{"hole", file(`{"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight), "holes"},
		{"trailing", file(`{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, eight), "trailing"},
		{"duplicate", file(`{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight), "twice"},
		{"missing field", file(`{"x":{"dtype":"F32","shape":[1]}}`, nil), `no "data_offsets"`},
		{"extra field", file(`{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"z":1}}`, eight[:4]), "fields other"},
		{"negative dim", file(`{"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, eight[:4]), "shape"},
		{"float offset", file(`{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4.5]}}`, eight[:4]), "data_offsets"},
		{"bad metadata", file(`{"__metadata__":{"a":1}}`, nil), "__metadata__"},
		{"junk after", file(`{}x`, nil), "after its JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := models.ReadSafetensors(bytes.NewReader(tc.file))
			if !errors.Is(err, models.ErrSafetensors) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrSafetensors mentioning %q", err, tc.want)
			}
		})
	}
}

// FuzzSafetensors: the reader never panics, and whatever it accepts it
// writes back to a file it reads identically.
func FuzzSafetensors(f *testing.F) {
	var buf bytes.Buffer
	_ = models.WriteSafetensors(&buf, sampleBundle())
	f.Add(buf.Bytes())
	f.Add(file(`{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)))
	f.Add(file(`{"__metadata__":{"k":"v"}}`, nil))
	f.Add(file(`{"x":{"dtype":"BF16","shape":[2,0],"data_offsets":[0,0]}}  `, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := models.ReadSafetensors(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, models.ErrSafetensors) {
				t.Fatalf("error %v does not wrap ErrSafetensors", err)
			}
			return
		}
		var out bytes.Buffer
		if err := models.WriteSafetensors(&out, b); err != nil {
			t.Fatalf("accepted file does not write back: %v", err)
		}
		b2, err := models.ReadSafetensors(&out)
		if err != nil {
			t.Fatalf("written file does not read back: %v", err)
		}
		if b2.Len() != b.Len() {
			t.Fatalf("%d tensors, then %d", b.Len(), b2.Len())
		}
		for _, d := range b.Tensors() {
			d2, ok := b2.Get(d.Name)
			if !ok || d2.DType != d.DType || !slices.Equal(d2.Shape, d.Shape) || !bytes.Equal(d2.Raw, d.Raw) {
				t.Fatalf("tensor %q changed on a round trip", d.Name)
			}
		}
	})
}

// tinyWeights is a tiny ResNet's graph at batch 1 and its seeded weights.
func tinyWeights(t *testing.T) (*models.Graph, *models.Bundle) {
	t.Helper()
	m, err := models.NewResNet("tiny", tinyResNet)
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Graph(1)
	if err != nil {
		t.Fatal(err)
	}
	return g, models.InitWeights(g, 1)
}

// loadsAs writes written, loads it for g and checks that every weight
// comes back in g's type with want's bytes.
func loadsAs(t *testing.T, g *models.Graph, written, want *models.Bundle, what string) {
	t.Helper()
	var buf bytes.Buffer
	if err := models.WriteSafetensors(&buf, written); err != nil {
		t.Fatal(err)
	}
	got, err := models.LoadWeights(g, bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, w := range g.Weights() {
		a, _ := got.Get(w.Name)
		b, _ := want.Get(w.Name)
		if a.DType != w.DType || !bytes.Equal(a.Raw, b.Raw) {
			t.Fatalf("%s: %s loaded as %s, not the model's values in %s", what, w.Name, a.DType, w.DType)
		}
	}
}

// Weights of the wrong model, shape or type are refused naming the tensor.
func TestLoadWeightsErrors(t *testing.T) {
	g, good := tinyWeights(t)
	loadsAs(t, g, good, good, "a round trip of what InitWeights wrote")
	var buf bytes.Buffer
	if err := models.WriteSafetensors(&buf, good); err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(b *models.Bundle)) []byte {
		b := &models.Bundle{Metadata: good.Metadata}
		for _, d := range good.Tensors() {
			c := *d
			b.Add(&c)
		}
		f(b)
		var out bytes.Buffer
		if err := models.WriteSafetensors(&out, b); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"missing", mutate(func(b *models.Bundle) {
			nb := &models.Bundle{}
			for _, d := range b.Tensors() {
				if d.Name != "layer2.0.conv2.weight" {
					nb.Add(d)
				}
			}
			*b = *nb
		}), `missing weight tensor "layer2.0.conv2.weight"`},
		{"shape", mutate(func(b *models.Bundle) {
			d, _ := b.Get("fc.weight")
			d.Shape = []int{d.Shape[1], d.Shape[0]}
		}), `"fc.weight" has shape`},
		{"dtype", mutate(func(b *models.Bundle) {
			d, _ := b.Get("fc.bias")
			b.Add(models.NewData("fc.bias", kernels.I32, d.Shape, d.Values()))
		}), `"fc.bias" is I32, the model needs BF16`},
		{"unexpected", mutate(func(b *models.Bundle) {
			b.Add(models.NewData("layer9.conv.weight", kernels.BF16, []int{1}, []float64{1}))
		}), `unexpected tensor "layer9.conv.weight"`},
		{"truncated", buf.Bytes()[:buf.Len()-10], "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := models.LoadWeights(g, bytes.NewReader(tc.file))
			if !errors.Is(err, models.ErrSafetensors) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrSafetensors mentioning %q", err, tc.want)
			}
		})
	}
}

var tinyResNet = models.ResNetConfig{Blocks: [4]int{1, 1, 1, 1}, Image: 32, Width: 8, Classes: 10}

// A bundle whose floating-point tensors are of another floating-point type
// (f32 biases, as exported from an f32 model) loads, each value rounded to
// the model's type.
func TestLoadWeightsConvertsFloatTypes(t *testing.T) {
	g, good := tinyWeights(t)
	wide := &models.Bundle{Metadata: good.Metadata}
	for _, d := range good.Tensors() {
		if d.DType == kernels.BF16 {
			d = models.NewData(d.Name, kernels.F32, d.Shape, d.Values())
		}
		wide.Add(d)
	}
	loadsAs(t, g, wide, good, "an f32 bundle for a bf16 model")
}
