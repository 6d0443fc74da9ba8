package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"atoll/kernels"
)

// Phases of a model.
const (
	PhaseInference = "inference"
	PhaseTraining  = "training"
)

// MaxBatch is the largest batch size Ops accepts. Larger batches are
// refused as a typo rather than built (they also overflow CUDA's grid
// limits for the convolutional models long before this).
const MaxBatch = 4096

// Errors. All errors returned by this package wrap one of these.
var (
	ErrUnknownModel = errors.New("models: unknown model")
	ErrBatch        = errors.New("models: invalid batch size")
	// ErrConfig: a model configuration that cannot be built (NewResNet,
	// NewBERT).
	ErrConfig = errors.New("models: invalid configuration")
)

// CUDA grid limits (compute capability 3.0 and later).
const (
	maxGridX  = 1<<31 - 1
	maxGridYZ = 65535
)

// Layer is one kernel launch of a model.
type Layer struct {
	// Name is the layer's name in the usual framework naming, e.g.
	// "layer2.0.conv1" or "encoder.3.attention.qkv"; backward and update
	// ops carry a suffix or prefix that says so (".dgrad", ".wgrad",
	// "optimizer.adam").
	Name string
	Op   kernels.Op
	// Params is the number of trainable parameters this launch owns (reads
	// as weights in the forward pass). Zero for ops on activations only and
	// for all backward and optimizer ops.
	Params int

	// Dataflow: the names of the tensors (Graph.Tensors) the launch reads
	// and writes. In lists the activations (inputs, gradients, optimizer
	// state) read, W the parameters read, Out the tensors written, each in
	// the order the op's kernel takes operands of that kind (see
	// kernels.Tensors: a kernel's Input operands take In in order, its
	// Weight operands W in order and then, when W is used up, the rest of In
	// — the batched attention GEMMs have no weights — and its Output
	// operands Out in order).
	In, W, Out []string
	// Glue, when set, names a layout change the layer's kernel would need
	// but no kernel of the sequence performs (e.g. "nhwc_mean": global
	// average pooling over an NHWC tensor, which the row reduction kernel
	// cannot read). The CPU reference executes it (see Reference); a GPU
	// Instance refuses to bind the layer. GlueNote says why in words.
	Glue     string
	GlueNote string
	// Part, when Part.Of > 0, makes the layer one of Of launches that
	// together compute one op over a batch cut into equal slices: Op is
	// the op on one slice, and every In and Out tensor that is not a
	// weight holds Of slices of the operand Op takes (leading dimension:
	// images, or a filter gradient's partial sums), of which the layer
	// reads and writes slice Part.I. W is whole. The other slices of its
	// outputs are left as they are, written by the other parts.
	Part Part
}

// Part is a layer's slice of a batch cut into Of equal slices (see
// Layer.Part); the zero Part is the whole batch.
type Part struct{ I, Of int }

// Sliced reports whether the layer reads or writes only a slice of t (a
// tensor of its graph that is not a weight, in a layer with a Part).
func (l Layer) Sliced(t Tensor) bool { return l.Part.Of > 0 && t.Kind != KindWeight }

// InPlace reports whether the layer writes a tensor it also reads (Out
// names one of In or W): an optimizer update. Re-running it after a partial
// or complete run is not the same as running it once.
func (l Layer) InPlace() bool {
	for _, o := range l.Out {
		for _, r := range l.In {
			if o == r {
				return true
			}
		}
		for _, r := range l.W {
			if o == r {
				return true
			}
		}
	}
	return false
}

// Model is one entry of the zoo.
type Model struct {
	name        string
	base        string
	phase       string
	description string
	build       func(b *builder, batch int)
	// arch and config describe the architecture for other tools
	// (tools/torchref builds the same network from them).
	arch   string
	config any
	// weights, for an imported model, are its own (FromONNX); nil: the
	// zoo's random initialization (InitWeights).
	weights *Bundle
	// io, for an imported model, is the file's own input and output.
	io *ONNXIO
}

// ONNXIO is an imported model's input and output as the ONNX file names
// them: clients send the image as the file's input (float32 NCHW), which
// the engine transposes into atoll's bf16 NHWC "input".
type ONNXIO struct {
	Input string
	// An image model's input: float32 [N, C, H, W].
	C, H, W int
	// Tokens: the input is integer token ids [N, Seq] in [0, Vocab) (a
	// BERT-family encoder).
	Tokens     bool
	Seq, Vocab int
	Output     string
	// OutShape is one sample's output shape as the file has it (nil: the
	// graph's output shape).
	OutShape []int
	// Notes say where the import approximates the file (GELU's form,
	// layernorm's epsilon, folded tables).
	Notes []string
}

