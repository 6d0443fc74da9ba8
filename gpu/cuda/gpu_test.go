package cuda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"atoll/gpu"
)

// The tests below need a GPU; they skip where Open reports gpu.ErrNoDevice.

const testKernels = `
static __device__ __forceinline__ unsigned long long globaltimer() {
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}
extern "C" __global__ void empty() {}
extern "C" __global__ void store_word(unsigned *w, unsigned v) {
	if (blockIdx.x == 0 && threadIdx.x == 0) { *(volatile unsigned *)w = v; __threadfence_system(); }
}
// echo_flag waits (at most timeout_ns) for *flag to become nonzero and
// stores what it saw into *out (0xffffffff on timeout).
extern "C" __global__ void echo_flag(const unsigned *flag, unsigned *out, unsigned long long timeout_ns) {
	if (blockIdx.x || threadIdx.x) return;
	unsigned long long t0 = globaltimer();
	unsigned v;
	while ((v = *(volatile const unsigned *)flag) == 0) {
		if (globaltimer() - t0 > timeout_ns) { v = 0xffffffffu; break; }
	}
	*(volatile unsigned *)out = v;
	__threadfence_system();
}
extern "C" __global__ void spin(unsigned long long ns) {
	unsigned long long t0 = globaltimer();
	while (globaltimer() - t0 < ns) {}
}
extern "C" __global__ void fill(unsigned *p, unsigned v, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) p[i] = v + i;
}
extern "C" __global__ void big_smem(unsigned *out) {
	extern __shared__ unsigned s[];
	s[threadIdx.x] = threadIdx.x * 3;
	__syncthreads();
	if (threadIdx.x == 0) out[blockIdx.x] = s[blockDim.x - 1];
}
`

type kernels struct {
	empty, store, echo, spin, fill, bigSmem gpu.Func
}

func openGPU(t testing.TB) (*Device, kernels) {
	t.Helper()
	d, err := Open(0)
	if errors.Is(err, gpu.ErrNoDevice) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	d.SetCacheDir(testCacheDir())
	m, err := d.LoadModule(gpu.ModuleSource{Name: "cuda_test", CUDA: testKernels})
	if err != nil {
		t.Fatal(err)
	}
	var k kernels
	for name, p := range map[string]*gpu.Func{"empty": &k.empty, "store_word": &k.store, "echo_flag": &k.echo, "spin": &k.spin, "fill": &k.fill, "big_smem": &k.bigSmem} {
		if *p, err = m.Function(name); err != nil {
			t.Fatal(err)
		}
	}
	return d, k
}

func testCacheDir() string { return filepath.Join(os.TempDir(), "atoll-cuda-test-cache") }

func spinLaunch(k kernels, ns int64) *gpu.Launch {
	l := &gpu.Launch{Name: "spin", Func: k.spin, Grid: gpu.D1(1), Block: gpu.D1(32)}
	l.Args.U64(uint64(ns))
	return l
}

func TestGPUInfo(t *testing.T) {
	d, _ := openGPU(t)
	in := d.Info()
	t.Logf("backend %s, %q, %s, priorities %+v, ctx API %q, clock uncertainty %v", in.Backend, in.Name, in.Driver, in.Priorities, d.ContextAPI(), d.ClockUncertainty())
	t.Logf("spec %+v", in.Spec)
	if in.Backend != "cuda" || in.Name == "" || in.Spec.SMs <= 0 {
		t.Errorf("incomplete info %+v", in)
	}
	if in.Priorities.Greatest > in.Priorities.Least {
		t.Errorf("priority range %+v inverted", in.Priorities)
	}
	s := in.Spec
	if s.MaxThreadsPerSM < s.MaxThreadsPerBlock || s.SharedMemPerSM < s.MaxSharedMemPerBlock || s.MaxBlocksPerSM <= 0 || s.WarpSize != 32 {
		t.Errorf("implausible per-SM limits %+v", s)
	}
	if known, err := gpu.LookupSpec(in.Name); err == nil {
		if err := s.Validate(); err != nil {
			t.Error(err)
		}
		if s.SMs != known.SMs || s.MaxBlocksPerSM != known.MaxBlocksPerSM || s.SharedMemPerSM != known.SharedMemPerSM || s.MaxSharedMemPerBlock != known.MaxSharedMemPerBlock {
			t.Errorf("driver attributes %+v differ from built-in %+v", s, known)
		}
	}
}

