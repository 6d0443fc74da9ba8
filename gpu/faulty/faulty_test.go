package faulty

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
)

// fake is a tiny in-memory gpu.Device: enough state to notice calls that
// should not have reached it.
type fake struct {
	calls   map[string]int
	streams int
	events  map[gpu.Event]bool // recorded?
	mem     map[gpu.Ptr][]byte
	words   []uint32
	now     time.Duration
	closed  bool
}

func newFake() *fake {
	return &fake{calls: map[string]int{}, events: map[gpu.Event]bool{}, mem: map[gpu.Ptr][]byte{}, words: make([]uint32, 1)}
}

func (d *fake) hit(m string) { d.calls[m]++ }

func (d *fake) Info() gpu.Info     { return gpu.Info{Backend: "fake", Name: "fake"} }
func (d *fake) Now() time.Duration { return d.now }
func (d *fake) Wait(_ context.Context, until time.Duration) error {
	d.hit("Wait")
	d.now = max(d.now, until)
	return nil
}
func (d *fake) NewContext() (gpu.Context, error)      { d.hit("NewContext"); return 1, nil }
func (d *fake) NewPartition(int) (gpu.Context, error) { d.hit("NewPartition"); return 2, nil }
func (d *fake) NewPartitionRest(int) (gpu.Context, error) {
	d.hit("NewPartitionRest")
	return 3, nil
}
func (d *fake) NewStream(gpu.StreamOptions) (gpu.Stream, error) {
	d.hit("NewStream")
	d.streams++
	return gpu.Stream(d.streams), nil
}
func (d *fake) DestroyStream(s gpu.Stream) error {
	d.hit("DestroyStream")
	if s <= 0 || int(s) > d.streams {
		return gpu.ErrInvalidHandle
	}
	return nil
}

type fakeModule struct{ d *fake }

func (m fakeModule) Function(name string) (gpu.Func, error) {
	m.d.hit("Function")
	if name == "" {
		return 0, gpu.ErrInvalidHandle
	}
	return 1, nil
}
func (d *fake) LoadModule(gpu.ModuleSource) (gpu.Module, error) {
	d.hit("LoadModule")
	return fakeModule{d}, nil
}
func (d *fake) Alloc(n int64) (gpu.Ptr, error) {
	d.hit("Alloc")
	p := gpu.Ptr(0x1000 * (len(d.mem) + 1))
	d.mem[p] = make([]byte, n)
	return p, nil
}
func (d *fake) Free(p gpu.Ptr) error {
	d.hit("Free")
	if _, ok := d.mem[p]; !ok {
		return gpu.ErrInvalidHandle
	}
	delete(d.mem, p)
	return nil
}
func (d *fake) CopyToDevice(dst gpu.Ptr, src []byte) error {
	d.hit("CopyToDevice")
	copy(d.mem[dst], src)
	return nil
}
func (d *fake) CopyFromDevice(dst []byte, src gpu.Ptr) error {
	d.hit("CopyFromDevice")
	copy(dst, d.mem[src])
	return nil
}
func (d *fake) Memset32(gpu.Stream, gpu.Ptr, uint32, int) error { d.hit("Memset32"); return nil }
func (d *fake) NewHostWords(n int) ([]gpu.HostWord, error) {
	d.hit("NewHostWords")
	var out []gpu.HostWord
	for range n {
		d.words = append(d.words, 0)
		out = append(out, gpu.HostWord{Index: len(d.words) - 1, Dev: gpu.Ptr(0x100 + len(d.words))})
	}
	return out, nil
}
func (d *fake) Store(w gpu.HostWord, v uint32) { d.words[w.Index] = v }
func (d *fake) Load(w gpu.HostWord) uint32     { return d.words[w.Index] }
func (d *fake) Launch(gpu.Stream, *gpu.Launch) error {
	d.hit("Launch")
	d.now += time.Microsecond
	return nil
}
func (d *fake) NewEvent() (gpu.Event, error) {
	d.hit("NewEvent")
	e := gpu.Event(len(d.events) + 1)
	d.events[e] = false
	return e, nil
}
func (d *fake) DestroyEvent(e gpu.Event) error {
	d.hit("DestroyEvent")
	delete(d.events, e)
	return nil
}
func (d *fake) Record(e gpu.Event, _ gpu.Stream) error {
	d.hit("Record")
	d.events[e] = true
	return nil
}
func (d *fake) Query(e gpu.Event) (bool, error) { d.hit("Query"); return d.events[e], nil }
func (d *fake) Time(e gpu.Event) (time.Duration, error) {
	d.hit("Time")
	if !d.events[e] {
		return 0, gpu.ErrNotReady
	}
	return d.now, nil
}
func (d *fake) Close() error { d.hit("Close"); d.closed = true; return nil }

