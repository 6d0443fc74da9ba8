package models

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"atoll/kernels"
)

// ErrNoReference: a layer the CPU reference cannot execute (training ops:
// the reference covers inference graphs).
var ErrNoReference = errors.New("models: no CPU reference")

// Activations maps tensor names to their values (float64, each exactly
// representable in the tensor's type).
type Activations map[string][]float64

// Reference runs g's forward pass on the CPU from weights and inputs (both
// checked with CheckBundle first) and returns every tensor it computed,
// the inputs and weights included. Arithmetic is float64 (the kernels'
// CPU references where a layer's kernel has one: kernels.Reference), and
// every layer's output is rounded to its tensor's type (bf16 activations)
// before the next layer reads it, as on the GPU, so the GPU's result
// differs from it only by the kernels' own rounding (fp32 accumulation
// order, bf16 epilogues). Glue layers (Layer.Glue) and cost-only ops that
// inference needs (the embedding add, tanh) are computed here directly.
//
// It is a naive loop nest: meant for reduced configurations in tests and
// for single images of the full models (ResNet-50 at batch 1 takes seconds).
func Reference(g *Graph, weights, inputs *Bundle) (Activations, error) {
	p, err := Prepare(g, weights, false)
	if err != nil {
		return nil, err
	}
	return p.Run(inputs)
}

// Prepared is a graph with its weights checked and decoded once, to run
// many forward passes: what a daemon on the simulator computes each
// request's outputs with.
type Prepared struct {
	g      *Graph
	base   Activations        // weights, and optimizer state at zero
	pack   *kernels.PackCache // fast mode: the weights packed for MatMulFast
	arenas sync.Pool          // fast mode: *arena, one per concurrent Output
}

// Prepare checks weights against g and decodes them. With fast, GEMMs,
// convolutions and attention products run in float32 with fused
// multiply-adds (kernels.MatMulFast: a GPU's arithmetic, several times the
// plain loop's speed) — for serving; Reference, which checks use, keeps
// the plain loop's float64 sums.
func Prepare(g *Graph, weights *Bundle, fast bool) (*Prepared, error) {
	if err := CheckBundle(g, weights, KindWeight); err != nil {
		return nil, err
	}
	p := &Prepared{g: g, base: Activations{}}
	if fast {
		p.pack = &kernels.PackCache{}
	}
	for _, d := range weights.Tensors() {
		p.base[d.Name] = d.Values()
	}
	for _, t := range g.Tensors {
		if t.Kind == KindState { // optimizer state: zero at the first step, as on the device
			p.base[t.Name] = make([]float64, t.Elems())
		}
	}
	return p, nil
}

// Run runs one forward pass from inputs (checked with CheckBundle first)
// and returns every tensor computed, the inputs and weights included (the
// weights' values are shared between runs: read them, do not write them).
// Runs may proceed concurrently.
func (p *Prepared) Run(inputs *Bundle) (Activations, error) {
	g := p.g
	if err := CheckBundle(g, inputs, KindInput); err != nil {
		return nil, err
	}
	var env *refEnv
	if p.pack != nil {
		env = &refEnv{pack: p.pack}
	}
	return p.run(inputs, env)
}

// Output runs one forward pass like Run and returns only g's output (a
// copy). In fast mode its memory comes from an arena kept for the next
// call, so a stream of requests does not fault in fresh pages each time.
func (p *Prepared) Output(inputs *Bundle) ([]float64, error) {
	var env *refEnv
	if p.pack != nil {
		a, _ := p.arenas.Get().(*arena)
		if a == nil {
			a = &arena{}
		}
		defer func() {
			a.reset()
			p.arenas.Put(a)
		}()
		env = &refEnv{pack: p.pack, arena: a}
	}
	vals, err := p.run(inputs, env)
	if err != nil {
		return nil, err
	}
	return slices.Clone(vals[p.g.Output]), nil
}

func (p *Prepared) run(inputs *Bundle, env *refEnv) (Activations, error) {
	g := p.g
	if err := CheckBundle(g, inputs, KindInput); err != nil {
		return nil, err
	}
	vals := make(Activations, len(p.base)+len(g.Layers)+len(inputs.Tensors()))
	for k, v := range p.base {
		vals[k] = v
	}
	for _, d := range inputs.Tensors() {
		vals[d.Name] = d.Values()
	}
	for i, l := range g.Layers {
		outs, err := referenceLayer(g, l, vals, env)
		if err != nil {
			return nil, fmt.Errorf("models: %s reference, layer %d (%s): %w", g.Model, i, l.Name, err)
		}
		for j, name := range l.Out {
			vals[name] = outs[j]
		}
	}
	return vals, nil
}