// The name table must agree with the driver's own cuGetErrorName.
func TestGPUErrorNamesMatchDriver(t *testing.T) {
	d, _ := openGPU(t)
	if d.drv.cuGetErrorName == 0 {
		t.Skip("driver has no cuGetErrorName")
	}
	for r, name := range resultNames {
		var p uintptr
		if d.drv.call(d.drv.cuGetErrorName, uintptr(r), uintptr(unsafe.Pointer(&p))) != resultSuccess {
			t.Logf("driver does not know %d (%s)", r, name)
			continue
		}
		if got := goString(p); got != name {
			t.Errorf("code %d: table %s, driver %s", r, name, got)
		}
	}
}

func TestGPUStreamsAndPriorities(t *testing.T) {
	d, k := openGPU(t)
	pr := d.Info().Priorities
	hi, err := d.NewStream(gpu.StreamOptions{Priority: pr.Greatest})
	if err != nil {
		t.Fatal(err)
	}
	lo, err := d.NewStream(gpu.StreamOptions{Priority: pr.Least})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{pr.Greatest - 1, pr.Least + 1} {
		if _, err := d.NewStream(gpu.StreamOptions{Priority: p}); !errors.Is(err, gpu.ErrDriver) || !strings.Contains(err.Error(), "Clamp") {
			t.Errorf("priority %d: %v", p, err)
		}
	}
	if _, err := d.NewStream(gpu.StreamOptions{Context: 5}); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("unknown context: %v", err)
	}
	e1, _ := d.NewEvent()
	e2, _ := d.NewEvent()
	if err := d.Launch(lo, spinLaunch(k, 200_000)); err != nil {
		t.Fatal(err)
	}
	must(t, d.Record(e1, lo))
	must(t, d.Launch(hi, spinLaunch(k, 1000)))
	must(t, d.Record(e2, hi))
	waitEvent(t, d, e1)
	waitEvent(t, d, e2)
	must(t, d.DestroyStream(lo))
	if err := d.Launch(lo, spinLaunch(k, 1)); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("launch on destroyed stream: %v", err)
	}
	if err := d.DestroyStream(lo); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("double destroy: %v", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func waitEvent(t testing.TB, d *Device, e gpu.Event) time.Duration {
	t.Helper()
	deadline := d.Now() + 5*time.Second
	for {
		ok, err := d.Query(e)
		must(t, err)
		if ok {
			at, err := d.Time(e)
			must(t, err)
			return at
		}
		if d.Now() > deadline {
			t.Fatalf("event %d did not complete in 5 s", e)
		}
		must(t, d.Wait(context.Background(), d.Now()+time.Millisecond))
	}
}

func TestGPUEventTimes(t *testing.T) {
	d, k := openGPU(t)
	s, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	e0, _ := d.NewEvent()
	e1, _ := d.NewEvent()
	e2, _ := d.NewEvent()
	if _, err := d.Time(e0); !errors.Is(err, gpu.ErrNotReady) {
		t.Errorf("Time of a never-recorded event: %v", err)
	}
	before := d.Now()
	must(t, d.Record(e0, s))
	must(t, d.Launch(s, spinLaunch(k, 2_000_000)))
	must(t, d.Record(e1, s))
	must(t, d.Launch(s, spinLaunch(k, 500_000)))
	must(t, d.Record(e2, s))
	if _, err := d.Time(e2); !errors.Is(err, gpu.ErrNotReady) {
		t.Errorf("Time of a pending event: %v", err)
	}
	t2 := waitEvent(t, d, e2)
	after := d.Now()
	t0, _ := d.Time(e0)
	t1, _ := d.Time(e1)
	t.Logf("host before %v, e0 %v, e1 %v (+%v), e2 %v (+%v), host after %v, uncertainty %v", before, t0, t1, t1-t0, t2, t2-t1, after, d.ClockUncertainty())
	slack := d.ClockUncertainty() + 20*time.Microsecond
	if t0 < before-slack || t2 > after+slack {
		t.Errorf("event times [%v, %v] outside the host window [%v, %v] (slack %v)", t0, t2, before, after, slack)
	}
	if d1 := t1 - t0; d1 < 2*time.Millisecond || d1 > 2*time.Millisecond+500*time.Microsecond {
		t.Errorf("2 ms spin measured %v", d1)
	}
	if d2 := t2 - t1; d2 < 500*time.Microsecond || d2 > 900*time.Microsecond {
		t.Errorf("0.5 ms spin measured %v", d2)
	}
	// Wait returns early when a recorded event completes.
	must(t, d.Launch(s, spinLaunch(k, 1_000_000)))
	must(t, d.Record(e1, s))
	start := d.Now()
	must(t, d.Wait(context.Background(), start+time.Second))
	if el := d.Now() - start; el > 100*time.Millisecond {
		t.Errorf("Wait took %v for a 1 ms kernel", el)
	}
	// And returns at until when nothing happens.
	start = d.Now()
	must(t, d.Wait(context.Background(), start+3*time.Millisecond))
	if el := d.Now() - start; el < 3*time.Millisecond || el > 20*time.Millisecond {
		t.Errorf("idle Wait(3ms) took %v", el)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Wait(ctx, d.Now()+time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context: %v", err)
	}
	must(t, d.DestroyEvent(e0))
	if _, err := d.Query(e0); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("Query of a destroyed event: %v", err)
	}
}

func TestGPUMemcpyRoundTrip(t *testing.T) {
	d, k := openGPU(t)
	const n = 1 << 20
	src := make([]byte, n)
	r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	p, err := d.Alloc(n)
	must(t, err)
	must(t, d.CopyToDevice(p, src))
	dst := make([]byte, n)
	for i := range dst {
		dst[i] = 0xAB
	}
	must(t, d.CopyFromDevice(dst, p))
	if !bytes.Equal(src, dst) {
		t.Fatal("round trip changed the data")
	}
	// A kernel and a memset on a stream, then a copy back.
	s, _ := d.NewStream(gpu.StreamOptions{})
	words := n / 4
	must(t, d.Memset32(s, p, 0xdeadbeef, words))
	l := &gpu.Launch{Name: "fill", Func: k.fill, Grid: gpu.D1(words / 256 / 2), Block: gpu.D1(256)}
	base := r.Uint32()
	l.Args.Ptr(p).U32(base).I32(int32(words / 2))
	must(t, d.Launch(s, l))
	e, _ := d.NewEvent()
	must(t, d.Record(e, s))
	waitEvent(t, d, e)
	must(t, d.CopyFromDevice(dst, p))
	for i := 0; i < words; i++ {
		got := uint32(dst[4*i]) | uint32(dst[4*i+1])<<8 | uint32(dst[4*i+2])<<16 | uint32(dst[4*i+3])<<24
		want := uint32(0xdeadbeef)
		if i < words/2 {
			want = base + uint32(i)
		}
		if got != want {
			t.Fatalf("word %d = %#x, want %#x", i, got, want)
		}
	}
	if err := d.CopyFromDevice(make([]byte, n+4), p); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("copy past the allocation: %v", err)
	}
	must(t, d.Free(p))
	if err := d.Free(p); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("double free: %v", err)
	}
	if _, err := d.Alloc(1 << 50); !errors.Is(err, gpu.ErrOutOfMemory) {
		t.Errorf("1 PiB alloc: %v", err)
	}
}

