package models

import (
	"errors"
	"fmt"
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
}

// Model is one entry of the zoo.
type Model struct {
	name        string
	base        string
	phase       string
	description string
	build       func(b *builder, batch int)
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
	if m.build == nil {
		return nil, fmt.Errorf("%w: zero Model; get one with models.Get", ErrUnknownModel)
	}
	if batch < 1 || batch > MaxBatch {
		return nil, fmt.Errorf("%w: %s: batch %d, want 1..%d", ErrBatch, m.name, batch, MaxBatch)
	}
	b := &builder{}
	m.build(b, batch)
	for i, l := range b.layers {
		g := l.Op.Geometry()
		if g.Grid.X > maxGridX || g.Grid.Y > maxGridYZ || g.Grid.Z > maxGridYZ {
			return nil, fmt.Errorf("%w: %s at batch %d: layer %d (%s) needs grid %s, beyond CUDA's limits (x ≤ %d, y,z ≤ %d); use a smaller batch",
				ErrBatch, m.name, batch, i, l.Name, g.Grid, maxGridX, maxGridYZ)
		}
	}
	return b.layers, nil
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

// builder accumulates layers.
type builder struct{ layers []Layer }

func (b *builder) add(name string, op kernels.Op, params int) {
	b.layers = append(b.layers, Layer{Name: name, Op: op, Params: params})
}

// conv adds a forward convolution that owns its weights (and bias).
func (b *builder) conv(name string, c kernels.Conv2D) {
	b.add(name, c, ConvParams(c))
}

// linear adds a GEMM whose B operand is a weight matrix K x N.
func (b *builder) linear(name string, g kernels.GEMM) {
	b.add(name, g, LinearParams(g))
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