// scenario is a small piece of "driver loop" code: every Device call it makes
// is checked, as real code must.
func scenario(d gpu.Device) error {
	m, err := d.LoadModule(gpu.ModuleSource{Name: "k"})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	fn, err := m.Function("k")
	if err != nil {
		return fmt.Errorf("function: %w", err)
	}
	s, err := d.NewStream(gpu.StreamOptions{})
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	p, err := d.Alloc(16)
	if err != nil {
		return fmt.Errorf("alloc: %w", err)
	}
	if err := d.CopyToDevice(p, []byte("0123456789abcdef")); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	w, err := d.NewHostWords(1)
	if err != nil {
		return fmt.Errorf("words: %w", err)
	}
	d.Store(w[0], 1)
	e, err := d.NewEvent()
	if err != nil {
		return fmt.Errorf("event: %w", err)
	}
	for i := range 2 {
		if err := d.Launch(s, &gpu.Launch{Func: fn, Grid: gpu.D1(1), Block: gpu.D1(32)}); err != nil {
			return fmt.Errorf("launch %d: %w", i, err)
		}
	}
	if err := d.Record(e, s); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if err := d.Wait(context.Background(), d.Now()+time.Millisecond); err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	if _, err := d.Query(e); err != nil {
		return fmt.Errorf("query: %w", err)
	}
	if _, err := d.Time(e); err != nil {
		return fmt.Errorf("time: %w", err)
	}
	out := make([]byte, 16)
	if err := d.CopyFromDevice(out, p); err != nil {
		return fmt.Errorf("copy back: %w", err)
	}
	if string(out) != "0123456789abcdef" {
		return fmt.Errorf("copy back: got %q", out)
	}
	if err := d.Free(p); err != nil {
		return fmt.Errorf("free: %w", err)
	}
	if err := d.DestroyEvent(e); err != nil {
		return fmt.Errorf("destroy event: %w", err)
	}
	return d.DestroyStream(s)
}

func TestPassThroughCounts(t *testing.T) {
	inner := newFake()
	f := New(inner)
	if err := scenario(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	total := 0
	for m, n := range inner.calls {
		total += n
		if f.Count(m) != n {
			t.Errorf("%s: wrapper counted %d, device saw %d", m, f.Count(m), n)
		}
	}
	if f.Calls() != total {
		t.Errorf("Calls() = %d, device saw %d", f.Calls(), total)
	}
	if f.Count("Launch") != 2 || len(f.Injected()) != 0 {
		t.Errorf("launches %d, injected %v", f.Count("Launch"), f.Injected())
	}
	if !inner.closed {
		t.Error("Close did not reach the device")
	}
}

// Sweep the failure point over every call of the scenario, as pebble's
// errorfs tests do: each run fails exactly at its point, the failure wraps
// gpu.ErrDriver, and the failed call never reaches the device.
func TestSweepEveryCall(t *testing.T) {
	clean := New(newFake())
	if err := scenario(clean); err != nil {
		t.Fatal(err)
	}
	n := clean.Calls()
	t.Logf("scenario makes %d calls", n)
	if n < 15 {
		t.Fatalf("scenario makes only %d calls", n)
	}
	for i := 1; i <= n; i++ {
		inner := newFake()
		f := New(inner)
		if err := f.FailAt(i); err != nil {
			t.Fatal(err)
		}
		err := scenario(f)
		if err == nil {
			t.Fatalf("point %d: scenario succeeded", i)
		}
		if !errors.Is(err, gpu.ErrDriver) || !errors.Is(err, ErrInjected) {
			t.Fatalf("point %d: %v does not wrap gpu.ErrDriver and ErrInjected", i, err)
		}
		inj := f.Injected()
		if len(inj) != 1 || inj[0].Call != i {
			t.Fatalf("point %d: injected %v", i, inj)
		}
		if f.Calls() != i {
			t.Errorf("point %d: scenario went on to call %d after the failure", i, f.Calls())
		}
		if inner.calls[inj[0].Method] != f.Count(inj[0].Method)-1 {
			t.Errorf("point %d: failed %s reached the device", i, inj[0].Method)
		}
		var ie *InjectedError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), ie.Method) {
			t.Errorf("point %d: %v", i, err)
		}
	}
}