func TestGPUHostWords(t *testing.T) {
	d, k := openGPU(t)
	s, _ := d.NewStream(gpu.StreamOptions{Priority: d.Info().Priorities.Greatest})
	w, err := d.NewHostWords(3)
	must(t, err)
	for _, x := range w {
		if d.Load(x) != 0 || !x.Valid() {
			t.Fatalf("word %+v not zeroed/valid", x)
		}
	}
	// Kernel store visible to the host, observed through Wait.
	v := rand.Uint32()>>1 + 1
	l := &gpu.Launch{Name: "store_word", Func: k.store, Grid: gpu.D1(1), Block: gpu.D1(32)}
	l.Args.Ptr(w[0].Dev).U32(v)
	must(t, d.Launch(s, l))
	deadline := d.Now() + 2*time.Second
	for d.Load(w[0]) != v && d.Now() < deadline {
		must(t, d.Wait(context.Background(), d.Now()+10*time.Millisecond))
	}
	if got := d.Load(w[0]); got != v {
		t.Fatalf("host sees %#x, kernel stored %#x", got, v)
	}
	// Host store visible to a running kernel: echo_flag spins on w[1] and
	// copies what it sees to w[2].
	l = &gpu.Launch{Name: "echo_flag", Func: k.echo, Grid: gpu.D1(1), Block: gpu.D1(32)}
	l.Args.Ptr(w[1].Dev).Ptr(w[2].Dev).U64(uint64(2 * time.Second))
	must(t, d.Launch(s, l))
	time.Sleep(2 * time.Millisecond) // let the kernel start spinning
	flag := rand.Uint32()>>1 + 1
	d.Store(w[1], flag)
	deadline = d.Now() + 3*time.Second
	for d.Load(w[2]) == 0 && d.Now() < deadline {
		must(t, d.Wait(context.Background(), d.Now()+10*time.Millisecond))
	}
	if got := d.Load(w[2]); got != flag {
		t.Fatalf("kernel saw %#x, host stored %#x (0xffffffff: never saw it)", got, flag)
	}
	d.Store(gpu.HostWord{Index: 99}, 1) // ignored, must not crash
	if d.Load(gpu.HostWord{}) != 0 {
		t.Error("zero HostWord loads nonzero")
	}
}

