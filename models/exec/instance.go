package exec

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/models"
	"atoll/profiles"
)

// Errors.
var (
	// ErrNotRunnable: a layer the kernel library cannot launch as the model
	// describes it — a glue layer (models.Layer.Glue), an op the library
	// only costs (kernels.ErrUnsupported), operands whose types or sizes
	// do not fit. The message names the layer and the missing piece.
	ErrNotRunnable = errors.New("exec: layer not runnable on the device")
	// ErrInstance: bad use of an Instance (unknown tensor or layer, wrong
	// inputs, a closed instance).
	ErrInstance = errors.New("exec: bad instance use")
)

// Instance is one model at one batch size resident on a device: every
// tensor of its graph (weights, inputs, activations) in its own device
// buffer, and each layer's kernel operands bound to those buffers. It
// launches layers in any form (Launch, InstanceBinder) and runs whole forward
// passes (Run).
//
// An Instance belongs to the goroutine that owns its device.
type Instance struct {
	dev    gpu.Device
	lib    *kernels.Library
	g      *models.Graph
	ptr    map[string]gpu.Ptr
	layers []layer
	costs  []gpu.Cost           // from a profile (UseProfile); nil: the ops' FLOPs and bytes
	vendor [][]gpu.VendorLaunch // from a profile (UseProfile): each vendor call's launches
	bytes  int64

	stream         gpu.Stream
	start, end     gpu.Event
	last           time.Duration
	closed         bool
	runnablePrefix int
}

type layer struct {
	op   kernels.Op // what launches: the layer's op, or its substitute
	sub  string     // the substitution made ("" for none)
	bufs kernels.Buffers
	err  error // why the layer cannot launch
}

// Options change how New binds layers.
type Options struct {
	// Substitute binds layers the kernel library cannot launch as
	// described to an equivalent launch of another library kernel where
	// one exists (see Substitutions): global average pooling over NHWC as
	// an average Pool over the whole feature map; BERT's embedding add as
	// a bias_act whose bias is the position and token-type-0 tables (a
	// constant tensor the instance derives). The launched kernel then
	// differs from the op the model (and its profile) describes in name and
	// geometry: use it to run and check whole models, and profile them
	// knowing it. Off by default.
	Substitute bool
}

// New allocates g's tensors on dev, uploads weights and inputs (checked
// against the graph with models.CheckBundle), fills every other tensor with
// NaN (so a layer that reads what nothing wrote shows up in the output)
// and binds each layer's operands. Layers that cannot launch do not make
// New fail: Err says why, Runnable how far a forward pass can go, and
// Launch and Run refuse them.
func New(dev gpu.Device, lib *kernels.Library, g *models.Graph, weights, inputs *models.Bundle) (*Instance, error) {
	return NewWith(dev, lib, g, weights, inputs, Options{})
}

// NewForProfile builds the model p profiles (a zoo name, or an imported
// .onnx file under its model name) at p's batch on dev, with weights and
// inputs drawn from seed and layers the library lacks bound to
// substitutes (Options.Substitute), and makes its launches carry p's
// costs (UseProfile). A model the library cannot run whole, or a profile
// that does not match it, is refused and nothing is left allocated.
func NewForProfile(dev gpu.Device, lib *kernels.Library, p *profiles.Profile, seed uint64) (*Instance, error) {
	m, err := models.Get(p.Model)
	if err != nil {
		return nil, err
	}
	g, err := m.Graph(p.Batch)
	if err != nil {
		return nil, err
	}
	in, err := NewWith(dev, lib, g, models.InitWeights(g, seed), models.InitInputs(g, seed), Options{Substitute: true})
	if err != nil {
		return nil, fmt.Errorf("%s bs%d: %w", p.Model, p.Batch, err)
	}
	if n := in.Runnable(); n < len(g.Layers) {
		err = fmt.Errorf("%s bs%d cannot run here: %w", p.Model, p.Batch, in.Err(n))
	} else {
		err = in.UseProfile(p)
	}
	if err != nil {
		in.Close()
		return nil, err
	}
	return in, nil
}

