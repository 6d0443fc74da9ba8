package models

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"slices"
	"strings"

	"atoll/internal/pcg"
	"atoll/kernels"
)

// ErrOperands: a layer whose dataflow does not fit its kernel's operands
// (a build defect, or a Layer made by hand).
var ErrOperands = errors.New("models: layer operands do not fit the kernel")

// Operands maps a layer's dataflow onto its kernel's operands
// (kernels.Tensors order): Input operands take In in order; Weight operands
// take W in order and then the rest of In (the batched attention GEMMs read
// two activations); Output operands take Out in order. dropped lists the
// W names no operand takes (the folded bias of a depthwise convolution,
// whose kernel has no bias operand). It fails for an op the kernel
// library cannot launch and for a dataflow that runs short.
func Operands(g *Graph, l Layer) (names, dropped []string, err error) {
	specs, err := kernels.Tensors(l.Op)
	if err != nil {
		return nil, nil, err
	}
	in, w, out := l.In, l.W, l.Out
	take := func(list *[]string) (string, bool) {
		if len(*list) == 0 {
			return "", false
		}
		n := (*list)[0]
		*list = (*list)[1:]
		return n, true
	}
	names = make([]string, len(specs))
	for i, s := range specs {
		var ok bool
		switch s.Role {
		case kernels.Input:
			names[i], ok = take(&in)
		case kernels.Weight:
			if names[i], ok = take(&w); !ok {
				names[i], ok = take(&in)
			}
		case kernels.Output:
			names[i], ok = take(&out)
		case kernels.Scratch:
			ok = true // the kernel's own memory, no tensor of the graph (names[i] = "")
		}
		if !ok {
			return nil, nil, fmt.Errorf("%w: layer %s: no tensor for %s operand %s of %s", ErrOperands, l.Name, s.Role, s.Name, l.Op.Kernel())
		}
	}
	if len(in) > 0 || len(out) > 0 {
		return nil, nil, fmt.Errorf("%w: layer %s: %s has no operand for %v", ErrOperands, l.Name, l.Op.Kernel(), slices.Concat(in, out))
	}
	return names, w, nil
}

// InitWeights draws every weight of g from seed, deterministically (each
// tensor from its own stream keyed by seed and name, so a weight's values
// do not depend on the others), rounded to the tensor's type:
//
//   - convolution weights [R,S,C,OutC]: He (Kaiming) uniform, bound
//     √(6/fan_in), fan_in = R·S·C; the last convolution of a residual
//     branch (a conv with a residual input) is scaled by 0.25 so that
//     activations do not grow with depth (BN is folded away);
//   - linear weights [K,N] and embedding tables: Xavier uniform, bound
//     √(6/(fan_in+fan_out)); embedding tables use std 0.02 as BERT does;
//   - biases (folded batch norm in inference CNNs): uniform ±0.05, except
//     depthwise biases, which are zero because the depthwise kernel has no
//     bias operand;
//   - layernorm and batch-norm scales 1 ± 0.1, shifts ±0.1.
func InitWeights(g *Graph, seed uint64) *Bundle {
	resid := map[string]bool{}
	depthwise := map[string]bool{}
	for _, l := range g.Layers {
		if c, ok := l.Op.(kernels.Conv2D); ok && c.Residual && len(l.W) > 0 {
			resid[l.W[0]] = true
		}
		if _, ok := l.Op.(kernels.Depthwise); ok {
			for _, w := range l.W[1:] {
				depthwise[w] = true
			}
		}
	}
	b := &Bundle{Metadata: g.metadata()}
	b.Metadata["seed"] = fmt.Sprint(seed)
	chunk := make([]float64, 1<<14)
	for _, t := range g.Weights() {
		h := fnv.New64a()
		io.WriteString(h, t.Name)
		rng := pcg.New(seed, h.Sum64())
		name := t.Name
		bound := 0.0
		var post func(float64) float64 // after the draw, before rounding
		switch {
		case depthwise[name]:
			// zero
		case strings.HasSuffix(name, ".bias") && len(t.Shape) == 1:
			bound = 0.05
		case strings.HasSuffix(name, "norm.weight") || strings.HasSuffix(name, ".bn.weight"):
			bound, post = 0.1, func(v float64) float64 { return v + 1 }
		case strings.HasSuffix(name, "_embeddings.weight"):
			bound = 0.02 * math.Sqrt(3)
		case len(t.Shape) == 4: // conv [R,S,C,OutC]
			fanIn := t.Shape[0] * t.Shape[1] * t.Shape[2]
			bound = math.Sqrt(6 / float64(fanIn))
			if resid[name] {
				post = func(v float64) float64 { return v * 0.25 }
			}
		case len(t.Shape) == 3: // depthwise [R,S,C]
			bound = math.Sqrt(6 / float64(t.Shape[0]*t.Shape[1]))
		case len(t.Shape) == 2: // linear [K,N]
			bound = math.Sqrt(6 / float64(t.Shape[0]+t.Shape[1]))
		default:
			bound = 0.1
		}
		// Drawn and encoded a chunk at a time: a full-size model's weights
		// never exist as float64 all at once.
		d := &Data{Name: name, DType: t.DType, Shape: slices.Clone(t.Shape), Raw: make([]byte, t.Elems()*t.DType.Size())}
		if bound > 0 {
			size := t.DType.Size()
			for i := 0; i < t.Elems(); i += len(chunk) {
				v := chunk[:min(len(chunk), t.Elems()-i)]
				fillUniform(v, rng, bound)
				if post != nil {
					for j := range v {
						v[j] = post(v[j])
					}
				}
				kernels.EncodeTo(d.Raw[i*size:(i+len(v))*size], t.DType, v)
			}
		}
		b.Add(d)
	}
	return b
}