// ReferenceLayer computes one layer of g on the CPU from vals (which must
// hold every tensor the layer reads) and returns its outputs in the order
// of l.Out, rounded to their types. Reference runs it layer by layer; a
// device runner uses it for layers the device cannot run (exec.Instance's
// host glue).
func ReferenceLayer(g *Graph, l Layer, vals Activations) ([][]float64, error) {
	return referenceLayer(g, l, vals, nil)
}

// refEnv is how a prepared fast run computes: products by
// kernels.MatMulFast with the weights packed once, memory from the run's
// arena (when it has one). A nil *refEnv is the plain reference.
type refEnv struct {
	pack  *kernels.PackCache
	arena *arena
}

// make is n zeroed values.
func (e *refEnv) make(n int) []float64 {
	if e == nil || e.arena == nil {
		return make([]float64, n)
	}
	return e.arena.alloc(n)
}

// buffers is the kernels.Buffers of a layer with n operands under e.
func (e *refEnv) buffers(n int) kernels.Buffers {
	b := kernels.Buffers{T: make([]kernels.Tensor, n)}
	if e != nil {
		b.Fast, b.Pack = true, e.pack
		if e.arena != nil {
			b.Alloc = e.arena.alloc
		}
	}
	return b
}

// arena hands out zeroed float64 slices from chunks kept across runs;
// reset makes them all free again. One run (one goroutine) uses it at a
// time.
type arena struct {
	chunks   [][]float64
	cur, off int
}

const arenaChunk = 1 << 20 // values: 8 MiB

func (a *arena) alloc(n int) []float64 {
	for a.cur < len(a.chunks) {
		c := a.chunks[a.cur]
		if a.off+n <= len(c) {
			s := c[a.off : a.off+n : a.off+n]
			a.off += n
			clear(s)
			return s
		}
		a.cur, a.off = a.cur+1, 0
	}
	c := make([]float64, max(n, arenaChunk))
	a.chunks = append(a.chunks, c)
	a.cur, a.off = len(a.chunks)-1, n
	return c[:n:n]
}

func (a *arena) reset() { a.cur, a.off = 0, 0 }

// referenceLayer is ReferenceLayer under env.
func referenceLayer(g *Graph, l Layer, vals Activations, env *refEnv) ([][]float64, error) {
	for _, n := range l.In {
		if _, ok := vals[n]; !ok {
			return nil, fmt.Errorf("%w: layer %s: no value for input %q", ErrNoReference, l.Name, n)
		}
	}
	for _, n := range l.W {
		if _, ok := vals[n]; !ok {
			return nil, fmt.Errorf("%w: layer %s: no value for weight %q", ErrNoReference, l.Name, n)
		}
	}
	if l.Part.Of > 0 {
		return referencePart(g, l, vals, env)
	}
	outs, err := refLayer(g, l, vals, env)
	if err != nil {
		return nil, err
	}
	if len(outs) != len(l.Out) {
		return nil, fmt.Errorf("%w: layer %s: %d results for %d outputs", ErrNoReference, l.Name, len(outs), len(l.Out))
	}
	for j, name := range l.Out {
		t, _ := g.Tensor(name)
		if len(outs[j]) != t.Elems() {
			return nil, fmt.Errorf("%w: layer %s: output %s has %d values, want %d", ErrNoReference, l.Name, name, len(outs[j]), t.Elems())
		}
		Round(t.DType, outs[j])
	}
	return outs, nil
}

// partShape is the shape of one of of slices of a tensor of shape s: the
// leading dimension cut where it divides, otherwise flat.
func partShape(s []int, of int) []int {
	if len(s) > 0 && s[0]%of == 0 {
		return append([]int{s[0] / of}, s[1:]...)
	}
	n := 1
	for _, d := range s {
		n *= d
	}
	return []int{n / of}
}

// referencePart computes a layer with a Part: its op over slice I of its
// sliced inputs, written into slice I of its sliced outputs (Layer.Sliced;
// an unsliced operand is passed whole). An output vals already holds (an
// earlier part's) is written in place; a new one is NaN outside the slice
// until the other parts write it.
func referencePart(g *Graph, l Layer, vals Activations, env *refEnv) ([][]float64, error) {
	i, of := l.Part.I, l.Part.Of
	// part is tensor name and its values v as the op on one slice sees them.
	part := func(name string, v []float64) (Tensor, []float64) {
		t, _ := g.Tensor(name)
		if !l.Sliced(t) {
			return t, v
		}
		t.Shape = partShape(t.Shape, of)
		n := len(v) / of
		return t, v[i*n : (i+1)*n : (i+1)*n]
	}
	pv := make(Activations, len(l.In)+len(l.W))
	pg := &Graph{Model: g.Model, Batch: g.Batch, index: map[string]int{}}
	for _, name := range slices.Concat(l.In, l.W, l.Out) {
		if _, ok := pg.index[name]; ok {
			continue
		}
		t, v := part(name, vals[name])
		if v != nil { // an output no earlier part wrote has none yet
			pv[name] = v
		}
		pg.index[name] = len(pg.Tensors)
		pg.Tensors = append(pg.Tensors, t)
	}
	whole := l
	whole.Part = Part{}
	outs, err := referenceLayer(pg, whole, pv, env)
	if err != nil {
		return nil, err
	}
	full := make([][]float64, len(l.Out))
	for j, name := range l.Out {
		t, _ := g.Tensor(name)
		v, ok := vals[name]
		if !ok || len(v) != t.Elems() {
			v = make([]float64, t.Elems())
			for k := range v {
				v[k] = math.NaN()
			}
		}
		_, s := part(name, v)
		copy(s, outs[j])
		full[j] = v
	}
	return full, nil
}