// NewWith is New with options.
func NewWith(dev gpu.Device, lib *kernels.Library, g *models.Graph, weights, inputs *models.Bundle, opt Options) (*Instance, error) {
	if err := models.CheckBundle(g, weights, models.KindWeight); err != nil {
		return nil, err
	}
	if err := models.CheckBundle(g, inputs, models.KindInput); err != nil {
		return nil, err
	}
	in := &Instance{dev: dev, lib: lib, g: g, ptr: map[string]gpu.Ptr{}}
	for _, t := range g.Tensors {
		p, err := dev.Alloc(max(t.Bytes(), 4))
		if err != nil {
			_ = in.Close()
			return nil, fmt.Errorf("exec: %s: allocating %v (%d bytes; %d held so far): %w", g.Model, t, t.Bytes(), in.bytes, err)
		}
		in.ptr[t.Name] = p
		in.bytes += t.Bytes()
		var raw []byte
		switch t.Kind {
		case models.KindWeight:
			d, _ := weights.Get(t.Name)
			raw = d.Raw
		case models.KindInput:
			d, _ := inputs.Get(t.Name)
			raw = d.Raw
		case models.KindState:
			raw = make([]byte, t.Bytes())
		default:
			raw = nanBytes(t.DType, t.Elems())
		}
		if err := dev.CopyToDevice(p, raw); err != nil {
			_ = in.Close()
			return nil, fmt.Errorf("exec: %s: uploading %s: %w", g.Model, t.Name, err)
		}
	}
	in.layers = make([]layer, len(g.Layers))
	in.runnablePrefix = -1
	for i, l := range g.Layers {
		in.layers[i] = in.bindLayer(l, weights)
		if in.layers[i].err != nil && opt.Substitute {
			if sub, ok, err := in.substitute(l, weights); err != nil {
				_ = in.Close()
				return nil, err
			} else if ok {
				in.layers[i] = sub
			}
		}
		if in.layers[i].err != nil {
			in.layers[i].err = fmt.Errorf("%w: %s layer %d (%s, %s): %w", ErrNotRunnable, g.Model, i, l.Name, l.Op.Kernel(), in.layers[i].err)
			if in.runnablePrefix < 0 {
				in.runnablePrefix = i
			}
		}
	}
	if in.runnablePrefix < 0 {
		in.runnablePrefix = len(g.Layers)
	}
	return in, nil
}

// bind maps a layer's operands to device buffers.
func (in *Instance) bind(l models.Layer, weights *models.Bundle) (kernels.Buffers, error) {
	if l.Glue != "" {
		return kernels.Buffers{}, fmt.Errorf("needs glue %q: %s", l.Glue, l.GlueNote)
	}
	names, dropped, err := models.Operands(in.g, l)
	if err != nil {
		return kernels.Buffers{}, err
	}
	for _, d := range dropped {
		w, ok := weights.Get(d)
		if !ok {
			return kernels.Buffers{}, fmt.Errorf("%s has no operand for %s", l.Op.Kernel(), d)
		}
		for _, v := range w.Values() {
			if v != 0 {
				return kernels.Buffers{}, fmt.Errorf("%s has no operand for %s, which is not zero (the kernel library needs a bias on this kernel)", l.Op.Kernel(), d)
			}
		}
	}
	specs, _ := kernels.Tensors(l.Op)
	b := kernels.Buffers{T: make([]kernels.Tensor, len(specs))}
	for i, s := range specs {
		if s.Role == kernels.Scratch {
			p, err := in.scratch(l.Name+"."+s.Name, s)
			if err != nil {
				return kernels.Buffers{}, err
			}
			b.T[i] = kernels.Tensor{TensorSpec: s, Ptr: p}
			continue
		}
		t, _ := in.g.Tensor(names[i])
		// A layer with a Part binds slice I of its sliced tensors.
		cut, at := 1, 0
		if l.Sliced(t) {
			cut, at = l.Part.Of, l.Part.I
		}
		if t.DType != s.DType || t.Elems() != cut*s.Elems {
			what := ""
			if cut > 1 {
				what = fmt.Sprintf(" (%d slices)", cut)
			}
			return kernels.Buffers{}, fmt.Errorf("%w: operand %s wants %s[%d]%s, tensor %v is %s[%d]", models.ErrOperands, s.Name, s.DType, s.Elems, what, t.Name, t.DType, t.Elems())
		}
		b.T[i] = kernels.Tensor{TensorSpec: s, Ptr: in.ptr[names[i]] + gpu.Ptr(int64(at)*s.Bytes())}
	}
	return b, nil
}

