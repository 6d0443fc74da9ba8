package kernels

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"atoll/gpu"
)

// runner holds the device objects SelfTest uses: two streams (BE at the
// least priority, HP/watcher at the greatest), an event per stream, three
// host words (flag, done, spare) and a small device scratch area.
type runner struct {
	ctx    context.Context
	dev    gpu.Device
	lib    *Library
	blas   *Library // the same device with its BLAS: blasLibrary
	lo, hi gpu.Stream
	evLo   gpu.Event
	evHi   gpu.Event
	ev2    gpu.Event
	flag   gpu.HostWord
	done   gpu.HostWord
	flag2  gpu.HostWord
	done2  gpu.HostWord
	// counter: two int32 words; counter2: another pair; watch: 2 uint64.
	counter, counter2, watch gpu.Ptr
	only                     string // Options.Only
	allocs                   []gpu.Ptr
	progress                 io.Writer // Options.Progress
	start                    time.Time
}

// progressf writes one line to the progress writer, with the time since
// the self-test began.
func (r *runner) progressf(format string, args ...any) {
	if r.progress != nil {
		fmt.Fprintf(r.progress, "selftest %5.0f s: %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
	}
}

func newRunner(ctx context.Context, dev gpu.Device, lib *Library) (*runner, error) {
	r := &runner{ctx: ctx, dev: dev, lib: lib}
	pr := dev.Info().Priorities
	var err error
	if r.lo, err = dev.NewStream(gpu.StreamOptions{Priority: pr.Least}); err != nil {
		return nil, err
	}
	if r.hi, err = dev.NewStream(gpu.StreamOptions{Priority: pr.Greatest}); err != nil {
		return nil, err
	}
	for _, e := range []*gpu.Event{&r.evLo, &r.evHi, &r.ev2} {
		if *e, err = dev.NewEvent(); err != nil {
			return nil, err
		}
	}
	w, err := dev.NewHostWords(4)
	if err != nil {
		return nil, err
	}
	r.flag, r.done, r.flag2, r.done2 = w[0], w[1], w[2], w[3]
	for _, p := range []*gpu.Ptr{&r.counter, &r.counter2, &r.watch} {
		if *p, err = r.alloc(64); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (r *runner) alloc(n int64) (gpu.Ptr, error) {
	p, err := r.dev.Alloc(n)
	if err != nil {
		return 0, err
	}
	r.allocs = append(r.allocs, p)
	return p, nil
}

func (r *runner) close() {
	for _, p := range r.allocs {
		_ = r.dev.Free(p)
	}
	for _, e := range []gpu.Event{r.evLo, r.evHi, r.ev2} {
		if e != 0 {
			_ = r.dev.DestroyEvent(e)
		}
	}
	for _, s := range []gpu.Stream{r.lo, r.hi} {
		if s != 0 {
			_ = r.dev.DestroyStream(s)
		}
	}
}

// sync waits until all work enqueued so far on s has completed.
func (r *runner) sync(s gpu.Stream) error {
	ev := r.evLo
	if s == r.hi {
		ev = r.evHi
	}
	if err := r.dev.Record(ev, s); err != nil {
		return err
	}
	return r.waitEvent(ev)
}

func (r *runner) waitEvent(ev gpu.Event) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, err := r.dev.Query(ev)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kernels: selftest: the GPU did not finish within 60 s (a kernel hangs?)")
		}
		if err := r.dev.Wait(r.ctx, r.dev.Now()+20*time.Microsecond); err != nil {
			return err
		}
	}
}

// zeroCounter clears a counter pair (synchronously).
func (r *runner) zero(p gpu.Ptr, bytes int) error {
	return r.dev.CopyToDevice(p, make([]byte, bytes))
}

// launch enqueues l on s. A Padded launch goes as gpu.Launch documents it
// (HP grid plus Pad's workers); every backend runs that as one 1-D grid and
// the pair kernel splits it by block index (docs/kernels.md).
func (r *runner) launch(s gpu.Stream, l *gpu.Launch) error {
	return r.dev.Launch(s, l) // padded launches as gpu.Launch documents them: the device runs Grid + Pad.Grid blocks
}

// Flatten returns the launch a device must enqueue for l: l itself unless l
// is Padded, in which case a copy whose Grid covers the HP blocks and the
// BE workers (Grid.Count() + Pad.Grid.Count() one-dimensional blocks) and
// whose Pad is nil.
func Flatten(l *gpu.Launch) *gpu.Launch {
	if l.Form != gpu.Padded || l.Pad == nil {
		return l
	}
	f := *l
	f.Grid = gpu.D1(l.Grid.Count() + l.Pad.Grid.Count())
	f.Pad = nil
	return &f
}

func (r *runner) readU64(p gpu.Ptr, n int) ([]uint64, error) {
	raw := make([]byte, 8*n)
	if err := r.dev.CopyFromDevice(raw, p); err != nil {
		return nil, err
	}
	v := make([]uint64, n)
	for i := range v {
		v[i] = binary.LittleEndian.Uint64(raw[8*i:])
	}
	return v, nil
}

func (r *runner) readI32(p gpu.Ptr, n int) ([]int32, error) {
	raw := make([]byte, 4*n)
	if err := r.dev.CopyFromDevice(raw, p); err != nil {
		return nil, err
	}
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return v, nil
}

// timed runs l on the BE stream between two events and returns its GPU time.
func (r *runner) timed(l *gpu.Launch, before func() error) (time.Duration, error) {
	if before != nil {
		if err := before(); err != nil {
			return 0, err
		}
	}
	if err := r.dev.Record(r.ev2, r.lo); err != nil {
		return 0, err
	}
	if err := r.launch(r.lo, l); err != nil {
		return 0, err
	}
	if err := r.dev.Record(r.evLo, r.lo); err != nil {
		return 0, err
	}
	if err := r.waitEvent(r.evLo); err != nil {
		return 0, err
	}
	t0, err := r.dev.Time(r.ev2)
	if err != nil {
		return 0, err
	}
	t1, err := r.dev.Time(r.evLo)
	if err != nil {
		return 0, err
	}
	return t1 - t0, nil
}

// blasLibrary is a library of the runner's device that hands products to
// its BLAS (the runner's own lib has NoBLAS set), made on first use.
func (r *runner) blasLibrary() *Library {
	if r.blas == nil {
		r.blas = New(r.dev)
	}
	return r.blas
}
