package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/profiles"
	"atoll/sched"
)

// ErrProbe wraps every error of the physics probe (probe*.go): bad
// configuration, a binder asked for a kernel it does not have, a device
// call that failed while calibrating.
var ErrProbe = errors.New("bench: probe")

// BufferPool hands out device buffers for ops of the kernel library. Each
// (slot, tensor name) pair owns one allocation that grows when a larger op
// asks for it and is shared by every op of that slot: the probe's GEMMs of
// one role read the prefix they need (a GEMM's A is M×K, its B K×N, so a
// buffer made for a larger K serves a smaller one). Inputs and weights are
// filled with a seeded random pattern (never zeros, which hide unwritten
// outputs and can run faster than real data); outputs are left as they are.
//
// Ops of one slot run concurrently on the GPU and write the same output
// buffers: the pool is for timing, never for checking results.
type BufferPool struct {
	dev   gpu.Device
	fill  bool
	seed  uint64
	slabs map[string]slab
}

type slab struct {
	ptr   gpu.Ptr
	bytes int64
}

// NewBufferPool returns a pool on dev. fill says whether inputs get random
// contents: true on a real GPU, false on the simulator (which times kernels
// from their cost and would otherwise keep every page in host memory).
func NewBufferPool(dev gpu.Device, fill bool, seed uint64) *BufferPool {
	return &BufferPool{dev: dev, fill: fill, seed: seed, slabs: map[string]slab{}}
}

// Get returns buffers for op in slot, allocating or growing them as needed.
func (p *BufferPool) Get(slot string, op kernels.Op) (kernels.Buffers, error) {
	specs, err := kernels.Tensors(op)
	if err != nil {
		return kernels.Buffers{}, fmt.Errorf("%w: %w", ErrProbe, err)
	}
	var b kernels.Buffers
	for _, ts := range specs {
		key := slot + "/" + ts.Name
		need := max(ts.Bytes(), 4)
		s, ok := p.slabs[key]
		if !ok || s.bytes < need {
			if ok {
				if err := p.dev.Free(s.ptr); err != nil {
					return kernels.Buffers{}, fmt.Errorf("%w: freeing %s: %w", ErrProbe, key, err)
				}
				delete(p.slabs, key)
			}
			ptr, err := p.dev.Alloc(need)
			if err != nil {
				return kernels.Buffers{}, fmt.Errorf("%w: allocating %s (%d bytes) for %s %s: %w", ErrProbe, key, need, op.Kernel(), op.Shape(), err)
			}
			s = slab{ptr: ptr, bytes: need}
			p.slabs[key] = s
			if ts.Role == kernels.Scratch {
				if err := p.dev.CopyToDevice(s.ptr, make([]byte, need)); err != nil {
					return kernels.Buffers{}, fmt.Errorf("%w: zeroing %s: %w", ErrProbe, key, err)
				}
			} else if p.fill && ts.Role != kernels.Output {
				if err := p.fillRandom(s, ts.DType); err != nil {
					return kernels.Buffers{}, fmt.Errorf("%w: filling %s: %w", ErrProbe, key, err)
				}
			}
		}
		b.T = append(b.T, kernels.Tensor{TensorSpec: ts, Ptr: s.ptr})
	}
	return b, nil
}

// fillRandom writes a 1 MiB random pattern (uniform in [-1, 1) as dt)
// repeatedly over s: enough variety for timing, cheap for gigabytes.
func (p *BufferPool) fillRandom(s slab, dt kernels.DType) error {
	const pattern = 1 << 20
	const chunk = 64 << 20
	rng := rand.New(rand.NewPCG(p.seed, uint64(s.ptr)))
	vals := make([]float64, pattern/dt.Size())
	for i := range vals {
		vals[i] = rng.Float64()*2 - 1
	}
	pat := kernels.Encode(dt, vals)
	if dt == kernels.I32 {
		for i := 0; i+4 <= len(pat); i += 4 {
			binary.LittleEndian.PutUint32(pat[i:], uint32(rng.IntN(1024)))
		}
	}
	buf := make([]byte, 0, chunk)
	for len(buf)+len(pat) <= chunk {
		buf = append(buf, pat...)
	}
	for off := int64(0); off < s.bytes; off += int64(len(buf)) {
		n := min(int64(len(buf)), s.bytes-off)
		if err := p.dev.CopyToDevice(s.ptr+gpu.Ptr(off), buf[:n]); err != nil {
			return err
		}
	}
	return nil
}