// scratch allocates a layer's Scratch tensor (zeroed), held as name.
func (in *Instance) scratch(name string, s kernels.TensorSpec) (gpu.Ptr, error) {
	name = "scratch:" + name
	p, err := in.dev.Alloc(max(s.Bytes(), 4))
	if err != nil {
		return 0, fmt.Errorf("exec: %s: allocating %s (%d bytes): %w", in.g.Model, name, s.Bytes(), err)
	}
	in.ptr[name] = p
	in.bytes += s.Bytes()
	if err := in.dev.CopyToDevice(p, make([]byte, s.Bytes())); err != nil {
		return 0, fmt.Errorf("exec: %s: zeroing %s: %w", in.g.Model, name, err)
	}
	return p, nil
}

// bindOp binds op's operands to the named tensors (a substitute's).
func (in *Instance) bindOp(op kernels.Op, names []string) (kernels.Buffers, error) {
	specs, err := kernels.Tensors(op)
	if err != nil {
		return kernels.Buffers{}, err
	}
	if len(specs) != len(names) {
		return kernels.Buffers{}, fmt.Errorf("%w: %s takes %d operands, got %d tensors", models.ErrOperands, op.Kernel(), len(specs), len(names))
	}
	b := kernels.Buffers{T: make([]kernels.Tensor, len(specs))}
	for i, s := range specs {
		p, ok := in.ptr[names[i]]
		t, known := in.g.Tensor(names[i])
		if !ok {
			return kernels.Buffers{}, fmt.Errorf("%w: no tensor %q", ErrInstance, names[i])
		}
		if known && (t.DType != s.DType || t.Elems() != s.Elems) {
			return kernels.Buffers{}, fmt.Errorf("%w: operand %s wants %s[%d], tensor %v is %s[%d]", models.ErrOperands, s.Name, s.DType, s.Elems, t.Name, t.DType, t.Elems())
		}
		b.T[i] = kernels.Tensor{TensorSpec: s, Ptr: p}
	}
	return b, nil
}

// Substitutions lists the layers bound to a substitute launch (NewWith
// with Options.Substitute): "layer: what replaced it".
func (in *Instance) Substitutions() []string {
	var out []string
	for i, l := range in.layers {
		if l.sub != "" {
			out = append(out, in.g.Layers[i].Name+": "+l.sub)
		}
	}
	return out
}

