package cuda

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"atoll/gpu"
	"atoll/gpu/faulty"
)

// A high-priority kernel launched behind a saturating low-priority grid must
// finish long before that grid: the priority really reaches the driver.
func TestGPUPriorityTakesEffect(t *testing.T) {
	d, k := openGPU(t)
	pr := d.Info().Priorities
	if pr.Greatest == pr.Least {
		t.Skip("device has a single stream priority")
	}
	if getPrio, err := dlsym(d.drv.lib, "cuStreamGetPriority"); err == nil {
		for _, p := range []int{pr.Greatest, pr.Least} {
			s, err := d.NewStream(gpu.StreamOptions{Priority: p})
			must(t, err)
			var got int32
			st, _ := d.stream(s)
			must(t, check("cuStreamGetPriority", d.drv.call(getPrio, st.h, uintptr(unsafe.Pointer(&got)))))
			if int(got) != p {
				t.Errorf("stream created with priority %d reports %d", p, got)
			}
		}
	}
	// run starts a saturating low-priority grid (20 waves of 8 blocks x 256
	// threads per SM, 100 µs per block: ~2 ms), then 200 µs later a 10 µs
	// kernel on a stream of priority hiPrio. It returns when that kernel and
	// the grid completed, relative to the grid's start.
	run := func(hiPrio int) (hiDone, loDone time.Duration) {
		lo, err := d.NewStream(gpu.StreamOptions{Priority: pr.Least})
		must(t, err)
		hi, err := d.NewStream(gpu.StreamOptions{Priority: hiPrio})
		must(t, err)
		sms := d.Info().Spec.SMs
		bl := &gpu.Launch{Name: "spin", Func: k.spin, Grid: gpu.D1(sms * 8 * 20), Block: gpu.D1(256)}
		bl.Args.U64(100_000)
		eStart, _ := d.NewEvent()
		eLo, _ := d.NewEvent()
		eHi, _ := d.NewEvent()
		must(t, d.Record(eStart, lo))
		must(t, d.Launch(lo, bl))
		must(t, d.Record(eLo, lo))
		for t0 := d.Now(); d.Now()-t0 < 200*time.Microsecond; {
		}
		must(t, d.Launch(hi, spinLaunch(k, 10_000)))
		must(t, d.Record(eHi, hi))
		hiAt := waitEvent(t, d, eHi)
		loAt := waitEvent(t, d, eLo)
		start, err := d.Time(eStart)
		must(t, err)
		return hiAt - start, loAt - start
	}
	hiDone, loDone := run(pr.Greatest)
	t.Logf("HP priority %d: HP kernel done at %v, BE grid at %v", pr.Greatest, hiDone, loDone)
	sameHi, sameLo := run(pr.Least)
	t.Logf("equal priority: HP kernel done at %v, BE grid at %v", sameHi, sameLo)
	if hiDone > loDone/2 || hiDone > sameHi/2 {
		t.Errorf("high-priority kernel done at %v of a %v low-priority grid (%v at equal priority)", hiDone, loDone, sameHi)
	}
}