// ONNXIO is the file's input and output for an imported model, nil for a
// zoo model.
func (m Model) ONNXIO() *ONNXIO { return m.io }

// Weights is an imported model's own weights in atoll's layouts, or nil
// for a zoo model (InitWeights draws those).
func (m Model) Weights() *Bundle { return m.weights }

// Arch names the architecture family ("resnet", "bert", "vgg19",
// "mobilenetv2") and returns its configuration as JSON (a ResNetConfig or
// BERTConfig with lower-case keys; "{}" for the fixed architectures).
// Weights files record both in their metadata so that tools/torchref can
// build the same network in PyTorch.
func (m Model) Arch() (family, config string) {
	if m.config == nil {
		return m.arch, "{}"
	}
	js, err := json.Marshal(m.config)
	if err != nil {
		panic("models: config does not marshal: " + err.Error()) // a build defect
	}
	return m.arch, string(js)
}

// Name is the zoo name, e.g. "bert-base-384" or "resnet50-train".
func (m Model) Name() string { return m.name }

// Base is the architecture's name without the phase, e.g. "resnet50" for
// "resnet50-train".
func (m Model) Base() string { return m.base }

// Phase is PhaseInference or PhaseTraining.
func (m Model) Phase() string { return m.phase }

// Description says what the model is, in one line.
func (m Model) Description() string { return m.description }

// Ops builds the model's launch sequence for the given batch size: one
// request (inference) or one training step. batch must be in
// [1, MaxBatch] and small enough that every launch fits CUDA's grid limits.
func (m Model) Ops(batch int) ([]Layer, error) {
	layers, _, err := m.build1(batch)
	return layers, err
}

func (m Model) build1(batch int) ([]Layer, *builder, error) {
	if m.build == nil {
		return nil, nil, fmt.Errorf("%w: zero Model; get one with models.Get", ErrUnknownModel)
	}
	if batch < 1 || batch > MaxBatch {
		return nil, nil, fmt.Errorf("%w: %s: batch %d, want 1..%d", ErrBatch, m.name, batch, MaxBatch)
	}
	b := &builder{tensors: map[string]int{}}
	m.build(b, batch)
	for i, l := range b.layers {
		g := l.Op.Geometry()
		if g.Grid.X > maxGridX || g.Grid.Y > maxGridYZ || g.Grid.Z > maxGridYZ {
			return nil, nil, fmt.Errorf("%w: %s at batch %d: layer %d (%s) needs grid %s, beyond CUDA's limits (x ≤ %d, y,z ≤ %d); use a smaller batch",
				ErrBatch, m.name, batch, i, l.Name, g.Grid, maxGridX, maxGridYZ)
		}
	}
	return b.layers, b, nil
}

var zoo = map[string]Model{}

func register(m Model) {
	if _, dup := zoo[m.name]; dup {
		panic("models: duplicate model " + m.name)
	}
	zoo[m.name] = m
}