// substitute finds an equivalent launch of a library kernel for a layer
// that cannot launch as described (Options.Substitute).
func (in *Instance) substitute(l models.Layer, weights *models.Bundle) (layer, bool, error) {
	switch {
	case l.Glue == models.GlueNHWCMean:
		x, _ := in.g.Tensor(l.In[0])
		if len(x.Shape) != 4 {
			return layer{}, false, nil
		}
		n, h, w, c := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
		op := kernels.Pool{N: n, H: h, W: w, C: c, R: h, S: w, Stride: 1, Max: false, In: x.DType}
		bufs, err := in.bindOp(op, []string{l.In[0], l.Out[0]})
		if err != nil {
			return layer{}, false, nil
		}
		return layer{op: op, sub: fmt.Sprintf("average pool %dx%d (%s)", h, w, op.Kernel()), bufs: bufs}, true, nil
	case l.Glue == "":
		e, ok := l.Op.(kernels.Elementwise)
		if !ok || e.Name != "embed_add" || len(l.W) == 0 {
			return layer{}, false, nil
		}
		// out = word + pos[s] (+ type[0]): a bias of period S·h.
		pos, _ := weights.Get(l.W[0])
		ids, _ := in.g.Tensor(in.g.Inputs[0])
		h := pos.Shape[1]
		seq := ids.Shape[len(ids.Shape)-1]
		bias := pos.Values()[:seq*h]
		if len(l.W) > 1 {
			typ, _ := weights.Get(l.W[1])
			tv := typ.Values()
			for i := range bias {
				bias[i] += tv[i%h]
			}
		}
		name := "subst:" + l.Name + ".bias"
		p, err := in.dev.Alloc(int64(4 * len(bias)))
		if err != nil {
			return layer{}, false, fmt.Errorf("exec: %s: allocating %s: %w", in.g.Model, name, err)
		}
		in.ptr[name] = p
		in.bytes += int64(4 * len(bias))
		if err := in.dev.CopyToDevice(p, kernels.Encode(kernels.F32, bias)); err != nil {
			return layer{}, false, fmt.Errorf("exec: %s: uploading %s: %w", in.g.Model, name, err)
		}
		op := kernels.Elementwise{Name: "bias_act", Elems: e.Elems, Inputs: 1, Outputs: 1, In: e.In, Cols: seq * h}
		bufs, err := in.bindOp(op, []string{l.In[0], name, l.Out[0]})
		if err != nil {
			return layer{}, false, nil
		}
		return layer{op: op, sub: fmt.Sprintf("bias_act over the position+type table, period %d (%s)", seq*h, op.Kernel()), bufs: bufs}, true, nil
	}
	return layer{}, false, nil
}

// Graph is the instance's model graph.
func (in *Instance) Graph() *models.Graph { return in.g }

// Bytes is the device memory the instance's tensors take.
func (in *Instance) Bytes() int64 { return in.bytes }

// Runnable is the number of leading layers that can launch: a forward pass
// runs to the end when Runnable() == len(Graph().Layers).
func (in *Instance) Runnable() int { return in.runnablePrefix }

// Err says why layer i cannot launch (nil if it can).
func (in *Instance) Err(i int) error {
	if i < 0 || i >= len(in.layers) {
		return fmt.Errorf("%w: layer %d of %d", ErrInstance, i, len(in.layers))
	}
	return in.layers[i].err
}

// Op is what layer i launches: the layer's op, or its substitute.
func (in *Instance) Op(i int) kernels.Op { return in.layers[i].op }

// Buffers are layer i's operands as bound to the instance's tensors.
func (in *Instance) Buffers(i int) (kernels.Buffers, error) {
	if err := in.Err(i); err != nil {
		return kernels.Buffers{}, err
	}
	return in.layers[i].bufs, nil
}

// Ptr is the device address of a tensor.
func (in *Instance) Ptr(name string) (gpu.Ptr, bool) {
	p, ok := in.ptr[name]
	return p, ok
}

// UseProfile makes launches carry p's measured costs (what the simulator
// times them from) after checking p against the instance's layers and
// device with profiles.Check: a profile of another model, batch, kernel
// sequence or GPU is refused, naming the first mismatch.
func (in *Instance) UseProfile(p *profiles.Profile) error {
	if err := profiles.Check(p, models.Ops(in.g.Layers), in.dev.Info().Spec); err != nil {
		return err
	}
	if err := in.checkBLAS(p); err != nil {
		return err
	}
	in.costs = make([]gpu.Cost, len(p.Kernels))
	in.vendor = make([][]gpu.VendorLaunch, len(p.Kernels))
	for i := range p.Kernels {
		in.costs[i] = p.Kernels[i].Cost()
		in.vendor[i] = p.Kernels[i].VendorLaunches()
	}
	return nil
}