// InitInputs draws the model inputs of g from seed: images uniform in
// [-1, 1) (a normalised image), token ids uniform over the vocabulary,
// labels uniform over the classes.
func InitInputs(g *Graph, seed uint64) *Bundle {
	b := &Bundle{Metadata: g.metadata()}
	b.Metadata["seed"] = fmt.Sprint(seed)
	rng := pcg.New(seed, 0x696e70757473) // "inputs"
	for _, name := range g.Inputs {
		t, _ := g.Tensor(name)
		v := make([]float64, t.Elems())
		if t.DType == kernels.I32 {
			n, ok := g.IntRange(name)
			if !ok {
				n = 1
			}
			for i := range v {
				v[i] = float64(rng.IntN(n))
			}
		} else {
			for i := range v {
				v[i] = rng.Float64()*2 - 1
			}
		}
		b.Add(NewData(name, t.DType, t.Shape, v))
	}
	return b
}

// metadata is what atoll records in its safetensors files: the format,
// the model, its architecture and configuration (see Model.Arch), the
// batch, and the output tensor's name.
func (g *Graph) metadata() map[string]string {
	return map[string]string{"format": "atoll", "model": g.Model, "arch": g.arch, "config": g.config,
		"batch": fmt.Sprint(g.Batch), "output": g.Output}
}

// IntRange is the exclusive bound of an integer input: the vocabulary of
// the gather that reads it, or the classes of the loss; ok is false when no
// layer bounds it.
func (g *Graph) IntRange(name string) (bound int, ok bool) {
	for _, l := range g.Layers {
		if !slices.Contains(l.In, name) {
			continue
		}
		switch o := l.Op.(type) {
		case kernels.Gather:
			return o.Vocab, true
		case kernels.Reduce:
			return o.Cols, true
		case kernels.XentLoss:
			return o.Classes, true
		}
	}
	return 0, false
}

// CheckBundle verifies that b holds exactly the tensors of kind (weights or
// inputs) g needs, with their shapes and types. The error wraps
// ErrSafetensors and names the first offending tensor.
func CheckBundle(g *Graph, b *Bundle, kind Kind) error {
	var want []Tensor
	for _, t := range g.Tensors {
		if t.Kind == kind {
			want = append(want, t)
		}
	}
	for _, t := range want {
		d, ok := b.Get(t.Name)
		if !ok {
			return fmt.Errorf("%w: %s %s: missing %s tensor %q (%s%v)", ErrSafetensors, g.Model, kind, kind, t.Name, t.DType, t.Shape)
		}
		if d.DType != t.DType {
			return fmt.Errorf("%w: %s: tensor %q is %s, the model needs %s (convert it when exporting)", ErrSafetensors, g.Model, t.Name, stName(d.DType), stName(t.DType))
		}
		if !slices.Equal(d.Shape, t.Shape) {
			return fmt.Errorf("%w: %s: tensor %q has shape %v, the model needs %v", ErrSafetensors, g.Model, t.Name, d.Shape, t.Shape)
		}
		if len(d.Raw) != d.Elems()*d.DType.Size() {
			return fmt.Errorf("%w: %s: tensor %q holds %d bytes, its shape needs %d", ErrSafetensors, g.Model, t.Name, len(d.Raw), d.Elems()*d.DType.Size())
		}
	}
	if kind == KindInput {
		if err := checkLabels(g, b); err != nil {
			return err
		}
	}
	if b.Len() != len(want) {
		for _, d := range b.Tensors() {
			if t, ok := g.Tensor(d.Name); !ok || t.Kind != kind {
				return fmt.Errorf("%w: %s: unexpected tensor %q: the model has no %s of that name (a file for another model or configuration?)", ErrSafetensors, g.Model, d.Name, kind)
			}
		}
	}
	return nil
}

// LoadWeights reads a safetensors file and checks it holds exactly g's
// weights (names, shapes and types). A floating-point tensor stored in
// another floating-point type than g's is converted (rounded to g's type),
// as PyTorch's load_state_dict does: a file with f32 biases loads into a
// graph that keeps them in bf16.
func LoadWeights(g *Graph, r io.Reader) (*Bundle, error) {
	b, err := ReadSafetensors(r)
	if err != nil {
		return nil, err
	}
	convertFloats(g, b)
	if err := CheckBundle(g, b, KindWeight); err != nil {
		return nil, err
	}
	return b, nil
}

// convertFloats re-encodes each weight of b whose floating-point type
// differs from g's, when both types are floating-point.
func convertFloats(g *Graph, b *Bundle) {
	isFloat := func(d kernels.DType) bool { return d == kernels.F32 || d == kernels.F16 || d == kernels.BF16 }
	for _, t := range g.Tensors {
		d, ok := b.Get(t.Name)
		if t.Kind != KindWeight || !ok || d.DType == t.DType || !isFloat(d.DType) || !isFloat(t.DType) {
			continue
		}
		b.Add(NewData(t.Name, t.DType, d.Shape, d.Values()))
	}
}

// fillUniform sets v to uniform draws from (−bound, bound).
//
// It runs unseen by the race detector (go:norace), and draws from
// internal/pcg rather than through math/rand (whose every call the
// detector instruments): it touches only v and rng, which its caller owns, and a
// full-size model's hundreds of millions of draws made every test that
// builds one ten times slower under -race.
//
//go:norace
func fillUniform(v []float64, rng *pcg.Source, bound float64) {
	for i := range v {
		v[i] = (rng.Float64()*2 - 1) * bound
	}
}