// Names lists the zoo, sorted.
func Names() []string {
	names := make([]string, 0, len(zoo))
	for n := range zoo {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Get finds a model by its zoo name (case-insensitive).
func Get(name string) (Model, error) {
	if m, ok := zoo[strings.ToLower(strings.TrimSpace(name))]; ok {
		return m, nil
	}
	if strings.HasSuffix(strings.ToLower(name), ".onnx") {
		return importONNX(name)
	}
	if m, ok := importedNamed(strings.TrimSpace(name)); ok {
		return m, nil
	}
	return Model{}, fmt.Errorf("%w %q (the zoo has: %s)", ErrUnknownModel, name, strings.Join(Names(), ", "))
}

// Params is the number of trainable parameters of a launch sequence.
func Params(layers []Layer) int {
	n := 0
	for _, l := range layers {
		n += l.Params
	}
	return n
}

// FLOPs is the total floating-point operations of a launch sequence.
func FLOPs(layers []Layer) float64 {
	f := 0.0
	for _, l := range layers {
		f += l.Op.FLOPs()
	}
	return f
}

// Ops returns just the ops of a launch sequence, in order (what
// profiles.Check takes).
func Ops(layers []Layer) []kernels.Op {
	ops := make([]kernels.Op, len(layers))
	for i, l := range layers {
		ops[i] = l.Op
	}
	return ops
}

// builder accumulates layers and the tensors they name.
type builder struct {
	layers  []Layer
	tensors map[string]int // name -> index in list
	list    []Tensor
	inputs  []string
	output  string
	// patchBytes bounds the patches one launch of a training convolution
	// gathers (convParts; 0: maxPatchBytes).
	patchBytes int64
}

// add appends a layer and returns it so that the caller can wire its
// dataflow.
func (b *builder) add(name string, op kernels.Op, params int) *Layer {
	b.layers = append(b.layers, Layer{Name: name, Op: op, Params: params})
	return &b.layers[len(b.layers)-1]
}

// ConvParams is the parameter count of a forward convolution's weights:
// OutC·R·S·C, plus OutC when it has a bias.
func ConvParams(c kernels.Conv2D) int {
	p := c.OutC * c.R * c.S * c.C
	if c.Bias {
		p += c.OutC
	}
	return p
}

// LinearParams is the parameter count of a linear layer as a GEMM whose B
// operand is the K x N weight matrix: K·N, plus N when it has a bias.
func LinearParams(g kernels.GEMM) int {
	p := g.K * g.N
	if g.Bias {
		p += g.N
	}
	return p
}

// DepthwiseParams is the parameter count of a depthwise convolution with
// its folded batch-norm bias: C·R·S + C.
func DepthwiseParams(d kernels.Depthwise) int { return d.C*d.R*d.S + d.C }

// EmbeddingParams is the size of a gather's table: Vocab·Cols (Rows·Cols
// when Vocab is 0).
func EmbeddingParams(g kernels.Gather) int {
	v := g.Vocab
	if v == 0 {
		v = g.Rows
	}
	return v * g.Cols
}

// LayerNormParams is 2·Cols (scale and shift).
func LayerNormParams(l kernels.LayerNorm) int { return 2 * l.Cols }

// ErrInput is wrapped by GraphInput's errors: a value the model cannot
// take (a token id out of the vocabulary, a non-finite pixel, a wrong count).
var ErrInput = errors.New("models: bad input")

// GraphInput converts one request's input as the ONNX file has it —
// float32 [N, C, H, W] for an image model, integer token ids [N, Seq] for
// an encoder — into g's input (bf16 NHWC image, or I32 ids), checking every
// value on the way.
func (io *ONNXIO) GraphInput(g *Graph, vals []float64) (*Bundle, error) {
	gt, _ := g.Tensor(g.Inputs[0])
	n := g.Batch
	if io.Tokens {
		if len(vals) != n*io.Seq {
			return nil, fmt.Errorf("%w: input %q has %d values; shape [%d %d] needs %d", ErrInput, io.Input, len(vals), n, io.Seq, n*io.Seq)
		}
		for i, v := range vals {
			if v != math.Trunc(v) || v < 0 || v >= float64(io.Vocab) {
				return nil, fmt.Errorf("%w: input %q value %d is %v; it must be a token id in [0, %d)", ErrInput, io.Input, i, v, io.Vocab)
			}
		}
		b := &Bundle{}
		b.Add(NewData(gt.Name, gt.DType, gt.Shape, vals))
		return b, nil
	}
	c, h, w := io.C, io.H, io.W
	if len(vals) != n*c*h*w {
		return nil, fmt.Errorf("%w: input %q has %d values; shape [%d %d %d %d] needs %d", ErrInput, io.Input, len(vals), n, c, h, w, n*c*h*w)
	}
	nhwc := make([]float64, len(vals))
	for b := range n {
		for ch := range c {
			for y := range h {
				for x := range w {
					i := ((b*c+ch)*h+y)*w + x
					v := vals[i]
					if math.IsNaN(v) || math.IsInf(v, 0) {
						return nil, fmt.Errorf("%w: input %q value %d is %v; send finite numbers", ErrInput, io.Input, i, v)
					}
					nhwc[((b*h+y)*w+x)*c+ch] = v
				}
			}
		}
	}
	b := &Bundle{}
	b.Add(NewData(gt.Name, gt.DType, gt.Shape, nhwc))
	return b, nil
}