// checkBLAS refuses a measured profile whose kernels were timed on the
// device's BLAS (profiles.TagBLAS) where this instance runs them on the
// library's own kernels: the scheduler would plan with durations a few
// times too short. The other way round (a profile made on the own kernels,
// a run on the BLAS) only over-states them and is accepted.
func (in *Instance) checkBLAS(p *profiles.Profile) error {
	if p.Source == profiles.SourceEstimated {
		return nil
	}
	n, first := 0, ""
	for i := range p.Kernels {
		if !p.Kernels[i].HasTag(profiles.TagBLAS) || in.Err(i) != nil {
			continue
		}
		if l, err := in.lib.Launch(in.layers[i].op, gpu.Plain, in.layers[i].bufs, kernels.Control{}); err == nil && kernels.IsBLAS(l) {
			continue
		}
		if n++; first == "" {
			first = p.Kernels[i].Name
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%w: profile %s/%s-bs%d timed %d kernels (first: %s) on %s, which this run does not use for them (its BLAS: %s): profile this setup (atoll profile --model %s --batch %d writes to the store, which runs read first) or make the library loadable (%s=/path/to/libcublasLt.so.13)",
		profiles.ErrMismatch, p.GPU, p.Model, p.Batch, n, first, blasNote(p), in.lib.BLASName(), p.Model, p.Batch, "ATOLL_CUBLASLT")
}

// blasNote is the library a profile says its blas-tagged kernels ran on.
func blasNote(p *profiles.Profile) string {
	if note, ok := p.Notes["blas"]; ok {
		if _, lib, ok := strings.Cut(note, " ran on "); ok {
			if lib, _, ok := strings.Cut(lib, " (tagged"); ok {
				return lib
			}
		}
	}
	return "the device's BLAS"
}

func (in *Instance) cost(i int) (gpu.Cost, bool) {
	if in.costs == nil {
		return gpu.Cost{}, false
	}
	return in.costs[i], true
}

// Launch returns layer i's launch in form (Plain, Reset or Resumable) with
// ctl's preemption state packed into its arguments (kernels.Library.Launch).
// Padded launches pair two instances: see InstanceBinder.
func (in *Instance) Launch(i int, form gpu.Form, ctl kernels.Control) (*gpu.Launch, error) {
	if in.closed {
		return nil, fmt.Errorf("%w: %s is closed", ErrInstance, in.g.Model)
	}
	if err := in.Err(i); err != nil {
		return nil, err
	}
	if form == gpu.Padded {
		return nil, fmt.Errorf("%w: a padded launch needs a BE partner: bind it through exec.InstanceBinder (kernels.Library.LaunchPadded)", ErrInstance)
	}
	l, err := in.lib.Launch(in.layers[i].op, form, in.layers[i].bufs, ctl)
	if err != nil {
		return nil, fmt.Errorf("exec: %s layer %d (%s) %s: %w", in.g.Model, i, in.g.Layers[i].Name, form, err)
	}
	if c, ok := in.cost(i); ok {
		l.Cost = c
		if form == gpu.Plain && kernels.IsBLAS(l) {
			l.Vendor = in.vendor[i] // the launches the profile saw the vendor call make
		}
	}
	return l, nil
}

// Run runs one forward pass (every layer, Plain form, in order on a
// stream of the least urgent priority) and waits for it. It refuses, before
// launching anything, a model with a layer that cannot launch. LastRun is
// the device time the pass took.
func (in *Instance) Run(ctx context.Context) error {
	if in.runnablePrefix < len(in.layers) {
		return in.layers[in.runnablePrefix].err
	}
	return in.RunLayers(ctx, 0, len(in.layers))
}

// RunLayers runs layers [from, to) in the Plain form and waits for them.
func (in *Instance) RunLayers(ctx context.Context, from, to int) error {
	if in.closed {
		return fmt.Errorf("%w: %s is closed", ErrInstance, in.g.Model)
	}
	if from < 0 || to > len(in.layers) || from > to {
		return fmt.Errorf("%w: layers [%d, %d) of %d", ErrInstance, from, to, len(in.layers))
	}
	for i := from; i < to; i++ {
		if err := in.layers[i].err; err != nil {
			return err
		}
	}
	if err := in.streams(); err != nil {
		return err
	}
	if err := in.dev.Record(in.start, in.stream); err != nil {
		return fmt.Errorf("exec: Record: %w", err)
	}
	for i := from; i < to; i++ {
		l, err := in.Launch(i, gpu.Plain, kernels.Control{})
		if err != nil {
			return err
		}
		if err := in.dev.Launch(in.stream, l); err != nil {
			return fmt.Errorf("exec: %s layer %d (%s): launch: %w", in.g.Model, i, in.g.Layers[i].Name, err)
		}
	}
	if err := in.dev.Record(in.end, in.stream); err != nil {
		return fmt.Errorf("exec: Record: %w", err)
	}
	for {
		done, err := in.dev.Query(in.end)
		if err != nil {
			return fmt.Errorf("exec: Query: %w", err)
		}
		if done {
			break
		}
		if err := in.dev.Wait(ctx, in.dev.Now()+50*time.Microsecond); err != nil {
			return err
		}
	}
	t0, err := in.dev.Time(in.start)
	if err != nil {
		return fmt.Errorf("exec: event time: %w", err)
	}
	t1, err := in.dev.Time(in.end)
	if err != nil {
		return fmt.Errorf("exec: event time: %w", err)
	}
	in.last = t1 - t0
	return nil
}

func (in *Instance) streams() error {
	if in.stream != 0 {
		return nil
	}
	s, err := in.dev.NewStream(gpu.StreamOptions{Priority: in.dev.Info().Priorities.Least})
	if err != nil {
		return fmt.Errorf("exec: NewStream: %w", err)
	}
	in.stream = s
	if in.start, err = in.dev.NewEvent(); err != nil {
		return fmt.Errorf("exec: NewEvent: %w", err)
	}
	if in.end, err = in.dev.NewEvent(); err != nil {
		return fmt.Errorf("exec: NewEvent: %w", err)
	}
	return nil
}

// LastRun is the device time of the last Run or RunLayers (between events
// recorded before the first and after the last launch).
func (in *Instance) LastRun() time.Duration { return in.last }

// Read copies a tensor back and decodes it.
func (in *Instance) Read(name string) ([]float64, error) {
	t, ok := in.g.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%w: %s has no tensor %q", ErrInstance, in.g.Model, name)
	}
	raw := make([]byte, t.Bytes())
	if err := in.dev.CopyFromDevice(raw, in.ptr[name]); err != nil {
		return nil, fmt.Errorf("exec: reading %s: %w", name, err)
	}
	return kernels.Decode(t.DType, raw), nil
}

