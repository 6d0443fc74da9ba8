package models

import (
	"fmt"
	"slices"

	"atoll/kernels"
)

// Kind says what a named tensor of a model holds.
type Kind uint8

const (
	// KindInput is a model input: the image batch, token ids, labels.
	KindInput Kind = iota
	// KindWeight is a trainable parameter (or, in inference models, a
	// folded batch-norm bias): what a weights file holds.
	KindWeight
	// KindActivation is a forward intermediate (or the output).
	KindActivation
	// KindGradient is a backward intermediate or a parameter gradient.
	KindGradient
	// KindState is optimizer state (momentum, Adam moments), zero at the
	// first step.
	KindState
)

var kindNames = [...]string{"input", "weight", "activation", "gradient", "state"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Tensor is one named tensor of a model's dataflow. Shapes are row-major
// with the framework conventions atoll uses: activations NHWC ([N, H, W, C])
// or [rows, cols]; convolution weights [R, S, C, OutC] (HWIO); linear
// weights [K, N] (in, out: the GEMM's B operand, the transpose of
// PyTorch's nn.Linear weight); biases, layernorm and batch-norm parameters
// [C] in f32.
type Tensor struct {
	Name  string
	Shape []int
	DType kernels.DType
	Kind  Kind
}

// Elems is the product of the shape.
func (t Tensor) Elems() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Bytes is the tensor's size in its type.
func (t Tensor) Bytes() int64 { return int64(t.Elems()) * int64(t.DType.Size()) }

func (t Tensor) String() string {
	return fmt.Sprintf("%s %s%v (%s)", t.Name, t.DType, t.Shape, t.Kind)
}

// Graph is a model's launch sequence at one batch size with its dataflow:
// every tensor the layers name, which ones are the inputs and which is the
// output.
type Graph struct {
	Model  string
	Batch  int
	Layers []Layer
	// Tensors lists every named tensor in order of first mention.
	Tensors []Tensor
	// Inputs are the model's inputs (KindInput), Output the tensor that
	// holds the result: the logits (or pooled output) of an inference
	// model, the loss of a training step.
	Inputs []string
	Output string

	index        map[string]int
	arch, config string
}

// Tensor finds a tensor by name.
func (g *Graph) Tensor(name string) (Tensor, bool) {
	i, ok := g.index[name]
	if !ok {
		return Tensor{}, false
	}
	return g.Tensors[i], true
}

// Weights lists the KindWeight tensors in order of first use: the contents
// of a weights file for this model.
func (g *Graph) Weights() []Tensor {
	var w []Tensor
	for _, t := range g.Tensors {
		if t.Kind == KindWeight {
			w = append(w, t)
		}
	}
	return w
}

// Graph builds the model at batch size batch with its dataflow. The layers
// are exactly those of Ops(batch).
func (m Model) Graph(batch int) (*Graph, error) {
	layers, b, err := m.build1(batch)
	if err != nil {
		return nil, err
	}
	g := &Graph{Model: m.name, Batch: batch, Layers: layers, Tensors: b.list, Inputs: b.inputs, Output: b.output, index: b.tensors}
	g.arch, g.config = m.Arch()
	if err := g.check(); err != nil {
		return nil, fmt.Errorf("models: %s: %w", m.name, err) // a build defect
	}
	return g, nil
}

// check verifies the dataflow: every name declared, every activation or
// gradient written before it is read, the output written.
func (g *Graph) check() error {
	written := map[string]bool{}
	for _, in := range g.Inputs {
		written[in] = true
	}
	for i, l := range g.Layers {
		for _, names := range [][]string{l.In, l.W, l.Out} {
			for _, n := range names {
				if _, ok := g.index[n]; !ok {
					return fmt.Errorf("layer %d (%s) names undeclared tensor %q", i, l.Name, n)
				}
			}
		}
		for _, n := range slices.Concat(l.In, l.W) {
			t, _ := g.Tensor(n)
			if (t.Kind == KindActivation || t.Kind == KindGradient) && !written[n] {
				return fmt.Errorf("layer %d (%s) reads %q before any layer writes it", i, l.Name, n)
			}
		}
		if len(l.Out) == 0 {
			return fmt.Errorf("layer %d (%s) writes nothing", i, l.Name)
		}
		if l.Part != (Part{}) {
			if l.Part.Of < 1 || l.Part.I < 0 || l.Part.I >= l.Part.Of {
				return fmt.Errorf("layer %d (%s) is part %d of %d", i, l.Name, l.Part.I, l.Part.Of)
			}
			for _, n := range slices.Concat(l.In, l.Out) {
				if t, _ := g.Tensor(n); l.Sliced(t) && t.Elems()%l.Part.Of != 0 {
					return fmt.Errorf("layer %d (%s): tensor %v does not cut into %d slices", i, l.Name, t, l.Part.Of)
				}
			}
		}
		for _, n := range l.Out {
			written[n] = true
		}
	}
	if !written[g.Output] {
		return fmt.Errorf("output %q is never written", g.Output)
	}
	return nil
}

// tensor declares a tensor (once; a second declaration must agree) and
// returns its name.
func (b *builder) tensor(name string, kind Kind, dt kernels.DType, shape ...int) string {
	if i, ok := b.tensors[name]; ok {
		t := b.list[i]
		if t.Kind != kind || t.DType != dt || !slices.Equal(t.Shape, shape) {
			panic(fmt.Sprintf("models: tensor %s declared as %v and as %s %s%v", name, t, dt, kind, shape))
		}
		return name
	}
	b.tensors[name] = len(b.list)
	b.list = append(b.list, Tensor{Name: name, Shape: shape, DType: dt, Kind: kind})
	return name
}

func (b *builder) input(name string, dt kernels.DType, shape ...int) string {
	b.inputs = append(b.inputs, b.tensor(name, KindInput, dt, shape...))
	return name
}

func (b *builder) act(name string, dt kernels.DType, shape ...int) string {
	return b.tensor(name, KindActivation, dt, shape...)
}

func (b *builder) weight(name string, dt kernels.DType, shape ...int) string {
	return b.tensor(name, KindWeight, dt, shape...)
}

// grad declares the gradient of tensor x (same shape and type, or the
// given type) and returns its name, "grad:" + x.
func (b *builder) grad(x string) string {
	t := b.list[b.tensors[x]]
	return b.tensor(GradName(x), KindGradient, t.DType, t.Shape...)
}

// gradPart declares one consumer's share of x's gradient (summed by a
// grad_add layer): "grad:" + x + "@" + consumer.
func (b *builder) gradPart(x, consumer string) string {
	t := b.list[b.tensors[x]]
	return b.tensor(GradName(x)+"@"+consumer, KindGradient, t.DType, t.Shape...)
}

// GradName is the name of the gradient of tensor x in a training graph.
func GradName(x string) string { return "grad:" + x }

// conv adds a forward convolution (inference: BN folded into the bias)
// reading x (and resid when c.Residual), with weights name.weight
// [R,S,C,OutC] and, with c.Bias, name.bias [OutC] of c.BiasType. It writes and
// returns the tensor name [N,OH,OW,OutC].
func (b *builder) conv(name, x string, c kernels.Conv2D, resid string) string {
	l := b.add(name, c, ConvParams(c))
	oh, ow := c.Out()
	out := b.act(name, c.In, c.N, oh, ow, c.OutC)
	l.In = []string{x}
	l.W = []string{b.weight(name+".weight", c.In, c.R, c.S, c.C, c.OutC)}
	if c.Bias {
		l.W = append(l.W, b.weight(name+".bias", c.BiasType, c.OutC))
	}
	if c.Residual {
		l.In = append(l.In, resid)
	}
	l.Out = []string{out}
	return out
}

// linear adds a GEMM whose B operand is the weight matrix name.weight
// [K,N] (and name.bias [N] of g.BiasType), reading x [M,K]; it writes and returns
// name [M,N].
func (b *builder) linear(name, x string, g kernels.GEMM) string {
	l := b.add(name, g, LinearParams(g))
	out := b.act(name, g.Out, g.M, g.N)
	l.In = []string{x}
	l.W = []string{b.weight(name+".weight", g.In, g.K, g.N)}
	if g.Bias {
		l.W = append(l.W, b.weight(name+".bias", g.BiasType, g.N))
	}
	l.Out = []string{out}
	return out
}

// op adds a layer with its dataflow in one call.
func (b *builder) op(name string, op kernels.Op, params int, in, w, out []string) *Layer {
	l := b.add(name, op, params)
	l.In, l.W, l.Out = in, w, out
	return l
}
