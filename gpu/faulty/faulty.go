package faulty

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"atoll/gpu"
)

// ErrInjected marks every error this package makes. Injected errors also wrap
// gpu.ErrDriver, so code under test handles them as driver failures.
var ErrInjected = errors.New("faulty: injected failure")

// InjectedError is the error a failed call returns.
type InjectedError struct {
	Method string // e.g. "Launch"
	Call   int    // 1-based index among all counted calls
}

func (e *InjectedError) Error() string {
	return fmt.Sprintf("faulty: injected driver failure of %s (call %d)", e.Method, e.Call)
}

// Unwrap makes errors.Is match ErrInjected and gpu.ErrDriver.
func (e *InjectedError) Unwrap() []error { return []error{ErrInjected, gpu.ErrDriver} }

// Methods are the gpu.Device (and gpu.Module) methods that can fail, in the
// names FailMethod accepts and Count reports. Info, Now, Store and Load cannot
// fail and are not counted.
var Methods = []string{
	"Wait", "NewContext", "NewPartition", "NewPartitionRest", "NewStream", "DestroyStream", "LoadModule", "Function",
	"Alloc", "Free", "CopyToDevice", "CopyFromDevice", "Memset32", "NewHostWords",
	"Launch", "NewEvent", "DestroyEvent", "Record", "Query", "Time",
	"NewGraph", "LaunchGraph", "DestroyGraph", "Matmul", "Conv", "Close",
}

// Rule decides whether a call fails: call is its 1-based index among all
// counted calls, nth its 1-based index among calls of the same method.
type Rule func(method string, call, nth int) bool

// Device wraps a gpu.Device and fails the calls its rules pick; a failed call
// does not reach the wrapped device. Like the device it wraps it has one
// owning goroutine; the counters are mutex-guarded so they may be read from
// anywhere.
type Device struct {
	inner gpu.Device
	mu    struct {
		sync.Mutex
		calls    int
		perName  map[string]int
		rules    []Rule
		launches []launchRule
		injected []InjectedError
		poisoned bool // a Poison launch failed: every counted call fails
		graphs   map[gpu.Graph][]gpu.Launch
	}
}

var _ gpu.Device = (*Device)(nil)

// New wraps d. With no rules, every call passes through (and is counted).
func New(d gpu.Device) *Device {
	f := &Device{inner: d}
	f.mu.perName = make(map[string]int)
	return f
}

// Inner is the wrapped device.
func (f *Device) Inner() gpu.Device { return f.inner }

// FailAt makes the i-th counted call (1-based) fail, whatever its method.
func (f *Device) FailAt(i int) error {
	if i < 1 {
		return fmt.Errorf("faulty: FailAt(%d): calls are numbered from 1", i)
	}
	f.FailWhen(func(_ string, call, _ int) bool { return call == i })
	return nil
}

// FailMethod makes calls of the named method fail: every one when nth is 0,
// else only its nth call (1-based).
func (f *Device) FailMethod(method string, nth int) error {
	if !slices.Contains(Methods, method) {
		return fmt.Errorf("faulty: unknown method %q (known: %s)", method, strings.Join(Methods, ", "))
	}
	if nth < 0 {
		return fmt.Errorf("faulty: FailMethod(%q, %d): nth must be 0 (every call) or positive", method, nth)
	}
	f.FailWhen(func(m string, _, n int) bool { return m == method && (nth == 0 || n == nth) })
	return nil
}

// FailWhen adds an arbitrary rule.
func (f *Device) FailWhen(r Rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.rules = append(f.mu.rules, r)
}

// launchRule fails the nth launch that pick selects.
type launchRule struct {
	pick   func(*gpu.Launch) bool
	nth    int
	seen   int
	poison bool // Poison: the device fails every call from this one on
}

// Poison makes the device fail the way a CUDA context does after a kernel
// fault (an illegal address, a trap: on an H100 every later launch,
// synchronization and allocation of the process returns the error): the
// nth launch that pick selects (1-based) fails, and so does every counted
// call after it, whatever its method. A new device (the engine reopening)
// is not poisoned.
func (f *Device) Poison(pick func(l *gpu.Launch) bool, nth int) error {
	if pick == nil || nth < 1 {
		return fmt.Errorf("faulty: Poison: want a pick function and nth >= 1")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.launches = append(f.mu.launches, launchRule{pick: pick, nth: nth, poison: true})
	return nil
}

// FailLaunch makes Launch fail for the launches pick selects (by kernel
// name, form, shape): every one when nth is 0, else only the nth of them
// (1-based) — e.g. a fault in one BE kernel among HP and BE launches. A
// graph's launches count as launches each time LaunchGraph submits them.
func (f *Device) FailLaunch(pick func(l *gpu.Launch) bool, nth int) error {
	if pick == nil || nth < 0 {
		return fmt.Errorf("faulty: FailLaunch: want a pick function and nth >= 0 (0: every launch it picks)")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.launches = append(f.mu.launches, launchRule{pick: pick, nth: nth})
	return nil
}

// ClearRules removes every rule and the poison; counters are kept.
func (f *Device) ClearRules() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.rules, f.mu.launches, f.mu.poisoned = nil, nil, false
}

// Calls is the number of counted calls so far.
func (f *Device) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.calls
}

// Count is the number of calls of one method so far.
func (f *Device) Count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.perName[method]
}

// Injected lists the failures injected so far, in order.
func (f *Device) Injected() []InjectedError {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.mu.injected)
}