// Round rounds values to d (in place) and returns them.
func Round(d kernels.DType, v []float64) []float64 {
	switch d {
	case kernels.BF16:
		kernels.RoundBF16(v)
	case kernels.F16:
		for i, x := range v {
			v[i] = float64(kernels.F16ToF32(kernels.F32ToF16(float32(x))))
		}
	case kernels.F32:
		for i, x := range v {
			v[i] = float64(float32(x))
		}
	}
	return v
}

func refLayer(g *Graph, l Layer, vals Activations, env *refEnv) ([][]float64, error) {
	in := func(i int) []float64 { return vals[l.In[i]] }
	w := func(i int) []float64 { return vals[l.W[i]] }
	switch l.Glue {
	case "":
	case GlueNHWCMean:
		r := l.Op.(kernels.Reduce)
		x := in(0)
		t, _ := g.Tensor(l.Out[0])
		n, c := t.Shape[0], t.Shape[1]
		hw := r.Cols
		out := env.make(n * c)
		for img := range n {
			for p := range hw {
				row := x[(img*hw+p)*c:][:c]
				for ch, v := range row {
					out[img*c+ch] += v
				}
			}
		}
		for i := range out {
			out[i] /= float64(hw)
		}
		return [][]float64{out}, nil
	case GlueAttnScores, GlueAttnContext:
		return refAttention(g, l, vals, env)
	case GlueCLSRows:
		gm := l.Op.(kernels.GEMM)
		x := in(0)
		t, _ := g.Tensor(l.In[0])
		rows := t.Shape[0] / gm.M // sequence length
		a := make([]float64, gm.M*gm.K)
		for s := range gm.M {
			copy(a[s*gm.K:(s+1)*gm.K], x[s*rows*gm.K:])
		}
		return [][]float64{gemm(a, w(0), w(1), gm)}, nil
	default:
		return nil, fmt.Errorf("%w: glue %q (%s)", ErrNoReference, l.Glue, l.GlueNote)
	}
	switch o := l.Op.(type) {
	case kernels.Elementwise:
		switch o.Name {
		case "embed_add":
			// word + position[s] (+ token type 0).
			x, pos := in(0), w(0)
			t, _ := g.Tensor(l.W[0])
			h := t.Shape[1]
			ids, _ := g.Tensor(g.Inputs[0])
			seq := ids.Shape[1]
			out := env.make(len(x))
			for i := range out {
				tok, j := i/h, i%h
				out[i] = x[i] + pos[(tok%seq)*h+j]
				if len(l.W) > 1 {
					out[i] += w(1)[j]
				}
			}
			return [][]float64{out}, nil
		case "tanh":
			x := in(0)
			out := env.make(len(x))
			for i, v := range x {
				out[i] = math.Tanh(v)
			}
			return [][]float64{out}, nil
		}
	case kernels.Depthwise:
		// The kernel has no bias operand: add the folded bias here, before
		// the activation.
		nb := o
		nb.Act = kernels.ActNone
		y, err := refKernel(g, Layer{Name: l.Name, Op: nb, In: l.In, W: l.W[:1], Out: l.Out}, vals, env)
		if err != nil {
			return nil, err
		}
		bias := make([]float64, o.C)
		if len(l.W) > 1 {
			bias = w(1)
		}
		for i := range y[0] {
			y[0][i] = Activate(y[0][i]+bias[i%o.C], o.Act)
		}
		return y, nil
	}
	return refKernel(g, l, vals, env)
}