func TestGPUInvalidLaunch(t *testing.T) {
	d, k := openGPU(t)
	s, _ := d.NewStream(gpu.StreamOptions{})
	sp := d.Info().Spec
	for name, l := range map[string]*gpu.Launch{
		"too many threads": {Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(sp.MaxThreadsPerBlock * 2)},
		"zero grid":        {Func: k.empty, Grid: gpu.D1(0), Block: gpu.D1(32)},
		"block z":          {Func: k.empty, Grid: gpu.D1(1), Block: gpu.Dim3{X: 1, Y: 1, Z: 1000}},
		"shared memory":    {Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(32), SharedMem: sp.MaxSharedMemPerBlock + 1},
	} {
		if err := d.Launch(s, l); !errors.Is(err, gpu.ErrInvalidLaunch) {
			t.Errorf("%s: %v, want gpu.ErrInvalidLaunch", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// Arguments that do not match the kernel's parameters.
	l := &gpu.Launch{Func: k.fill, Grid: gpu.D1(1), Block: gpu.D1(32)}
	l.Args.U32(1)
	if d.drv.cuFuncGetParamInfo != 0 {
		if err := d.Launch(s, l); !errors.Is(err, gpu.ErrInvalidLaunch) {
			t.Errorf("short args: %v", err)
		}
	}
	if err := d.Launch(s, &gpu.Launch{Func: 77, Grid: gpu.D1(1), Block: gpu.D1(1)}); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("unknown function: %v", err)
	}
	// More than 48 KiB of dynamic shared memory works once the attribute is raised.
	out, err := d.Alloc(4 * 4)
	must(t, err)
	big := &gpu.Launch{Func: k.bigSmem, Grid: gpu.D1(4), Block: gpu.D1(256), SharedMem: 100 << 10}
	big.Args.Ptr(out)
	must(t, d.Launch(s, big))
	e, _ := d.NewEvent()
	must(t, d.Record(e, s))
	waitEvent(t, d, e)
	buf := make([]byte, 16)
	must(t, d.CopyFromDevice(buf, out))
	if v := uint32(buf[0]) | uint32(buf[1])<<8; v != 255*3 {
		t.Errorf("big_smem wrote % x", buf)
	}
}

func TestGPUModuleCacheAndCompileErrors(t *testing.T) {
	d, _ := openGPU(t)
	dir := t.TempDir()
	d.SetCacheDir(dir)
	src := "extern \"C\" __global__ void k(int *p) { *p = " + time.Now().Format("150405.000000") + "; }"
	t0 := time.Now()
	m, err := d.LoadModule(gpu.ModuleSource{Name: "cache", CUDA: src})
	must(t, err)
	cold := time.Since(t0)
	files, _ := filepath.Glob(filepath.Join(dir, "*.cubin"))
	if len(files) != 1 {
		t.Fatalf("cache holds %v", files)
	}
	t0 = time.Now()
	_, err = d.LoadModule(gpu.ModuleSource{Name: "cache", CUDA: src})
	must(t, err)
	warm := time.Since(t0)
	t.Logf("compile+load %v, cached load %v", cold, warm)
	if _, err := m.Function("k"); err != nil {
		t.Error(err)
	}
	if _, err := m.Function("nope"); !errors.Is(err, gpu.ErrDriver) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("missing function: %v", err)
	}
	_, err = d.LoadModule(gpu.ModuleSource{Name: "broken", CUDA: "extern \"C\" __global__ void k() { undefined_thing(); }"})
	if !errors.Is(err, ErrCompile) || !strings.Contains(err.Error(), "undefined_thing") {
		t.Errorf("compile error: %v", err)
	}
	ptx, log, err := Compile("extern \"C\" __global__ void k() {}", "ptx.cu", -d.Arch())
	must(t, err)
	if !bytes.Contains(ptx, []byte(".entry k")) {
		t.Errorf("PTX lacks the entry (log %q): %.200s", log, ptx)
	}
	if _, err := d.LoadModule(gpu.ModuleSource{Name: "ptx", PTX: ptx}); err != nil {
		t.Errorf("load PTX: %v", err)
	}
	if _, err := d.LoadModule(gpu.ModuleSource{Name: "garbage", PTX: []byte("not ptx")}); !errors.Is(err, gpu.ErrDriver) {
		t.Errorf("garbage PTX: %v", err)
	}
	if v, err := NVRTCVersion(); err == nil {
		t.Logf("NVRTC %s", v)
	}
}

func TestGPUSecondContext(t *testing.T) {
	d, k := openGPU(t)
	c, err := d.NewContext()
	if err != nil {
		t.Fatalf("NewContext via %q: %v", d.ContextAPI(), err)
	}
	t.Logf("second context via %s", d.ContextAPI())
	s1, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	s2, err := d.NewStream(gpu.StreamOptions{Context: c, Priority: d.Info().Priorities.Least})
	must(t, err)
	w, err := d.NewHostWords(1)
	must(t, err)
	// A kernel of the primary module, launched in the second context (its
	// module is loaded there on first use), stores a HostWord.
	l := &gpu.Launch{Name: "store_word", Func: k.store, Grid: gpu.D1(1), Block: gpu.D1(32)}
	l.Args.Ptr(w[0].Dev).U32(1234)
	must(t, d.Launch(s2, l))
	e2, _ := d.NewEvent()
	must(t, d.Record(e2, s2))
	t2 := waitEvent(t, d, e2)
	if d.Load(w[0]) != 1234 {
		t.Errorf("second-context kernel stored %d", d.Load(w[0]))
	}
	// Memory of the second context, used by a kernel there.
	p, err := d.AllocIn(c, 1024)
	must(t, err)
	f := &gpu.Launch{Func: k.fill, Grid: gpu.D1(1), Block: gpu.D1(256)}
	f.Args.Ptr(p).U32(5).I32(256)
	must(t, d.Launch(s2, f))
	must(t, d.Record(e2, s2))
	waitEvent(t, d, e2)
	buf := make([]byte, 1024)
	must(t, d.CopyFromDevice(buf, p))
	if buf[4*7] != 12 {
		t.Errorf("fill in second context wrote % x", buf[:32])
	}
	// Events of both contexts are on one clock.
	must(t, d.Launch(s1, spinLaunch(k, 100_000)))
	e1, _ := d.NewEvent()
	must(t, d.Record(e1, s1))
	t1 := waitEvent(t, d, e1)
	if t1 < t2 {
		t.Errorf("primary event at %v before the earlier second-context event at %v", t1, t2)
	}
	if t1 > d.Now()+d.ClockUncertainty()+20*time.Microsecond {
		t.Errorf("event at %v after now %v", t1, d.Now())
	}
	must(t, d.Free(p))
}

// launchOverhead measures host time per launch of the empty kernel through
// Launch and through a direct purego cuLaunchKernel with the same function
// and stream: the median over batches.
func launchOverhead(t testing.TB, d *Device, k kernels, batches, per int) (atoll, direct time.Duration) {
	s, err := d.NewStream(gpu.StreamOptions{})
	must(t, err)
	st, _ := d.stream(s)
	l := &gpu.Launch{Name: "empty", Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(32)}
	h := d.funcs[k.empty].native[0]
	argv := []uintptr{h, 1, 1, 1, 32, 1, 1, 0, st.h, 0, 0}
	var ta, td []time.Duration
	for range batches {
		must(t, d.Synchronize())
		t0 := time.Now()
		for range per {
			if err := d.Launch(s, l); err != nil {
				t.Fatal(err)
			}
		}
		ta = append(ta, time.Since(t0)/time.Duration(per))
		must(t, d.Synchronize())
		t0 = time.Now()
		for range per {
			if r, _, _ := purego.SyscallN(d.drv.cuLaunchKernel, argv...); r != 0 {
				t.Fatal(check("cuLaunchKernel", Result(r)))
			}
		}
		td = append(td, time.Since(t0)/time.Duration(per))
	}
	must(t, d.Synchronize())
	slices.Sort(ta)
	slices.Sort(td)
	return ta[len(ta)/2], td[len(td)/2]
}

func TestGPULaunchOverhead(t *testing.T) {
	d, k := openGPU(t)
	atoll, direct := launchOverhead(t, d, k, 31, 200)
	t.Logf("per launch: atoll %v, direct purego cuLaunchKernel %v, added %v", atoll, direct, atoll-direct)
	if atoll-direct > 2*time.Microsecond {
		t.Errorf("atoll adds %v per launch (target <= 2 µs)", atoll-direct)
	}
	s, _ := d.NewStream(gpu.StreamOptions{})
	l := &gpu.Launch{Name: "empty", Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(32)}
	var i int
	allocs := testing.AllocsPerRun(500, func() {
		if err := d.Launch(s, l); err != nil {
			t.Fatal(err)
		}
		if i++; i%100 == 0 {
			d.Synchronize()
		}
	})
	if allocs != 0 {
		t.Errorf("Launch allocates %v times per call", allocs)
	}
	f := &gpu.Launch{Name: "store_word", Func: k.store, Grid: gpu.D1(1), Block: gpu.D1(32)}
	w, _ := d.NewHostWords(1)
	allocs = testing.AllocsPerRun(500, func() {
		f.Args.Reset()
		f.Args.Ptr(w[0].Dev).U32(3)
		if err := d.Launch(s, f); err != nil {
			t.Fatal(err)
		}
		if i++; i%100 == 0 {
			d.Synchronize()
		}
	})
	if allocs != 0 {
		t.Errorf("Launch with arguments allocates %v times per call", allocs)
	}
	must(t, d.Synchronize())
}

func BenchmarkLaunch(b *testing.B) {
	d, k := openGPU(b)
	s, err := d.NewStream(gpu.StreamOptions{})
	must(b, err)
	st, _ := d.stream(s)
	l := &gpu.Launch{Name: "empty", Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(32)}
	b.Run("atoll", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := d.Launch(s, l); err != nil {
				b.Fatal(err)
			}
			if i++; i%256 == 0 {
				b.StopTimer()
				d.Synchronize()
				b.StartTimer()
			}
		}
		d.Synchronize()
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		argv := []uintptr{d.funcs[k.empty].native[0], 1, 1, 1, 32, 1, 1, 0, st.h, 0, 0}
		i := 0
		for b.Loop() {
			if r, _, _ := purego.SyscallN(d.drv.cuLaunchKernel, argv...); r != 0 {
				b.Fatal(r)
			}
			if i++; i%256 == 0 {
				b.StopTimer()
				d.Synchronize()
				b.StartTimer()
			}
		}
		d.Synchronize()
	})
}

