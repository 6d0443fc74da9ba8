package sim

import (
	"context"
	"errors"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"atoll/gpu"
)

const us = time.Microsecond

type rig struct {
	t     *testing.T
	d     *Device
	f     gpu.Func
	trace []TraceEvent
}

// newRig makes a device that records its trace (SM lists copied).
func newRig(t *testing.T, cfg Config) *rig {
	t.Helper()
	r := &rig{t: t}
	cfg.Trace = func(e TraceEvent) {
		e.SMs = append([]int16(nil), e.SMs...)
		r.trace = append(r.trace, e)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := d.LoadModule(gpu.ModuleSource{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if r.f, err = mod.Function("k"); err != nil {
		t.Fatal(err)
	}
	r.d = d
	return r
}

func (r *rig) stream(prio int) gpu.Stream {
	r.t.Helper()
	s, err := r.d.NewStream(gpu.StreamOptions{Priority: prio})
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

func (r *rig) launch(s gpu.Stream, l gpu.Launch) {
	r.t.Helper()
	if l.Func == 0 {
		l.Func = r.f
	}
	if err := r.d.Launch(s, &l); err != nil {
		r.t.Fatal(err)
	}
}

// drain runs until the device is idle (or a day of virtual time passed).
func (r *rig) drain() {
	r.t.Helper()
	for r.d.busy() {
		if err := r.d.Wait(context.Background(), r.d.Now()+24*time.Hour); err != nil {
			r.t.Fatal(err)
		}
	}
}

// ends maps kernel sequence numbers to completion times.
func (r *rig) ends() map[uint64]time.Duration {
	m := map[uint64]time.Duration{}
	for _, e := range r.trace {
		if e.Kind == TraceKernelEnd {
			m[e.Kernel] = e.Time
		}
	}
	return m
}

func (r *rig) starts() map[uint64]time.Duration {
	m := map[uint64]time.Duration{}
	for _, e := range r.trace {
		if e.Kind == TraceKernelStart {
			m[e.Kernel] = e.Time
		}
	}
	return m
}

func plain(name string, grid, threads int, d time.Duration) gpu.Launch {
	return gpu.Launch{Name: name, Grid: gpu.D1(grid), Block: gpu.D1(threads), Cost: gpu.Cost{Duration: d}}
}

func near(a, b, tol time.Duration) bool { return a-b <= tol && b-a <= tol }

func TestAloneTakesProfiledTime(t *testing.T) {
	for _, grid := range []int{1, 100, 132, 264, 1000, 5000} {
		r := newRig(t, Config{})
		s := r.stream(0)
		l := plain("k", grid, 1024, 300*us)
		l.Cost.ComputeFrac, l.Cost.MemoryFrac = 0.9, 0.8
		r.launch(s, l)
		r.drain()
		lat := gpu.H100SXM.LaunchLatency
		if got := r.ends()[1]; !near(got, lat+300*us, 1) {
			t.Errorf("grid %d: ends at %v, want %v", grid, got, lat+300*us)
		}
	}
}

func TestRooflineDuration(t *testing.T) {
	r := newRig(t, Config{})
	s := r.stream(0)
	spec := gpu.H100SXM
	l := plain("roof", 264, 1024, 0)
	l.Cost.Bytes = spec.DRAMBandwidth * 100e-6 // 100 µs of DRAM traffic
	l.Cost.FLOPs = spec.PeakFLOPS * 20e-6      // 20 µs of math
	r.launch(s, l)
	r.drain()
	if got, want := r.ends()[1], spec.LaunchLatency+100*us; !near(got, want, 1) {
		t.Errorf("roofline kernel ends at %v, want %v", got, want)
	}
}

// TestContentionMemoryVsCompute: a memory-bound BE kernel slows a
// memory-bound HP kernel more than a compute-bound BE kernel does.
func TestContentionMemoryVsCompute(t *testing.T) {
	hpTime := func(be *gpu.Cost) time.Duration {
		r := newRig(t, Config{})
		hi, lo := r.stream(-5), r.stream(0)
		hp := plain("hp", 132, 256, 100*us)
		hp.Cost.ComputeFrac, hp.Cost.MemoryFrac = 0.2, 0.7
		r.launch(hi, hp)
		if be != nil {
			b := plain("be", 132*7*20, 256, 0)
			b.Cost = *be
			r.launch(lo, b)
		}
		r.drain()
		return r.ends()[1] - r.starts()[1]
	}
	alone := hpTime(nil)
	memBE := hpTime(&gpu.Cost{Duration: 20 * time.Millisecond, ComputeFrac: 0.2, MemoryFrac: 0.9})
	cmpBE := hpTime(&gpu.Cost{Duration: 20 * time.Millisecond, ComputeFrac: 0.9, MemoryFrac: 0.1})
	t.Logf("HP alone %v, beside memory-bound BE %v, beside compute-bound BE %v", alone, memBE, cmpBE)
	if alone != 100*us {
		t.Errorf("alone: %v, want 100µs", alone)
	}
	if !(memBE > cmpBE && cmpBE >= alone) {
		t.Errorf("want memory-bound BE (%v) to slow HP more than compute-bound BE (%v) >= alone (%v)", memBE, cmpBE, alone)
	}
}

func TestStreamOrderAndConcurrency(t *testing.T) {
	r := newRig(t, Config{})
	a, b := r.stream(0), r.stream(0)
	r.launch(a, plain("a1", 10, 128, 50*us))
	r.launch(a, plain("a2", 10, 128, 50*us))
	r.launch(b, plain("b1", 10, 128, 80*us))
	r.drain()
	lat := gpu.H100SXM.LaunchLatency
	st, en := r.starts(), r.ends()
	if en[1] != lat+50*us || st[2] != en[1] || en[2] != en[1]+50*us {
		t.Errorf("stream a: a1 ends %v, a2 starts %v ends %v", en[1], st[2], en[2])
	}
	if st[3] != lat || en[3] != lat+80*us {
		t.Errorf("stream b runs concurrently: starts %v ends %v", st[3], en[3])
	}
}

// TestPriorityWaitsOnlyForResidentBlocks: the HP kernel starts as soon as
// the resident BE wave retires, ahead of the BE kernel's other waves.
func TestPriorityWaitsOnlyForResidentBlocks(t *testing.T) {
	r := newRig(t, Config{})
	hi, lo := r.stream(-5), r.stream(0)
	r.launch(lo, plain("be", 132*2*10, 1024, 10*100*us)) // 10 waves of 100 µs
	if err := r.d.Wait(context.Background(), 50*us); err != nil {
		t.Fatal(err)
	}
	r.launch(hi, plain("hp", 132, 1024, 30*us))
	r.drain()
	lat := gpu.H100SXM.LaunchLatency
	if got, want := r.starts()[2], lat+100*us; got != want {
		t.Errorf("HP starts at %v, want %v (end of the first BE wave)", got, want)
	}
	if got, want := r.ends()[2], lat+130*us; got != want {
		t.Errorf("HP ends at %v, want %v", got, want)
	}
}

// TestResetSemantics runs Reset launches with a Counter, so that their
// blocks read the flag through the device-memory relay and pay no host read
// (TestHostFlagRead covers those without).
func TestResetSemantics(t *testing.T) {
	r := newRig(t, Config{})
	w, _ := r.d.NewHostWords(1)
	relay, _ := r.d.Alloc(20)
	s := r.stream(0)
	l := plain("reset", 132*2*5, 1024, 5*200*us)
	l.Form, l.Flag, l.Counter = gpu.Reset, w[0], relay
	r.d.Store(w[0], 1) // raised before the kernel runs: every block exits at once
	r.launch(s, l)
	r.drain()
	lat := gpu.H100SXM.LaunchLatency
	if got, want := r.ends()[1], lat+5*DefaultBlockMin; got != want {
		t.Errorf("preempted reset kernel ends at %v, want %v (5 waves of BlockMin)", got, want)
	}
	for _, e := range r.trace {
		if e.Kind == TraceDispatch && !e.Exit {
			t.Fatalf("a block did work with the flag raised: %v", e)
		}
	}

	// Raised mid-kernel: resident blocks finish, later ones exit.
	r = newRig(t, Config{})
	w, _ = r.d.NewHostWords(1)
	l.Counter, _ = r.d.Alloc(20)
	s = r.stream(0)
	l.Flag = w[0]
	r.launch(s, l)
	if err := r.d.Wait(context.Background(), lat+250*us); err != nil {
		t.Fatal(err)
	}
	r.d.Store(w[0], 1)
	r.drain()
	// Wave 1 ran, wave 2 was resident at 250 µs and ran to 400 µs; waves
	// 3 to 5 exit at once.
	if got, want := r.ends()[1], lat+400*us+3*DefaultBlockMin; got != want {
		t.Errorf("reset mid-kernel ends at %v, want %v", got, want)
	}
}

// hostReadRun runs one launch of l alone (its Flag, when set, a fresh host
// word left down) and returns its run time from the kernel's eligibility.
func hostReadRun(t *testing.T, cfg Config, l gpu.Launch, flag, counter bool) time.Duration {
	t.Helper()
	r := newRig(t, cfg)
	if flag {
		w, _ := r.d.NewHostWords(2)
		l.Flag = w[0]
		if l.Form == gpu.Resumable {
			l.Done = w[1]
		}
	}
	s := r.stream(0)
	if counter {
		l.Counter, _ = r.d.Alloc(20)
		if err := r.d.Memset32(s, l.Counter, 0, 5); err != nil {
			t.Fatal(err)
		}
	}
	r.launch(s, l)
	r.drain()
	seq := uint64(1)
	return r.ends()[seq] - r.starts()[seq]
}

func TestHostFlagRead(t *testing.T) {
	// An elementwise-like kernel: 64k blocks of 256 threads (8 per SM,
	// 63 waves on 132 SMs), 260 µs alone: ~4 µs blocks.
	const n = 1 << 16
	base := plain("ew", n, 256, 260*us)
	plainT := hostReadRun(t, Config{}, base, false, false)
	reset := base
	reset.Form = gpu.Reset
	serial := time.Duration(n) * DefaultHostReadLatency // n reads, one at a time

	direct := hostReadRun(t, Config{}, reset, true, false)
	if direct < serial*9/10 || direct > serial+plainT {
		t.Errorf("reset reading the host flag: %v; want about %d reads x %v = %v (plain %v)", direct, n, DefaultHostReadLatency, serial, plainT)
	}
	if direct < 50*plainT {
		t.Errorf("reset reading the host flag: %v, only %.1fx plain %v", direct, float64(direct)/float64(plainT), plainT)
	}
	// The service time is the parameter: twice the latency, twice the time.
	slow := hostReadRun(t, Config{HostReadLatency: 2 * DefaultHostReadLatency}, reset, true, false)
	if r := float64(slow) / float64(direct); r < 1.9 || r > 2.1 {
		t.Errorf("HostReadLatency x2: %v vs %v (ratio %.2f, want ~2)", slow, direct, r)
	}
	// With the relay (Counter set), without a flag, and as persistent
	// workers (which read the relay in their Counter block), no host read.
	relay := hostReadRun(t, Config{}, reset, true, true)
	noFlag := hostReadRun(t, Config{}, reset, false, false)
	res := base
	res.Form, res.Grid, res.Logical = gpu.Resumable, gpu.D1(132*8), n
	resumable := hostReadRun(t, Config{}, res, true, true)
	for _, c := range []struct {
		name string
		got  time.Duration
	}{{"reset with relay", relay}, {"reset without flag", noFlag}, {"resumable", resumable}} {
		if !near(c.got, plainT, plainT/100) {
			t.Errorf("%s: %v, want about plain %v", c.name, c.got, plainT)
		}
	}
}

// TestHostFlagReadGPUWide: the server is one for the GPU, so two reset
// kernels on two streams share it, and long blocks pay their reads only
// once per wave.
func TestHostFlagReadGPUWide(t *testing.T) {
	r := newRig(t, Config{})
	w, _ := r.d.NewHostWords(1)
	const n = 132 * 8 * 4 // 4 waves of 8 blocks per SM, alone
	l := plain("ew", n, 256, 4*4*us)
	l.Form, l.Flag = gpu.Reset, w[0]
	a, b := r.stream(0), r.stream(0)
	r.launch(a, l)
	r.launch(b, l)
	r.drain()
	end := max(r.ends()[1], r.ends()[2]) - r.starts()[1]
	if serial := 2 * n * DefaultHostReadLatency; end < serial*9/10 || end > serial+50*us {
		t.Errorf("two reset kernels on two streams end after %v; want about %v (one server for %d reads)", end, serial, 2*n)
	}

	// 2 waves of 1 ms blocks: the reads (132 per wave) add a fraction.
	long := plain("long", 132*2, 1024, 2*time.Millisecond)
	plainT := hostReadRun(t, Config{}, long, false, false)
	long.Form = gpu.Reset
	resetT := hostReadRun(t, Config{}, long, true, false)
	if extra := resetT - plainT; extra <= 0 || extra > 2*132*2*DefaultHostReadLatency {
		t.Errorf("reset with 1 ms blocks: %v vs plain %v; want a few hundred µs more", resetT, plainT)
	}
}

// TestHostFlagReadRaise: blocks reading the host word see the flag when
// their read completes, so a raise during a wave's reads makes the blocks
// whose reads are still queued exit; Dispatch reports them as working (the
// flag is not read yet) and Retire as exits.
func TestHostFlagReadRaise(t *testing.T) {
	r := newRig(t, Config{})
	w, _ := r.d.NewHostWords(1)
	const n = 1 << 16
	l := plain("ew", n, 256, 260*us)
	l.Form, l.Flag = gpu.Reset, w[0]
	r.launch(r.stream(0), l)
	lat := gpu.H100SXM.LaunchLatency
	raise := lat + 5*time.Millisecond
	if err := r.d.Wait(context.Background(), raise); err != nil {
		t.Fatal(err)
	}
	r.d.Store(w[0], 1)
	r.drain()
	var worked, exited int
	for _, e := range r.trace {
		if e.Kind == TraceRetire {
			if e.Exit {
				exited += e.Blocks * len(e.SMs)
			} else {
				worked += e.Blocks * len(e.SMs)
			}
		}
	}
	if worked+exited != n || exited == 0 {
		t.Fatalf("retired %d working and %d exiting blocks, want %d in all, some exiting", worked, exited, n)
	}
	// About one read per µs until the raise did work; the rest read the
	// raised flag (still one read each) and exit.
	if hi := int(raise/DefaultHostReadLatency) + 132*8; worked > hi {
		t.Errorf("%d blocks worked, want at most ~%d (reads done by the raise + a wave)", worked, hi)
	}
	if end := r.ends()[1]; end < time.Duration(n)*DefaultHostReadLatency*9/10 {
		t.Errorf("ends at %v; every block still reads the flag once (%d reads)", end, n)
	}
}

// checkTakes asserts that Take events cover [0, n) exactly once.
func checkTakes(t *testing.T, trace []TraceEvent, part, n int) {
	t.Helper()
	seen := make([]int, n)
	for _, e := range trace {
		if e.Kind == TraceTake && e.Part == part {
			for i := e.First; i < e.First+e.Blocks; i++ {
				if i < 0 || i >= n {
					t.Fatalf("took logical block %d outside [0,%d)", i, n)
				}
				seen[i]++
			}
		}
	}
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("logical block %d taken %d times", i, c)
		}
	}
}

func TestResumablePreemptAndResume(t *testing.T) {
	r := newRig(t, Config{})
	d := r.d
	words, _ := d.NewHostWords(2)
	flag, done := words[0], words[1]
	ctr, _ := d.Alloc(4)
	s := r.stream(0)
	const logical = 132 * 2 * 10
	l := gpu.Launch{Name: "ptb", Grid: gpu.D1(132 * 2), Block: gpu.D1(1024), Form: gpu.Resumable,
		Flag: flag, Counter: ctr, Done: done, Logical: logical, Cost: gpu.Cost{Duration: 10 * 100 * us}}
	if err := d.Memset32(s, ctr, 0, 1); err != nil {
		t.Fatal(err)
	}
	r.launch(s, l)
	lat := gpu.H100SXM.LaunchLatency
	if err := d.Wait(context.Background(), lat+350*us); err != nil {
		t.Fatal(err)
	}
	d.Store(flag, 1)
	r.drain()
	var b [4]byte
	_ = d.CopyFromDevice(b[:], ctr)
	got := int(int32(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24))
	if got != 4*264 || d.Load(done) != 0 {
		t.Fatalf("after preemption: counter %d (want %d), done %d", got, 4*264, d.Load(done))
	}
	if end := r.ends()[1]; end != lat+400*us {
		t.Errorf("preempted kernel ended at %v, want %v (one logical block after the flag)", end, lat+400*us)
	}
	d.Store(flag, 0)
	r.launch(s, l) // relaunch continues from the counter
	r.drain()
	if d.Load(done) != 1 {
		t.Fatal("Done not stored after the relaunch finished")
	}
	checkTakes(t, r.trace, 0, logical)
	if got, want := r.ends()[2]-r.starts()[2], 600*us; got != want {
		t.Errorf("relaunch ran %v, want %v (the 6 remaining rounds)", got, want)
	}
}

func TestPaddedLaunch(t *testing.T) {
	hpAlone := func() time.Duration {
		r := newRig(t, Config{})
		r.launch(r.stream(-5), plain("hp", 66, 256, 40*us))
		r.drain()
		return r.ends()[1] - r.starts()[1]
	}()
	r := newRig(t, Config{})
	d := r.d
	words, _ := d.NewHostWords(2)
	ctr, _ := d.Alloc(4)
	s := r.stream(-5)
	pad := gpu.Launch{Name: "be", Func: r.f, Grid: gpu.D1(66), Block: gpu.D1(256), Form: gpu.Resumable,
		Flag: words[0], Counter: ctr, Done: words[1], Logical: 10000, Cost: gpu.Cost{Duration: 100 * 20 * us}}
	hp := plain("hp", 66, 256, 40*us)
	hp.Form, hp.Pad = gpu.Padded, &pad
	r.launch(s, hp)
	r.drain()
	var hpEnd, start time.Duration
	for _, e := range r.trace {
		if e.Kind == TraceKernelStart {
			start = e.Time
		}
		if e.Kind == TraceRetire && e.Part == 0 {
			hpEnd = e.Time
		}
	}
	if hpEnd-start != hpAlone {
		t.Errorf("HP part of the padded launch took %v, alone %v", hpEnd-start, hpAlone)
	}
	var b [4]byte
	_ = d.CopyFromDevice(b[:], ctr)
	if b[0] == 0 && b[1] == 0 {
		t.Error("padding made no BE progress")
	}
	if d.Load(words[1]) != 1 {
		t.Error("pad body finished but Done not stored")
	}
	checkTakes(t, r.trace, 1, 10000)
}

func TestContextTimeSlicing(t *testing.T) {
	r := newRig(t, Config{TimeSlice: 1000 * us, SwitchCost: 50 * us})
	d := r.d
	c1, _ := d.NewContext()
	s0 := r.stream(0)
	s1, err := d.NewStream(gpu.StreamOptions{Context: c1})
	if err != nil {
		t.Fatal(err)
	}
	r.launch(s0, plain("a", 132*2*30, 1024, 30*200*us)) // 6 ms alone
	r.launch(s1, plain("b", 132*2*30, 1024, 30*200*us))
	r.drain()
	en := r.ends()
	switches := 0
	resident := map[gpu.Context]int{}
	active := gpu.Context(0)
	for _, e := range r.trace {
		switch e.Kind {
		case TraceSwitch:
			switches++
			active = e.Context
		case TraceDispatch:
			if e.Context != active {
				t.Fatalf("context %d dispatched while %d is active", e.Context, active)
			}
			resident[e.Context] += e.Blocks * len(e.SMs)
		case TraceRetire:
			if e.Context != active {
				t.Fatalf("context %d progressed while suspended", e.Context)
			}
			resident[e.Context] -= e.Blocks * len(e.SMs)
		}
	}
	if switches < 8 {
		t.Errorf("only %d context switches for two 6 ms kernels with 1 ms slices", switches)
	}
	total := max(en[1], en[2])
	if lo, hi := 12*time.Millisecond, 12*time.Millisecond+time.Duration(switches)*50*us+10*us; total < lo || total > hi {
		t.Errorf("both done at %v, want in [%v, %v]", total, lo, hi)
	}
	t.Logf("%d switches, ends %v %v", switches, en[1], en[2])
}

func TestEventsAndWait(t *testing.T) {
	r := newRig(t, Config{})
	d := r.d
	ctx := context.Background()
	s := r.stream(0)
	e, _ := d.NewEvent()
	if ok, _ := d.Query(e); !ok {
		t.Error("unrecorded event should count as complete")
	}
	if _, err := d.Time(e); !errors.Is(err, gpu.ErrNotReady) {
		t.Errorf("Time of unrecorded event: %v", err)
	}
	r.launch(s, plain("k", 132, 256, 100*us))
	_ = d.Record(e, s)
	if ok, _ := d.Query(e); ok {
		t.Error("event complete before its kernel")
	}
	if _, err := d.Time(e); !errors.Is(err, gpu.ErrNotReady) {
		t.Errorf("Time before completion: %v", err)
	}
	// Wait stops at the event, not at until.
	if err := d.Wait(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	want := gpu.H100SXM.LaunchLatency + 100*us
	if d.Now() != want {
		t.Errorf("Wait returned at %v, want %v (the event)", d.Now(), want)
	}
	if tm, err := d.Time(e); err != nil || tm != want {
		t.Errorf("event time %v, %v; want %v", tm, err, want)
	}
	// Idle device: jump to until.
	if err := d.Wait(ctx, time.Second); err != nil || d.Now() != time.Second {
		t.Errorf("idle Wait: now %v, err %v", d.Now(), err)
	}
	// Until in the past: no-op.
	if err := d.Wait(ctx, time.Millisecond); err != nil || d.Now() != time.Second {
		t.Errorf("past Wait: now %v, err %v", d.Now(), err)
	}
	// Record on an idle stream completes at once.
	_ = d.Record(e, s)
	if tm, _ := d.Time(e); tm != time.Second {
		t.Errorf("idle record time %v", tm)
	}
	// Cancelled context.
	r.launch(s, plain("k", 132, 256, 100*us))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := d.Wait(cctx, 2*time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Wait: %v", err)
	}
}

func TestWaitReturnsOnDoneStore(t *testing.T) {
	r := newRig(t, Config{})
	d := r.d
	w, _ := d.NewHostWords(2)
	ctr, _ := d.Alloc(4)
	s := r.stream(0)
	r.launch(s, gpu.Launch{Grid: gpu.D1(132), Block: gpu.D1(128), Form: gpu.Resumable, Flag: w[0], Counter: ctr,
		Done: w[1], Logical: 132 * 3, Cost: gpu.Cost{Duration: 3 * 10 * us}})
	r.launch(s, plain("after", 132, 128, time.Millisecond))
	if err := d.Wait(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	// 132 workers run 3 logical blocks of 30 µs each.
	if want := gpu.H100SXM.LaunchLatency + 90*us; d.Load(w[1]) != 1 || d.Now() != want {
		t.Errorf("Wait returned at %v with done=%d; want the Done store at %v", d.Now(), d.Load(w[1]), want)
	}
}

func TestLaunchValidation(t *testing.T) {
	r := newRig(t, Config{})
	d := r.d
	s := r.stream(0)
	ctr, _ := d.Alloc(4)
	good := plain("k", 1, 128, us)
	good.Func = r.f
	mod := func(f func(l *gpu.Launch)) *gpu.Launch { l := good; f(&l); return &l }
	cases := []struct {
		name string
		s    gpu.Stream
		l    *gpu.Launch
		want error
	}{
		{"zero grid", s, mod(func(l *gpu.Launch) { l.Grid = gpu.Dim3{} }), gpu.ErrInvalidLaunch},
		{"too many threads", s, mod(func(l *gpu.Launch) { l.Block = gpu.D1(2048) }), gpu.ErrInvalidLaunch},
		{"smem over limit", s, mod(func(l *gpu.Launch) { l.SharedMem = 300 << 10 }), gpu.ErrInvalidLaunch},
		{"registers over limit", s, mod(func(l *gpu.Launch) { l.Registers = 300 }), gpu.ErrInvalidLaunch},
		{"registers do not fit", s, mod(func(l *gpu.Launch) { l.Block = gpu.D1(1024); l.Registers = 255 }), gpu.ErrInvalidLaunch},
		{"unknown func", s, mod(func(l *gpu.Launch) { l.Func = 99 }), gpu.ErrInvalidHandle},
		{"unknown stream", 42, &good, gpu.ErrInvalidHandle},
		{"nil launch", s, nil, gpu.ErrInvalidLaunch},
		{"resumable without counter", s, mod(func(l *gpu.Launch) { l.Form = gpu.Resumable; l.Logical = 5 }), gpu.ErrInvalidLaunch},
		{"resumable without logical", s, mod(func(l *gpu.Launch) { l.Form = gpu.Resumable; l.Counter = ctr }), gpu.ErrInvalidLaunch},
		{"resumable bad counter", s, mod(func(l *gpu.Launch) { l.Form = gpu.Resumable; l.Counter = 12345; l.Logical = 5 }), gpu.ErrInvalidHandle},
		{"padded without pad", s, mod(func(l *gpu.Launch) { l.Form = gpu.Padded }), gpu.ErrInvalidLaunch},
		{"bad frac", s, mod(func(l *gpu.Launch) { l.Cost.MemoryFrac = 1.5 }), gpu.ErrInvalidLaunch},
		{"negative cost", s, mod(func(l *gpu.Launch) { l.Cost.Duration = -1 }), gpu.ErrInvalidLaunch},
		{"unknown form", s, mod(func(l *gpu.Launch) { l.Form = 9 }), gpu.ErrInvalidLaunch},
	}
	for _, c := range cases {
		err := d.Launch(c.s, c.l)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
	}
	_ = d.DestroyStream(s)
	if err := d.Launch(s, &good); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("destroyed stream: %v", err)
	}
	if _, err := d.NewStream(gpu.StreamOptions{Priority: -6}); err == nil {
		t.Error("priority -6 accepted")
	}
	if _, err := d.NewStream(gpu.StreamOptions{Context: 3}); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("unknown context: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []Config{
		{BlockMin: -1}, {HostReadLatency: -us}, {Jitter: 0.7}, {Jitter: math.NaN()}, {Memory: -5}, {SamePriority: RoundRobin + 1},
		{Spec: gpu.Spec{Name: "x"}},
	} {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: got %v, want ErrConfig", c, err)
		}
	}
	d, err := New(Config{Spec: gpu.A100SXM})
	if err != nil || d.Info().Spec.SMs != 108 || d.Info().Backend != "sim" {
		t.Fatalf("A100 config: %v", err)
	}
}

func TestMemory(t *testing.T) {
	d, _ := New(Config{Memory: 1 << 40})
	big, err := d.Alloc(500 << 30) // bookkeeping only
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Alloc(600 << 30); !errors.Is(err, gpu.ErrOutOfMemory) {
		t.Errorf("over-allocation: %v", err)
	}
	data := []byte("hello, device")
	if err := d.CopyToDevice(big+(100<<30), data); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data)+3)
	if err := d.CopyFromDevice(got, big+(100<<30)-3); err != nil {
		t.Fatal(err)
	}
	if string(got[3:]) != string(data) || got[0] != 0 {
		t.Errorf("read back %q", got)
	}
	if len(d.mem.pages) > 2 {
		t.Errorf("%d pages stored for 13 bytes", len(d.mem.pages))
	}
	if err := d.Free(big); err != nil {
		t.Fatal(err)
	}
	if err := d.Free(big); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("double free: %v", err)
	}
	if err := d.CopyToDevice(big, data); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("copy to freed: %v", err)
	}
	if _, err := d.Alloc(1000 << 30); err != nil {
		t.Errorf("memory not returned by Free: %v", err)
	}
}