// Close frees every buffer.
func (p *BufferPool) Close() error {
	var first error
	for k, s := range p.slabs {
		if err := p.dev.Free(s.ptr); err != nil && first == nil {
			first = err
		}
		delete(p.slabs, k)
	}
	return first
}

// BinderClient is one client's kernels for a ProbeBinder: the library op of
// each profile kernel, in the profile's order, and the profile whose costs
// the launches carry (the simulator times launches from them).
type BinderClient struct {
	Ops     []kernels.Op
	Profile *profiles.Profile
	// Slot names the BufferPool slot the client's buffers come from.
	Slot string
}

// ProbeBinder implements sched.Binder over the kernel library: every
// launch is a real kernel of kernels.Library with real buffers, in the form
// the scheduler asked for, with the request's preemption state (flag,
// progress block, done word) packed into its arguments by Library.Launch.
// It serves gpu/cuda and gpu/sim alike; on the simulator the launch's Cost
// (from the client's profile) is what times it.
//
// A ProbeBinder belongs to the goroutine that owns the device.
type ProbeBinder struct {
	lib     *kernels.Library
	flatten bool
	hp, be  [][]bound
	// Slow makes every bind go through Library.Launch (no templates).
	Slow bool
	// ResetRelay gives Reset launches, which the scheduler binds with a
	// flag only, a control block per BE client so their blocks read the
	// flag through the library's device-memory relay instead of across
	// PCIe (see kernels.Control.Counter).
	ResetRelay bool
	relays     map[int]gpu.Ptr
	epoch      int32
}

type bound struct {
	op   kernels.Op
	bufs kernels.Buffers
	cost gpu.Cost
	name string
	// tmpl holds, per form (Plain, Reset, Resumable), the launch
	// Library.Launch made the first time; later binds copy it and
	// rewrite the preemption state in its arguments (see fastLaunch).
	tmpl [3]*gpu.Launch
}

// NewProbeBinder binds hp and be (indexed as the sched.Workload's clients)
// to lib, with buffers from pool. Padded launches are flattened into one
// grid (kernels.Flatten) when the library's device is a real GPU, which
// runs the pair kernel over HP + BE blocks; the simulator gets the Pad
// description it times the BE body from.
func NewProbeBinder(lib *kernels.Library, pool *BufferPool, hp, be []BinderClient) (*ProbeBinder, error) {
	b := &ProbeBinder{lib: lib, flatten: lib.Device().Info().Backend != "sim"}
	build := func(class string, cs []BinderClient) ([][]bound, error) {
		var out [][]bound
		for i, c := range cs {
			if c.Profile == nil || len(c.Ops) != len(c.Profile.Kernels) {
				n := 0
				if c.Profile != nil {
					n = len(c.Profile.Kernels)
				}
				return nil, fmt.Errorf("%w: %s client %d has %d ops for %d profile kernels (want one op per kernel)", ErrProbe, class, i, len(c.Ops), n)
			}
			var ks []bound
			for j, op := range c.Ops {
				k := &c.Profile.Kernels[j]
				if op == nil || op.Kernel() != k.Kernel {
					got := "nil"
					if op != nil {
						got = op.Kernel()
					}
					return nil, fmt.Errorf("%w: %s client %d kernel %d (%s): op is %s, profile says %s", ErrProbe, class, i, j, k.Name, got, k.Kernel)
				}
				bufs, err := pool.Get(c.Slot, op)
				if err != nil {
					return nil, err
				}
				ks = append(ks, bound{op: op, bufs: bufs, cost: k.Cost(), name: k.Name})
			}
			out = append(out, ks)
		}
		return out, nil
	}
	var err error
	if b.hp, err = build("HP", hp); err != nil {
		return nil, err
	}
	if b.be, err = build("BE", be); err != nil {
		return nil, err
	}
	return b, nil
}

