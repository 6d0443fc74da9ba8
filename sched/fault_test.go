package sched_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/policies"
	"atoll/sched"
)

var errInjected = errors.New("injected fault")

// faultDevice wraps a Device and fails the fail-th call that can return an
// error (counting from 1; 0 never fails), in the spirit of pebble's
// errorfs. It records the name of every such call.
type faultDevice struct {
	gpu.Device
	fail  int
	n     int
	calls []string
}

func (f *faultDevice) hit(name string) error {
	f.n++
	f.calls = append(f.calls, name)
	if f.n == f.fail {
		return fmt.Errorf("%w: %s (call %d)", errInjected, name, f.n)
	}
	return nil
}

func (f *faultDevice) Wait(ctx context.Context, until time.Duration) error {
	if err := f.hit("Wait"); err != nil {
		return err
	}
	return f.Device.Wait(ctx, until)
}
func (f *faultDevice) NewContext() (gpu.Context, error) {
	if err := f.hit("NewContext"); err != nil {
		return 0, err
	}
	return f.Device.NewContext()
}
func (f *faultDevice) NewPartition(sms int) (gpu.Context, error) {
	if err := f.hit("NewPartition"); err != nil {
		return 0, err
	}
	return f.Device.NewPartition(sms)
}

func (f *faultDevice) NewPartitionRest(sms int) (gpu.Context, error) {
	if err := f.hit("NewPartitionRest"); err != nil {
		return 0, err
	}
	return f.Device.NewPartitionRest(sms)
}

func (f *faultDevice) NewStream(o gpu.StreamOptions) (gpu.Stream, error) {
	if err := f.hit("NewStream"); err != nil {
		return 0, err
	}
	return f.Device.NewStream(o)
}
func (f *faultDevice) DestroyStream(s gpu.Stream) error {
	if err := f.hit("DestroyStream"); err != nil {
		return err
	}
	return f.Device.DestroyStream(s)
}
func (f *faultDevice) LoadModule(src gpu.ModuleSource) (gpu.Module, error) {
	if err := f.hit("LoadModule"); err != nil {
		return nil, err
	}
	m, err := f.Device.LoadModule(src)
	if err != nil {
		return nil, err
	}
	return faultModule{m, f}, nil
}

type faultModule struct {
	gpu.Module
	f *faultDevice
}

func (m faultModule) Function(name string) (gpu.Func, error) {
	if err := m.f.hit("Function"); err != nil {
		return 0, err
	}
	return m.Module.Function(name)
}

func (f *faultDevice) Alloc(n int64) (gpu.Ptr, error) {
	if err := f.hit("Alloc"); err != nil {
		return 0, err
	}
	return f.Device.Alloc(n)
}
func (f *faultDevice) Free(p gpu.Ptr) error {
	if err := f.hit("Free"); err != nil {
		return err
	}
	return f.Device.Free(p)
}
func (f *faultDevice) Memset32(s gpu.Stream, p gpu.Ptr, v uint32, n int) error {
	if err := f.hit("Memset32"); err != nil {
		return err
	}
	return f.Device.Memset32(s, p, v, n)
}
func (f *faultDevice) NewHostWords(n int) ([]gpu.HostWord, error) {
	if err := f.hit("NewHostWords"); err != nil {
		return nil, err
	}
	return f.Device.NewHostWords(n)
}
func (f *faultDevice) Launch(s gpu.Stream, l *gpu.Launch) error {
	if err := f.hit("Launch"); err != nil {
		return err
	}
	return f.Device.Launch(s, l)
}
func (f *faultDevice) NewEvent() (gpu.Event, error) {
	if err := f.hit("NewEvent"); err != nil {
		return 0, err
	}
	return f.Device.NewEvent()
}
func (f *faultDevice) DestroyEvent(e gpu.Event) error {
	if err := f.hit("DestroyEvent"); err != nil {
		return err
	}
	return f.Device.DestroyEvent(e)
}
func (f *faultDevice) Record(e gpu.Event, s gpu.Stream) error {
	if err := f.hit("Record"); err != nil {
		return err
	}
	return f.Device.Record(e, s)
}
func (f *faultDevice) Query(e gpu.Event) (bool, error) {
	if err := f.hit("Query"); err != nil {
		return false, err
	}
	return f.Device.Query(e)
}
func (f *faultDevice) Time(e gpu.Event) (time.Duration, error) {
	if err := f.hit("Time"); err != nil {
		return 0, err
	}
	return f.Device.Time(e)
}

// cleanup calls: Run ignores their errors (the result is already known).
var cleanup = map[string]bool{"DestroyEvent": true, "DestroyStream": true, "Free": true}

// TestFaultSweep fails every device call of a small run, one at a time, for
// the policies that use each mechanism, and checks that Run returns the
// injected error wrapped in ErrDevice — never hangs, never panics, never
// reports success with a failed call — except for cleanup calls.
func TestFaultSweep(t *testing.T) {
	const dur = 3 * time.Millisecond
	w := smallWorkload(t, 700*time.Microsecond, dur)
	for _, name := range []string{"timeslice", "orion", "reef", "atoll", "atoll:split=true"} {
		t.Run(name, func(t *testing.T) {
			run := func(fail int) (*faultDevice, error) {
				pol, err := policies.ByName(name)
				if err != nil {
					t.Fatal(err)
				}
				fd := &faultDevice{Device: newSim(t), fail: fail}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err = sched.Run(ctx, fd, w, sched.Options{Policy: pol, Duration: dur})
				if errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("fail=%d: Run hung", fail)
				}
				return fd, err
			}
			clean, err := run(0)
			if err != nil {
				t.Fatalf("clean run: %v", err)
			}
			total := clean.n
			t.Logf("%d fallible device calls", total)
			for i := 1; i <= total; i++ {
				fd, err := run(i)
				call := "?"
				if i <= len(fd.calls) {
					call = fd.calls[i-1]
				}
				if cleanup[call] {
					continue
				}
				if !errors.Is(err, errInjected) || !errors.Is(err, sched.ErrDevice) {
					t.Fatalf("fail=%d (%s): Run returned %v, want the injected error wrapped in sched.ErrDevice", i, call, err)
				}
			}
		})
	}
}