// Event times stay right when the clock base is renewed (cuEventElapsedTime
// loses resolution far from its base).
func TestGPUClockRebase(t *testing.T) {
	d, k := openGPU(t)
	s, _ := d.NewStream(gpu.StreamOptions{})
	e1, _ := d.NewEvent()
	e2, _ := d.NewEvent()
	time.Sleep(1100 * time.Millisecond)
	// The GPU idled a second and clocked down: a kernel ahead of e1 takes
	// its wake-up (tens of µs, results/completion-h200), which would
	// otherwise fall between e1 and e2 and lengthen the timed spin.
	must(t, d.Launch(s, spinLaunch(k, 50_000)))
	before := d.Now()
	must(t, d.Record(e1, s))
	must(t, d.Launch(s, spinLaunch(k, 300_000)))
	must(t, d.Record(e2, s))
	oldBase := d.ctxs[0].baseAt
	t2 := waitEvent(t, d, e2) // the base is >1 s old: records the next base
	t1, err := d.Time(e1)     // may already promote it
	must(t, err)
	must(t, d.Synchronize())
	t1b, _ := d.Time(e1)
	t2b, _ := d.Time(e2)
	if d.ctxs[0].baseAt == oldBase {
		t.Fatalf("base not renewed (still %v)", oldBase)
	}
	t.Logf("before %v, e1 %v, e2 %v; after the rebase e1 %v, e2 %v (base %v -> %v)", before, t1, t2, t1b, t2b, oldBase, d.ctxs[0].baseAt)
	_, step := d.ClockSteering()
	if diff := max((t2b - t2).Abs(), (t1b - t1).Abs()); diff > 2*time.Microsecond+step {
		t.Errorf("event times moved by %v across the rebase (largest steering step %v)", diff, step)
	}
	if el := t2 - t1; el < 300*time.Microsecond || el > 400*time.Microsecond {
		t.Errorf("300 µs spin measured %v", el)
	}
	if t1 < before-d.ClockUncertainty()-20*time.Microsecond {
		t.Errorf("e1 at %v before it was recorded (%v)", t1, before)
	}
	// Wait alone keeps the base fresh too.
	time.Sleep(1100 * time.Millisecond)
	base := d.ctxs[0].baseAt
	for range 3 {
		must(t, d.Wait(context.Background(), d.Now()+time.Millisecond))
	}
	if d.ctxs[0].baseAt == base {
		t.Errorf("Wait did not renew a %v old base", d.Now()-base)
	}
	t2c, _ := d.Time(e2)
	_, step = d.ClockSteering()
	if diff := (t2c - t2b).Abs(); diff > 2*time.Microsecond+step {
		t.Errorf("e2 moved by %v across the second rebase", diff)
	}
}