// Output reads the model's output tensor (Graph().Output).
func (in *Instance) Output() ([]float64, error) { return in.Read(in.g.Output) }

// SetInputs uploads new model inputs (checked like New's).
func (in *Instance) SetInputs(inputs *models.Bundle) error {
	if err := models.CheckBundle(in.g, inputs, models.KindInput); err != nil {
		return err
	}
	for _, name := range in.g.Inputs {
		d, _ := inputs.Get(name)
		if err := in.dev.CopyToDevice(in.ptr[name], d.Raw); err != nil {
			return fmt.Errorf("exec: uploading %s: %w", name, err)
		}
	}
	return nil
}

// SetInputsAt uploads one request's inputs into slot of the of equal
// slices of the instance's input tensors (their leading dimension): an
// instance at batch of × b serving of requests of batch b in one pass.
// Each input of inputs must be exactly one slice (the caller checked the
// request against the model at batch b).
func (in *Instance) SetInputsAt(slot, of int, inputs *models.Bundle) error {
	if of < 1 || slot < 0 || slot >= of {
		return fmt.Errorf("%w: %s: slot %d of %d", ErrInstance, in.g.Model, slot, of)
	}
	for _, name := range in.g.Inputs {
		t, _ := in.g.Tensor(name)
		d, ok := inputs.Get(name)
		if !ok {
			return fmt.Errorf("%w: %s: no input %q", ErrInstance, in.g.Model, name)
		}
		if int64(len(d.Raw))*int64(of) != t.Bytes() {
			return fmt.Errorf("%w: %s: input %q has %d bytes; a slice of %d of its %d is %d", ErrInstance, in.g.Model, name, len(d.Raw), of, t.Bytes(), t.Bytes()/int64(of))
		}
		if err := in.dev.CopyToDevice(in.ptr[name]+gpu.Ptr(int64(slot)*int64(len(d.Raw))), d.Raw); err != nil {
			return fmt.Errorf("exec: uploading %s slot %d: %w", name, slot, err)
		}
	}
	return nil
}