// enter counts a call and returns the error to inject, or nil.
func (f *Device) enter(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.calls++
	f.mu.perName[method]++
	call, nth := f.mu.calls, f.mu.perName[method]
	if f.mu.poisoned {
		e := InjectedError{Method: method, Call: call}
		f.mu.injected = append(f.mu.injected, e)
		return &e
	}
	for _, r := range f.mu.rules {
		if r(method, call, nth) {
			e := InjectedError{Method: method, Call: call}
			f.mu.injected = append(f.mu.injected, e)
			return &e
		}
	}
	return nil
}

func (f *Device) Info() gpu.Info                 { return f.inner.Info() }
func (f *Device) Now() time.Duration             { return f.inner.Now() }
func (f *Device) Store(w gpu.HostWord, v uint32) { f.inner.Store(w, v) }
func (f *Device) Load(w gpu.HostWord) uint32     { return f.inner.Load(w) }

func (f *Device) Wait(ctx context.Context, until time.Duration) error {
	if err := f.enter("Wait"); err != nil {
		return err
	}
	return f.inner.Wait(ctx, until)
}

func (f *Device) NewContext() (gpu.Context, error) {
	if err := f.enter("NewContext"); err != nil {
		return 0, err
	}
	return f.inner.NewContext()
}

func (f *Device) NewPartition(sms int) (gpu.Context, error) {
	if err := f.enter("NewPartition"); err != nil {
		return 0, err
	}
	return f.inner.NewPartition(sms)
}

func (f *Device) NewPartitionRest(sms int) (gpu.Context, error) {
	if err := f.enter("NewPartitionRest"); err != nil {
		return 0, err
	}
	return f.inner.NewPartitionRest(sms)
}

func (f *Device) NewStream(opt gpu.StreamOptions) (gpu.Stream, error) {
	if err := f.enter("NewStream"); err != nil {
		return 0, err
	}
	return f.inner.NewStream(opt)
}

func (f *Device) DestroyStream(s gpu.Stream) error {
	if err := f.enter("DestroyStream"); err != nil {
		return err
	}
	return f.inner.DestroyStream(s)
}

// module wraps a gpu.Module so Function calls are counted and can fail.
type module struct {
	f     *Device
	inner gpu.Module
}

func (m module) Function(name string) (gpu.Func, error) {
	if err := m.f.enter("Function"); err != nil {
		return 0, err
	}
	return m.inner.Function(name)
}

func (f *Device) LoadModule(src gpu.ModuleSource) (gpu.Module, error) {
	if err := f.enter("LoadModule"); err != nil {
		return nil, err
	}
	m, err := f.inner.LoadModule(src)
	if err != nil {
		return nil, err
	}
	return module{f: f, inner: m}, nil
}

func (f *Device) Alloc(bytes int64) (gpu.Ptr, error) {
	if err := f.enter("Alloc"); err != nil {
		return 0, err
	}
	return f.inner.Alloc(bytes)
}

func (f *Device) Free(p gpu.Ptr) error {
	if err := f.enter("Free"); err != nil {
		return err
	}
	return f.inner.Free(p)
}

func (f *Device) CopyToDevice(dst gpu.Ptr, src []byte) error {
	if err := f.enter("CopyToDevice"); err != nil {
		return err
	}
	return f.inner.CopyToDevice(dst, src)
}

func (f *Device) CopyFromDevice(dst []byte, src gpu.Ptr) error {
	if err := f.enter("CopyFromDevice"); err != nil {
		return err
	}
	return f.inner.CopyFromDevice(dst, src)
}

func (f *Device) Memset32(s gpu.Stream, p gpu.Ptr, v uint32, n int) error {
	if err := f.enter("Memset32"); err != nil {
		return err
	}
	return f.inner.Memset32(s, p, v, n)
}

func (f *Device) NewHostWords(n int) ([]gpu.HostWord, error) {
	if err := f.enter("NewHostWords"); err != nil {
		return nil, err
	}
	return f.inner.NewHostWords(n)
}

func (f *Device) Launch(s gpu.Stream, l *gpu.Launch) error {
	if err := f.enter("Launch"); err != nil {
		return err
	}
	if err := f.launchFault("Launch", l); err != nil {
		return err
	}
	return f.inner.Launch(s, l)
}

// launchFault applies the FailLaunch rules to l (already counted).
func (f *Device) launchFault(method string, l *gpu.Launch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.mu.launches {
		r := &f.mu.launches[i]
		if !r.pick(l) {
			continue
		}
		r.seen++
		if r.nth == 0 || r.seen == r.nth {
			f.mu.poisoned = f.mu.poisoned || r.poison
			e := InjectedError{Method: method, Call: f.mu.calls}
			f.mu.injected = append(f.mu.injected, e)
			return &e
		}
	}
	return nil
}

func (f *Device) NewEvent() (gpu.Event, error) {
	if err := f.enter("NewEvent"); err != nil {
		return 0, err
	}
	return f.inner.NewEvent()
}

func (f *Device) DestroyEvent(e gpu.Event) error {
	if err := f.enter("DestroyEvent"); err != nil {
		return err
	}
	return f.inner.DestroyEvent(e)
}

func (f *Device) Record(e gpu.Event, s gpu.Stream) error {
	if err := f.enter("Record"); err != nil {
		return err
	}
	return f.inner.Record(e, s)
}

func (f *Device) Query(e gpu.Event) (bool, error) {
	if err := f.enter("Query"); err != nil {
		return false, err
	}
	return f.inner.Query(e)
}

func (f *Device) Time(e gpu.Event) (time.Duration, error) {
	if err := f.enter("Time"); err != nil {
		return 0, err
	}
	return f.inner.Time(e)
}

// Close closes the wrapped device unless the failure is injected; an
// injected Close failure still closes it (a real driver's Close that fails
// has released what it could), so sweeps do not leak devices.
func (f *Device) Close() error {
	err := f.enter("Close")
	cerr := f.inner.Close()
	if err != nil {
		return err
	}
	return cerr
}