// Sweep an injected driver failure over every call of a small driver loop on
// the real GPU: each run fails cleanly with gpu.ErrDriver, Close still
// releases everything, and the GPU works afterwards.
func TestGPUFaultSweep(t *testing.T) {
	_, _ = openGPU(t) // skip without a GPU; warms the module cache
	loop := func(dev gpu.Device) error {
		m, err := dev.LoadModule(gpu.ModuleSource{Name: "cuda_test", CUDA: testKernels})
		if err != nil {
			return err
		}
		fn, err := m.Function("fill")
		if err != nil {
			return err
		}
		s, err := dev.NewStream(gpu.StreamOptions{Priority: dev.Info().Priorities.Greatest})
		if err != nil {
			return err
		}
		p, err := dev.Alloc(1024)
		if err != nil {
			return err
		}
		if err := dev.CopyToDevice(p, make([]byte, 1024)); err != nil {
			return err
		}
		e, err := dev.NewEvent()
		if err != nil {
			return err
		}
		l := &gpu.Launch{Name: "fill", Func: fn, Grid: gpu.D1(1), Block: gpu.D1(256)}
		l.Args.Ptr(p).U32(9).I32(256)
		if err := dev.Launch(s, l); err != nil {
			return err
		}
		if err := dev.Record(e, s); err != nil {
			return err
		}
		for {
			ok, err := dev.Query(e)
			if err != nil {
				return err
			}
			if ok {
				break
			}
			if err := dev.Wait(context.Background(), dev.Now()+time.Millisecond); err != nil {
				return err
			}
		}
		if _, err := dev.Time(e); err != nil {
			return err
		}
		buf := make([]byte, 1024)
		if err := dev.CopyFromDevice(buf, p); err != nil {
			return err
		}
		if buf[4] != 10 {
			return fmt.Errorf("fill wrote % x", buf[:8])
		}
		return dev.Free(p)
	}
	open := func() *faulty.Device {
		d, err := Open(0)
		must(t, err)
		d.SetCacheDir(testCacheDir())
		return faulty.New(d)
	}
	f := open()
	must(t, loop(f))
	n := f.Calls()
	must(t, f.Close())
	for i := 1; i <= n; i++ {
		f := open()
		must(t, f.FailAt(i))
		err := loop(f)
		if !errors.Is(err, gpu.ErrDriver) || !errors.Is(err, faulty.ErrInjected) {
			t.Errorf("point %d: %v", i, err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("point %d: Close after the failure: %v", i, err)
		}
	}
	f = open()
	if err := loop(f); err != nil {
		t.Errorf("after the sweep: %v", err)
	}
	must(t, f.Close())
	t.Logf("swept %d failure points", n)
}

// TestGPULaunchQueueDepth measures how many launches (each followed by an
// event record, as the scheduler's driver makes them) the host can enqueue
// on one stream behind a 300 ms kernel before a launch call blocks until
// the GPU drains: it logs the host time of every 128 launches. A launch
// that blocks takes the blocker's remaining time.
//
//	bin/cuda.test -test.run GPULaunchQueueDepth -test.v
func TestGPULaunchQueueDepth(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	ev, err := d.NewEvent()
	must(t, err)
	must(t, d.Launch(s, spinLaunch(k, 300_000_000)))
	l := &gpu.Launch{Name: "empty", Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(32)}
	const step, most = 128, 8192
	blocked := -1
	t0 := time.Now()
	for n := 0; n < most && blocked < 0; n += step {
		t1 := time.Now()
		for range step {
			must(t, d.Launch(s, l))
			must(t, d.Record(ev, s))
		}
		dt := time.Since(t1)
		t.Logf("launches %5d-%5d: %8.1f µs (%.2f µs each)", n, n+step, float64(dt.Microseconds()), float64(dt.Nanoseconds())/1e3/step)
		if dt > 50*time.Millisecond {
			blocked = n
		}
	}
	must(t, d.Synchronize())
	if blocked < 0 {
		t.Logf("no launch blocked in %d launches (%v)", most, time.Since(t0))
	} else {
		t.Logf("a launch blocked between %d and %d queued", blocked, blocked+step)
	}
}

// TestGPUQueryAcrossContexts measures what polling an event of a green
// context costs with the context made current first (as query does) and
// with the primary context left current, and checks that the driver
// answers the second correctly: cuEventQuery and cuEventElapsedTime on a
// completed event of another context.
//
//	bin/cuda.test -test.run GPUQueryAcrossContexts -test.v
func TestGPUQueryAcrossContexts(t *testing.T) {
	d, k := openGPU(t)
	part, err := d.NewPartition(64)
	if err != nil {
		t.Skipf("no partition: %v", err)
	}
	s0, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	s1, err := d.NewStream(gpu.StreamOptions{Context: part})
	must(t, err)
	e0, err := d.NewEvent()
	must(t, err)
	e1, err := d.NewEvent()
	must(t, err)
	l := &gpu.Launch{Name: "empty", Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(32)}
	must(t, d.Launch(s0, l))
	must(t, d.Record(e0, s0))
	must(t, d.Launch(s1, l))
	must(t, d.Record(e1, s1))
	must(t, d.Synchronize())
	ev0, ev1 := &d.events[e0], &d.events[e1]
	c1 := ev1.ctx
	if c1 == 0 {
		t.Fatal("the partition's event was recorded in the primary context")
	}
	h0, h1 := ev0.native[0], ev1.native[c1]
	const n = 20000
	t0 := time.Now()
	for range n {
		must(t, d.use(0))
		if r := d.fast(d.drv.cuEventQuery, h0); r != resultSuccess {
			t.Fatalf("cuEventQuery (primary): %d", r)
		}
		must(t, d.use(c1))
		if r := d.fast(d.drv.cuEventQuery, h1); r != resultSuccess {
			t.Fatalf("cuEventQuery (green, current): %d", r)
		}
	}
	switched := time.Since(t0)
	must(t, d.use(0))
	t0 = time.Now()
	for range n {
		if r := d.fast(d.drv.cuEventQuery, h0); r != resultSuccess {
			t.Fatalf("cuEventQuery (primary): %d", r)
		}
		if r := d.fast(d.drv.cuEventQuery, h1); r != resultSuccess {
			t.Fatalf("cuEventQuery of the green context's event with the primary current: %d", r)
		}
	}
	stayed := time.Since(t0)
	var ms float32
	if r := d.fast(d.drv.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), d.ctxs[c1].base, h1); r != resultSuccess {
		t.Errorf("cuEventElapsedTime of the green context's events with the primary current: %d", r)
	}
	// And the other way round, through the device's own calls.
	must(t, d.use(c1))
	ev0.done, ev0.timed, ev0.given = false, false, false
	if ok, err := d.Query(e0); err != nil || !ok {
		t.Errorf("Query of a primary-context event with the green context current: %v, %v", ok, err)
	}
	if _, err := d.Time(e0); err != nil {
		t.Errorf("Time of a primary-context event with the green context current: %v", err)
	}
	t.Logf("two queries (primary, green): %.2f µs switching contexts, %.2f µs with the primary current (elapsed %.3f ms)",
		float64(switched.Nanoseconds())/1e3/n, float64(stayed.Nanoseconds())/1e3/n, ms)
}