// ReadAt reads slot of the of equal slices of tensor name (its leading
// dimension): one request's share of a pass that served of requests.
func (in *Instance) ReadAt(name string, slot, of int) ([]float64, error) {
	if of < 1 || slot < 0 || slot >= of {
		return nil, fmt.Errorf("%w: %s: slot %d of %d", ErrInstance, in.g.Model, slot, of)
	}
	all, err := in.Read(name)
	if err != nil {
		return nil, err
	}
	if len(all)%of != 0 {
		return nil, fmt.Errorf("%w: %s: tensor %q of %d values does not split into %d", ErrInstance, in.g.Model, name, len(all), of)
	}
	n := len(all) / of
	return all[slot*n : (slot+1)*n], nil
}

// OutputAt is ReadAt of the model's output tensor.
func (in *Instance) OutputAt(slot, of int) ([]float64, error) {
	return in.ReadAt(in.g.Output, slot, of)
}

// Close frees the instance's device memory, stream and events.
func (in *Instance) Close() error {
	if in.closed {
		return nil
	}
	in.closed = true
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, p := range in.ptr {
		keep(in.dev.Free(p))
	}
	if in.stream != 0 {
		keep(in.dev.DestroyEvent(in.start))
		keep(in.dev.DestroyEvent(in.end))
		keep(in.dev.DestroyStream(in.stream))
	}
	return first
}

// nanBytes is n quiet NaNs of type d (zeros for a type without NaN). The
// pattern is written once and doubled by copy: a fill of a large scratch
// buffer is a few memmoves, not a loop over its elements.
func nanBytes(d kernels.DType, n int) []byte {
	raw := make([]byte, n*d.Size())
	var pat []byte
	switch d {
	case kernels.F32, kernels.I32:
		pat = binary.LittleEndian.AppendUint32(nil, 0x7fc00000)
	case kernels.F16:
		pat = binary.LittleEndian.AppendUint16(nil, 0x7e00)
	case kernels.BF16:
		pat = binary.LittleEndian.AppendUint16(nil, 0x7fc0)
	default:
		return raw
	}
	for filled := copy(raw, pat); filled < len(raw); {
		filled += copy(raw[filled:], raw[:filled])
	}
	return raw
}

// RunHybrid runs one forward pass with every layer that can launch on the
// device (Plain form) and every other layer on the host: it waits for the
// device, reads the layer's operands back, computes the layer with the CPU
// reference (models.ReferenceLayer, rounded to the tensor types as the
// device would) and uploads the result. It is for checking numbers end to
// end while the kernel library lacks a layer's kernel (see Err); it is not
// what the scheduler runs, and its time means nothing. It returns the
// names of the layers that ran on the host.
func (in *Instance) RunHybrid(ctx context.Context) (host []string, err error) {
	from := 0
	for i, l := range in.g.Layers {
		if in.layers[i].err == nil {
			continue
		}
		if err := in.RunLayers(ctx, from, i); err != nil {
			return host, err
		}
		vals := models.Activations{}
		read := slices.Concat(l.In, l.W)
		if l.Part.Of > 0 {
			read = append(read, l.Out...) // the other parts' slices stay
		}
		for _, n := range read {
			if _, ok := vals[n]; ok {
				continue
			}
			v, err := in.Read(n)
			if err != nil {
				return host, err
			}
			vals[n] = v
		}
		outs, err := models.ReferenceLayer(in.g, l, vals)
		if err != nil {
			return host, fmt.Errorf("exec: %s layer %d (%s) on the host: %w", in.g.Model, i, l.Name, err)
		}
		for j, n := range l.Out {
			t, _ := in.g.Tensor(n)
			if err := in.dev.CopyToDevice(in.ptr[n], kernels.Encode(t.DType, outs[j])); err != nil {
				return host, fmt.Errorf("exec: uploading %s: %w", n, err)
			}
		}
		host = append(host, l.Name)
		from = i + 1
	}
	return host, in.RunLayers(ctx, from, len(in.layers))
}