// refKernel runs kernels.Reference on the layer's operands.
func refKernel(g *Graph, l Layer, vals Activations, env *refEnv) ([][]float64, error) {
	names, dropped, err := Operands(g, l)
	if err != nil {
		if errors.Is(err, kernels.ErrUnsupported) {
			return nil, fmt.Errorf("%w: %w", ErrNoReference, err)
		}
		return nil, err
	}
	if len(dropped) > 0 {
		return nil, fmt.Errorf("%w: %s has no operand for %v", ErrNoReference, l.Op.Kernel(), dropped)
	}
	specs, _ := kernels.Tensors(l.Op)
	bufs := env.buffers(len(specs))
	for i, s := range specs {
		bufs.T[i] = kernels.Tensor{TensorSpec: s}
		if s.Role == kernels.Input || s.Role == kernels.Weight {
			v, ok := vals[names[i]]
			if !ok {
				return nil, fmt.Errorf("operand %s: tensor %q has no value", s.Name, names[i])
			}
			bufs.T[i].Host = v
		}
	}
	return kernels.Reference(l.Op, bufs)
}

// refAttention computes the attention GEMMs per (sequence, head) from the
// fused QKV projection [tokens, 3·h] laid out [tokens][3][heads][d].
func refAttention(g *Graph, l Layer, vals Activations, env *refEnv) ([][]float64, error) {
	matmul := kernels.MatMul
	if env != nil {
		matmul = kernels.MatMulFast
	}
	gm := l.Op.(kernels.GEMM)
	qkvName := l.In[len(l.In)-1]
	qkv := vals[qkvName]
	t, _ := g.Tensor(qkvName)
	h := t.Shape[1] / 3
	seq := gm.M
	batch := gm.Batch
	tokens := t.Shape[0]
	n := tokens / seq
	heads := batch / n
	d := h / heads
	at := func(part, tok, head, j int) float64 { return qkv[tok*3*h+part*h+head*d+j] }
	// Per (sequence, head): the operands gathered into contiguous matrices
	// and multiplied by kernels.MatMul, which sums in the plain loop's
	// order (over d for the scores, over the keys for the context). A
	// prepared fast run splits the heads across the CPUs (each head writes
	// its own part of out).
	eachHead := func(work int, head func(b int, x, y []float64)) {
		part := func(lo, hi int) {
			x, y := make([]float64, seq*d), make([]float64, seq*d)
			for b := lo; b < hi; b++ {
				head(b, x, y)
			}
		}
		if env == nil {
			part(0, batch)
			return
		}
		kernels.InParts(batch, work, part)
	}
	switch l.Glue {
	case GlueAttnScores:
		scale := 1 / math.Sqrt(float64(d))
		out := env.make(batch * seq * seq)
		eachHead(batch*seq*seq*d, func(b int, q, kt []float64) {
			img, head := b/heads, b%heads
			for i := range seq {
				for k := range d {
					q[i*d+k] = at(0, img*seq+i, head, k)
					kt[k*seq+i] = at(1, img*seq+i, head, k)
				}
			}
			s := out[b*seq*seq:][:seq*seq]
			matmul(s, q, kt, seq, seq, d)
			for i := range s {
				s[i] *= scale
			}
		})
		return [][]float64{out}, nil
	default: // context: P·V, heads merged
		p := vals[l.In[0]]
		out := env.make(tokens * h)
		eachHead(batch*seq*seq*d, func(b int, v, c []float64) {
			img, head := b/heads, b%heads
			for j := range seq {
				for k := range d {
					v[j*d+k] = at(2, img*seq+j, head, k)
				}
			}
			clear(c)
			matmul(c, p[b*seq*seq:][:seq*seq], v, seq, d, seq)
			for i := range seq {
				copy(out[(img*seq+i)*h+head*d:][:d], c[i*d:][:d])
			}
		})
		return [][]float64{out}, nil
	}
}

// gemm is act(a·b + bias) for a [M,K], b [K,N].
func gemm(a, b, bias []float64, g kernels.GEMM) []float64 {
	c := make([]float64, g.M*g.N)
	for i := range g.M {
		row := c[i*g.N : (i+1)*g.N]
		for k := range g.K {
			av := a[i*g.K+k]
			for j, bv := range b[k*g.N : (k+1)*g.N] {
				row[j] += av * bv
			}
		}
		for j := range row {
			if bias != nil {
				row[j] += bias[j]
			}
			row[j] = Activate(row[j], g.Act)
		}
	}
	return c
}

// Activate applies a fused activation with the kernels' formulas (GELU:
// the tanh approximation).
func Activate(x float64, a kernels.Act) float64 {
	switch a {
	case kernels.ActReLU:
		return math.Max(x, 0)
	case kernels.ActGELU:
		return 0.5 * x * (1 + math.Tanh(0.7978845608028654*(x+0.044715*x*x*x)))
	case kernels.ActReLU6:
		return math.Min(math.Max(x, 0), 6)
	}
	return x
}

// RelErr is ‖got − ref‖₂ / ‖ref‖₂ (kernels.RelErr): NaN or Inf in got
// gives +Inf.
func RelErr(got, ref []float64) float64 { return kernels.RelErr(got, ref) }