// relay returns client c's Reset control block, allocating and zeroing it
// on first use. It is never zeroed again: the relay word carries its
// launch's epoch, so one launch never trusts another's read.
func (b *ProbeBinder) relay(c sched.ClientID) (gpu.Ptr, error) {
	if p, ok := b.relays[c.Index]; ok {
		return p, nil
	}
	dev := b.lib.Device()
	p, err := dev.Alloc(kernels.CounterBytes)
	if err != nil {
		return 0, fmt.Errorf("%w: allocating the reset relay of %s: %w", ErrProbe, c, err)
	}
	if err := dev.CopyToDevice(p, make([]byte, kernels.CounterBytes)); err != nil {
		return 0, fmt.Errorf("%w: zeroing the reset relay of %s: %w", ErrProbe, c, err)
	}
	if b.relays == nil {
		b.relays = map[int]gpu.Ptr{}
	}
	b.relays[c.Index] = p
	return p, nil
}

// Close frees the reset relay blocks (the buffers belong to the pool).
func (b *ProbeBinder) Close() error {
	var first error
	for c, p := range b.relays {
		if err := b.lib.Device().Free(p); err != nil && first == nil {
			first = fmt.Errorf("%w: freeing the reset relay of BE client %d: %w", ErrProbe, c, err)
		}
		delete(b.relays, c)
	}
	return first
}

// ProgressBytes implements sched.Binder: the library's control block.
func (b *ProbeBinder) ProgressBytes() int { return kernels.CounterBytes }

func (b *ProbeBinder) kernel(c sched.ClientID, i int) (*bound, error) {
	tab := b.hp
	if c.Class == sched.BE {
		tab = b.be
	}
	if c.Index < 0 || c.Index >= len(tab) || i < 0 || i >= len(tab[c.Index]) {
		return nil, fmt.Errorf("%w: no kernel %d for client %s", ErrProbe, i, c)
	}
	return &tab[c.Index][i], nil
}

// Bind implements sched.Binder.
func (b *ProbeBinder) Bind(r sched.BindRequest) (*gpu.Launch, error) {
	k, err := b.kernel(r.Client, r.Kernel)
	if err != nil {
		return nil, err
	}
	ctl := kernels.Control{Flag: r.Ctl.Flag, Counter: r.Ctl.Counter, Done: r.Ctl.Done}
	if r.Form == gpu.Reset && ctl.Counter == 0 && b.ResetRelay {
		if ctl.Counter, err = b.relay(r.Client); err != nil {
			return nil, err
		}
	}
	switch r.Form {
	case gpu.Plain, gpu.Reset, gpu.Resumable:
		if r.Form == gpu.Plain {
			ctl = kernels.Control{}
		}
		if t := k.tmpl[r.Form]; t != nil && !b.Slow && ctlLayoutKnown {
			b.epoch++
			return fastLaunch(t, ctl, b.epoch), nil
		}
		l, err := b.lib.Launch(k.op, r.Form, k.bufs, ctl)
		if err != nil {
			return nil, fmt.Errorf("%w: %s kernel %d (%s) %s: %w", ErrProbe, r.Client, r.Kernel, k.name, r.Form, err)
		}
		l.Cost = k.cost
		t := *l
		k.tmpl[r.Form] = &t
		return l, nil
	case gpu.Padded:
		if r.Pad == nil {
			return nil, fmt.Errorf("%w: padded launch of %s kernel %d without a pad", ErrProbe, r.Client, r.Kernel)
		}
		p, err := b.kernel(r.Pad.Client, r.Pad.Kernel)
		if err != nil {
			return nil, err
		}
		pc := kernels.Control{Flag: r.Pad.Ctl.Flag, Counter: r.Pad.Ctl.Counter, Done: r.Pad.Ctl.Done, Workers: r.Pad.Blocks}
		l, err := b.lib.LaunchPadded(k.op, k.bufs, kernels.Control{}, 0, p.op, p.bufs, pc)
		if err != nil {
			return nil, fmt.Errorf("%w: %s kernel %d (%s) padded with %s kernel %d (%s): %w", ErrProbe, r.Client, r.Kernel, k.name, r.Pad.Client, r.Pad.Kernel, p.name, err)
		}
		l.Cost = k.cost
		if l.Pad != nil {
			l.Pad.Cost = p.cost
		}
		if b.flatten {
			l = kernels.Flatten(l)
		}
		return l, nil
	}
	return nil, fmt.Errorf("%w: %s kernel %d: unknown form %s", ErrProbe, r.Client, r.Kernel, r.Form)
}