func TestMemsetIsOrdered(t *testing.T) {
	r := newRig(t, Config{})
	d := r.d
	p, _ := d.Alloc(64)
	s := r.stream(0)
	r.launch(s, plain("k", 1, 32, 10*us))
	_ = d.Memset32(s, p, 7, 16)
	e, _ := d.NewEvent()
	_ = d.Record(e, s)
	var b [64]byte
	_ = d.CopyFromDevice(b[:], p)
	if b[0] != 0 {
		t.Fatal("memset ran before the kernel ahead of it in its stream")
	}
	r.drain()
	_ = d.CopyFromDevice(b[:], p)
	if b[0] != 7 || b[60] != 7 {
		t.Fatalf("memset not applied: %v", b)
	}
}

func TestHostWordsConcurrent(t *testing.T) {
	d, _ := New(Config{})
	w, _ := d.NewHostWords(4)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 1000 {
				d.Store(w[i], uint32(j))
				_ = d.Load(w[(i+1)%4])
			}
		}()
	}
	for range 10 { // the owner maps more words meanwhile
		_, _ = d.NewHostWords(500)
	}
	wg.Wait()
	if d.Load(w[2]) != 999 {
		t.Errorf("word = %d", d.Load(w[2]))
	}
}

func TestDeterministicForSeed(t *testing.T) {
	run := func(seed uint64) []TraceEvent {
		r := newRig(t, Config{Seed: seed, Jitter: 0.2})
		hi, lo := r.stream(-5), r.stream(0)
		for i := range 20 {
			r.launch(lo, plain("be", 1000+i*37, 512, 2*time.Millisecond))
			r.launch(hi, plain("hp", 50+i*13, 256, 40*us))
		}
		r.drain()
		return r.trace
	}
	a, b, c := run(1), run(1), run(2)
	if !reflect.DeepEqual(a, b) {
		t.Error("same seed gave different traces")
	}
	if reflect.DeepEqual(a, c) {
		t.Error("different seeds with jitter gave the same trace")
	}
}