func TestFailMethod(t *testing.T) {
	f := New(newFake())
	if err := f.FailMethod("Launch", 2); err != nil {
		t.Fatal(err)
	}
	err := scenario(f)
	if err == nil || !strings.Contains(err.Error(), "launch 1") {
		t.Fatalf("want the second launch to fail, got %v", err)
	}
	f = New(newFake())
	must(t, f.FailMethod("Time", 0))
	if err := scenario(f); !errors.Is(err, ErrInjected) || !strings.HasPrefix(err.Error(), "time:") {
		t.Fatalf("want Time to fail, got %v", err)
	}
	// Rules can be cleared: the device works again.
	f.ClearRules()
	e, _ := f.NewEvent()
	s, _ := f.NewStream(gpu.StreamOptions{})
	must(t, f.Record(e, s))
	if _, err := f.Time(e); err != nil {
		t.Errorf("after ClearRules: %v", err)
	}
	// Bad input.
	if err := f.FailMethod("Lunch", 0); err == nil || !strings.Contains(err.Error(), "Launch") {
		t.Errorf("unknown method: %v", err)
	}
	if err := f.FailMethod("Launch", -1); err == nil {
		t.Error("negative nth accepted")
	}
	if err := f.FailAt(0); err == nil {
		t.Error("FailAt(0) accepted")
	}
	// Function calls on wrapped modules count and can fail.
	must(t, f.FailMethod("Function", 0)) // counts are kept across ClearRules: the scenario already made call 1
	m, err := f.LoadModule(gpu.ModuleSource{})
	must(t, err)
	if _, err := m.Function("k"); !errors.Is(err, gpu.ErrDriver) {
		t.Errorf("Function: %v", err)
	}
}

func TestFailWhenAndClose(t *testing.T) {
	inner := newFake()
	f := New(inner)
	f.FailWhen(func(m string, _, nth int) bool { return m == "Close" && nth == 1 })
	if err := f.Close(); !errors.Is(err, ErrInjected) {
		t.Fatalf("Close: %v", err)
	}
	if !inner.closed {
		t.Error("an injected Close failure must still close the device")
	}
	// Non-fallible methods pass through uncounted.
	before := f.Calls()
	_ = f.Info()
	_ = f.Now()
	if f.Calls() != before {
		t.Error("Info/Now were counted")
	}
	if f.Inner() != gpu.Device(inner) {
		t.Error("Inner")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestFailLaunchPicksByKernel(t *testing.T) {
	inner := newFake()
	f := New(inner)
	if err := f.FailLaunch(func(l *gpu.Launch) bool { return l.Name == "be" }, 2); err != nil {
		t.Fatal(err)
	}
	var errs []bool
	for _, name := range []string{"be", "hp", "be", "be", "hp"} {
		errs = append(errs, f.Launch(1, &gpu.Launch{Name: name}) != nil)
	}
	if want := []bool{false, false, true, false, false}; !slices.Equal(errs, want) {
		t.Errorf("failed launches %v, want %v (the second \"be\" only)", errs, want)
	}
	if err := f.FailLaunch(nil, 1); err == nil {
		t.Error("FailLaunch(nil) accepted")
	}
}

// Poison: calls pass until the picked launch, which fails with every call
// after it, whatever the method; ClearRules lifts it.
func TestPoisonFailsEverythingAfter(t *testing.T) {
	inner := newFake()
	f := New(inner)
	if err := f.Poison(func(l *gpu.Launch) bool { return l.Name == "be" }, 2); err != nil {
		t.Fatal(err)
	}
	var errs []bool
	for _, name := range []string{"be", "hp", "be", "hp"} {
		errs = append(errs, f.Launch(1, &gpu.Launch{Name: name}) != nil)
	}
	if want := []bool{false, false, true, true}; !slices.Equal(errs, want) {
		t.Errorf("failed launches %v, want %v (from the second \"be\" on)", errs, want)
	}
	if _, err := f.NewEvent(); !errors.Is(err, ErrInjected) {
		t.Errorf("NewEvent after the poison: %v, want an injected error", err)
	}
	if _, err := f.Alloc(16); !errors.Is(err, gpu.ErrDriver) {
		t.Errorf("Alloc after the poison: %v, want a driver error", err)
	}
	f.ClearRules()
	if err := f.Launch(1, &gpu.Launch{Name: "hp"}); err != nil {
		t.Errorf("after ClearRules: %v", err)
	}
	if err := f.Poison(func(*gpu.Launch) bool { return true }, 0); err == nil {
		t.Error("Poison at launch 0 accepted")
	}
}