// Compiles of distinct programs run concurrently (kernels.Precompile),
// each giving the code of its own source, one of them broken.
func TestGPUCompileConcurrent(t *testing.T) {
	d, _ := openGPU(t)
	const n = 12
	var wg sync.WaitGroup
	out := make([]gpu.ModuleSource, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			src := fmt.Sprintf("extern \"C\" __global__ void k%d(int *o) { o[threadIdx.x] = %d; }", i, i)
			if i == n-1 {
				src = "extern \"C\" __global__ void k() { undefined_thing(); }"
			}
			// A fresh name per run keeps the disk cache out of it.
			out[i], errs[i] = d.Compile(gpu.ModuleSource{Name: fmt.Sprintf("concurrent%d", i), CUDA: src + fmt.Sprintf("// %d", time.Now().UnixNano())})
		})
	}
	wg.Wait()
	for i := range n - 1 {
		must(t, errs[i])
		m, err := d.LoadModule(out[i])
		must(t, err)
		if _, err := m.Function(fmt.Sprintf("k%d", i)); err != nil {
			t.Errorf("module %d lacks its own kernel: %v", i, err)
		}
	}
	if !errors.Is(errs[n-1], ErrCompile) || !strings.Contains(errs[n-1].Error(), "undefined_thing") {
		t.Errorf("broken program among concurrent compiles: %v", errs[n-1])
	}
}