// Warm compiles, before any timed run, every function the binder may
// launch: each op's Plain, Reset and Resumable forms and, when pad is set,
// the padded pair of every HP op with every BE op (on a GPU a compile in
// the middle of a run would stall it for a second). flag and done are
// host words and counter a progress block (kernels.CounterBytes) the pair
// launches are built with; nothing is launched.
func (b *ProbeBinder) Warm(pad bool, flag, done gpu.HostWord, counter gpu.Ptr) error {
	seen := map[string]bool{}
	for _, tab := range [][][]bound{b.hp, b.be} {
		for _, ks := range tab {
			for _, k := range ks {
				if seen[k.op.Kernel()] {
					continue
				}
				seen[k.op.Kernel()] = true
				for _, f := range []gpu.Form{gpu.Plain, gpu.Reset, gpu.Resumable} {
					if _, err := b.lib.Func(k.op, f); err != nil {
						return fmt.Errorf("%w: compiling %s %s: %w", ErrProbe, k.op.Kernel(), f, err)
					}
				}
			}
		}
	}
	if !pad {
		return nil
	}
	pairs := map[[2]string]bool{}
	for _, hs := range b.hp {
		for _, h := range hs {
			for _, bs := range b.be {
				for _, e := range bs {
					key := [2]string{h.op.Kernel(), e.op.Kernel()}
					if pairs[key] {
						continue
					}
					pairs[key] = true
					ctl := kernels.Control{Flag: flag, Counter: counter, Done: done, Workers: 1}
					if _, err := b.lib.LaunchPadded(h.op, h.bufs, kernels.Control{}, 0, e.op, e.bufs, ctl); err != nil {
						return fmt.Errorf("%w: compiling the padded pair %s + %s: %w", ErrProbe, key[0], key[1], err)
					}
				}
			}
		}
	}
	return nil
}

// ctlLayoutKnown says whether the kernels' Ctl struct is the 48-byte layout
// fastLaunch rewrites (kernels/abi.go: flag, counter, done, trace pointers,
// then logical, offset, epoch, chunk as int32).
const ctlLayoutKnown = kernels.CtlBytes == 48

// fastLaunch returns a copy of the template t with ctl's flag, progress
// block and done word (and a fresh epoch, which the kernels' flag relay
// needs to tell one launch's reads from another's) written into its
// arguments. Everything else — function, geometry, parameters, worker
// count, logical blocks, chunk — is the template's.
//
// It exists because Library.Launch rebuilds the kernel's module source on
// every call (about 65 µs of host time per launch, more than the HP
// kernels it launches last), which made HP requests launch-bound on the
// GPU. The template depends only on the op and buffers, which a bound
// kernel fixes.
func fastLaunch(t *gpu.Launch, ctl kernels.Control, epoch int32) *gpu.Launch {
	l := *t
	l.Args = gpu.Args{}
	raw := t.Args.Bytes()
	l.Args.Ptr(ctl.Flag.Dev).Ptr(ctl.Counter).Ptr(ctl.Done.Dev)
	for off := 24; off+8 <= len(raw); off += 8 {
		w := binary.LittleEndian.Uint64(raw[off:])
		if off == 40 { // epoch (low word) and chunk (high word)
			w = w&^0xffffffff | uint64(uint32(epoch))
		}
		l.Args.U64(w)
	}
	switch t.Form {
	case gpu.Reset:
		l.Flag, l.Counter = ctl.Flag, ctl.Counter
	case gpu.Resumable:
		l.Flag, l.Counter, l.Done = ctl.Flag, ctl.Counter, ctl.Done
	}
	return &l
}