// Decided spends HostDecideCost of host time per launch decision while the
// device runs on; none without decisions or cost.
func TestHostDecideCost(t *testing.T) {
	const cost = 2 * us
	r := newRig(t, Config{HostDecideCost: cost})
	s := r.stream(0)
	r.launch(s, plain("k", 132, 256, 20*us))
	r.d.Decided(0)
	if got := r.d.Now(); got != 0 {
		t.Fatalf("no decisions moved the clock to %v", got)
	}
	r.d.Decided(3)
	if got := r.d.Now(); got != 3*cost {
		t.Fatalf("3 decisions: the clock reads %v, want %v", got, 3*cost)
	}
	r.drain()
	if want := gpu.H100SXM.LaunchLatency + 20*us; !near(r.ends()[1], want, 1) {
		t.Errorf("the kernel ended at %v, want %v (it ran during the decisions)", r.ends()[1], want)
	}
	if _, err := New(Config{HostDecideCost: -us}); !errors.Is(err, ErrConfig) {
		t.Errorf("negative decision cost: %v", err)
	}
}

// TestHostLaunchCost: each Launch moves the clock on by the host cost while
// the device keeps running: the first kernel starts (and progresses)
// during the later launches, each later kernel becomes eligible one host
// cost after the one before.
func TestHostLaunchCost(t *testing.T) {
	const cost = 5 * us
	r := newRig(t, Config{HostLaunchCost: cost})
	s := r.stream(0)
	for i := range 4 {
		r.launch(s, plain("k", 132, 256, 20*us))
		if got, want := r.d.Now(), time.Duration(i+1)*cost; got != want {
			t.Fatalf("after launch %d the clock reads %v, want %v", i+1, got, want)
		}
	}
	r.drain()
	lat := gpu.H100SXM.LaunchLatency
	st, en := r.starts(), r.ends()
	if !near(st[1], lat, 1) {
		t.Errorf("first kernel started at %v, want %v (during the later launches)", st[1], lat)
	}
	// One stream: kernel 4 runs after kernels 1-3 (each 20 µs > cost).
	if want := lat + 4*20*us; !near(en[4], want, 2) {
		t.Errorf("last kernel ended at %v, want %v", en[4], want)
	}
	if _, err := New(Config{HostLaunchCost: -us}); !errors.Is(err, ErrConfig) {
		t.Errorf("negative host cost: %v", err)
	}
}
