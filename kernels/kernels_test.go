package kernels

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"atoll/gpu"
)

// fakeDevice is a gpu.Device that records modules and keeps memory in host
// slices; it runs no kernels. Methods it does not override panic (nil
// embedded interface), so a test touching them fails loudly.
type fakeDevice struct {
	gpu.Device
	backend string
	sources []gpu.ModuleSource
	funcs   []string
	mem     map[gpu.Ptr][]byte
	next    gpu.Ptr
	failAt  int // Alloc call number that fails (1-based); 0 = never
	allocs  int
}

func newFake() *fakeDevice {
	return &fakeDevice{backend: "cuda", mem: map[gpu.Ptr][]byte{}, next: 0x10000, funcs: []string{""}}
}

func (f *fakeDevice) Info() gpu.Info {
	return gpu.Info{Backend: f.backend, Name: "fake", Spec: gpu.H200, Priorities: gpu.Priorities{Least: 0, Greatest: -5}}
}

type fakeModule struct {
	f   *fakeDevice
	src string
}

func (m fakeModule) Function(name string) (gpu.Func, error) {
	found := strings.Contains(m.src, "void "+name+"(") || strings.Contains(m.src, "PADDED("+name+",")
	for _, suf := range []string{"_plain", "_reset", "_resumable"} {
		if base, ok := strings.CutSuffix(name, suf); ok && strings.Contains(m.src, "FORMS("+base+",") {
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("%w: no %s", gpu.ErrInvalidHandle, name)
	}
	m.f.funcs = append(m.f.funcs, name)
	return gpu.Func(len(m.f.funcs) - 1), nil
}

func (f *fakeDevice) LoadModule(src gpu.ModuleSource) (gpu.Module, error) {
	f.sources = append(f.sources, src)
	if src.CUDA == "" {
		// compilingDevice's "cubin" is the source it compiled.
		return fakeModule{f, string(src.Cubin)}, nil
	}
	return fakeModule{f, src.CUDA}, nil
}

// compilingDevice is a gpu.Compiler whose compiles wait for release and
// fail with fail (if set).
type compilingDevice struct {
	*fakeDevice
	release chan struct{}
	fail    error
	calls   atomic.Int32
}

func (c *compilingDevice) Compile(src gpu.ModuleSource) (gpu.ModuleSource, error) {
	c.calls.Add(1)
	<-c.release
	if c.fail != nil {
		return gpu.ModuleSource{}, c.fail
	}
	return gpu.ModuleSource{Name: src.Name, Cubin: []byte(src.CUDA)}, nil
}

func (f *fakeDevice) Alloc(n int64) (gpu.Ptr, error) {
	f.allocs++
	if f.failAt > 0 && f.allocs == f.failAt {
		return 0, fmt.Errorf("%w: fake", gpu.ErrOutOfMemory)
	}
	p := f.next
	f.mem[p] = make([]byte, n)
	f.next += gpu.Ptr((n + 255) &^ 255)
	return p, nil
}

func (f *fakeDevice) Free(p gpu.Ptr) error {
	if _, ok := f.mem[p]; !ok {
		return gpu.ErrInvalidHandle
	}
	delete(f.mem, p)
	return nil
}

func (f *fakeDevice) CopyToDevice(dst gpu.Ptr, src []byte) error {
	b, ok := f.mem[dst]
	if !ok || len(src) > len(b) {
		return gpu.ErrInvalidHandle
	}
	copy(b, src)
	return nil
}

func (f *fakeDevice) CopyFromDevice(dst []byte, src gpu.Ptr) error {
	b, ok := f.mem[src]
	if !ok || len(dst) > len(b) {
		return gpu.ErrInvalidHandle
	}
	copy(dst, b)
	return nil
}

// allOps covers every op type and kernel family.
func allOps() []Op {
	ops := checkOps()
	return append(ops,
		GEMM{M: 4096, N: 4096, K: 4096, In: BF16, Out: BF16},
		Conv2D{N: 8, H: 56, W: 56, C: 64, OutC: 64, R: 3, S: 3, Stride: 1, Pad: 1, In: F16},
		Elementwise{Name: "relu", Elems: 100, In: F32},
	)
}

func TestSpecGeometry(t *testing.T) {
	for _, op := range allOps() {
		k, err := spec(op)
		if err != nil {
			t.Fatalf("%s %s: %v", op.Kernel(), op.Shape(), err)
		}
		g := op.Geometry()
		if k.grid != g.Grid || k.threads != g.Block.Count() || k.smem != g.SharedMem {
			t.Errorf("%s: spec %v/%d/%d differs from Geometry %+v", k.name, k.grid, k.threads, k.smem, g)
		}
		if k.name != op.Kernel() {
			t.Errorf("kernel name %q != %q", k.name, op.Kernel())
		}
		var outs int
		for _, ts := range k.tensors {
			if ts.Elems <= 0 {
				t.Errorf("%s: tensor %s has %d elements", k.name, ts.Name, ts.Elems)
			}
			if ts.Role == Output {
				outs++
			}
		}
		if outs == 0 {
			t.Errorf("%s: no output tensor", k.name)
		}
	}
	// GEMM-family grids cover the output with BMxBN tiles.
	for _, c := range []struct {
		g           GEMM
		tiles, smem int
	}{
		{GEMM{M: 4096, N: 4096, K: 64, In: BF16, Out: BF16}, 32 * 32, 71680},
		{GEMM{M: 100, N: 70, K: 8, Batch: 3, In: F16, Out: F32}, 2 * 2 * 3, 36864},
	} {
		geo := c.g.Geometry()
		if geo.Grid.Count() != c.tiles || geo.SharedMem != c.smem {
			t.Errorf("%s: %d tiles %d B smem, want %d and %d", c.g.Shape(), geo.Grid.Count(), geo.SharedMem, c.tiles, c.smem)
		}
	}
	// Backward convolutions use the implicit-GEMM shapes of cuda/gemm.cu.
	cv := Conv2D{N: 2, H: 8, W: 8, C: 16, OutC: 32, R: 3, S: 3, Stride: 2, Pad: 1, In: BF16}
	oh, ow := cv.Out()
	for _, c := range []struct {
		c       Conv2D
		m, n, k int
	}{
		{cv, 2 * oh * ow, 32, 9 * 16},
		{func() Conv2D { d := cv; d.BackwardData = true; return d }(), 2 * 8 * 8, 16, 9 * 32},
		{func() Conv2D { d := cv; d.BackwardFilter = true; return d }(), 9 * 16, 32, 2 * oh * ow},
	} {
		g := c.c.gemm()
		if g.M != c.m || g.N != c.n || g.K != c.k {
			t.Errorf("%s: gemm %dx%dx%d, want %dx%dx%d", c.c.Kernel(), g.M, g.N, g.K, c.m, c.n, c.k)
		}
		if c.c.FLOPs() != cv.FLOPs() {
			t.Errorf("%s: FLOPs %g differ from the forward pass's %g", c.c.Kernel(), c.c.FLOPs(), cv.FLOPs())
		}
	}
}

func TestBadShapes(t *testing.T) {
	shape := []Op{
		GEMM{M: 0, N: 4, K: 4, In: BF16, Out: BF16},
		GEMM{M: 4, N: 4, K: 4, In: F32, Out: F32},
		GEMM{M: 4, N: 4, K: 4, In: BF16, Out: I32},
		GEMM{M: 4, N: 4, K: 4, In: BF16, Out: BF16, Act: Act(9)},
		Conv2D{N: 1, H: 2, W: 2, C: 3, OutC: 4, R: 5, S: 5, In: BF16}, // empty output
		Conv2D{N: 1, H: 8, W: 8, C: 3, OutC: 4, R: 3, S: 3, In: BF16, BackwardData: true, BackwardFilter: true},
		Conv2D{N: 1, H: 8, W: 8, C: 3, OutC: 4, R: 3, S: 3, In: F32},
		Depthwise{N: 1, H: 4, W: 4, C: 0, R: 3, S: 3, In: F16},
		Elementwise{Name: "add", Elems: 0, In: F16},
		Elementwise{Name: "add", Elems: 8, In: I32},
		LayerNorm{Rows: 0, Cols: 8, In: F32},
		Softmax{Rows: 2, Cols: -1, In: F32},
		Pool{N: 1, H: 2, W: 2, C: 1, R: 3, S: 3, In: F32},
		Reduce{Name: "sum", Rows: 0, Cols: 1, In: F32},
		Gather{Rows: 4, Cols: 0, In: F32},
	}
	for _, op := range shape {
		if _, err := spec(op); !errors.Is(err, ErrShape) {
			t.Errorf("%T %s: err = %v, want ErrShape", op, op.Shape(), err)
		}
	}
	unsupported := []Op{
		Elementwise{Name: "adam", Elems: 8, In: F32},
		Reduce{Name: "xent", Rows: 4, Cols: 4, In: F32},
	}
	for _, op := range unsupported {
		if _, err := spec(op); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%T %s: err = %v, want ErrUnsupported", op, op.Shape(), err)
		}
	}
	if _, err := spec(nil); !errors.Is(err, ErrShape) {
		t.Errorf("nil op: %v", err)
	}
}

// paramBytes are the C sizes of the parameter structs (natural alignment,
// padded to 8), computed by hand from cuda/*.cu.
var paramBytes = map[string]int{
	"GemmP": 192, "EwP": 80, "DwP": 72, "LnP": 48, "SmP": 24, "PoolP": 64, "RedP": 32, "GatherP": 40, "SgemmP": 152,
}

func TestLaunchForms(t *testing.T) {
	dev := newFake()
	lib := New(dev)
	words := []gpu.HostWord{{Index: 1, Dev: 0x1000}, {Index: 2, Dev: 0x1004}}
	ctl := Control{Flag: words[0], Counter: 0x2000, Done: words[1]}
	for _, op := range allOps() {
		k, _ := spec(op)
		b, err := Alloc(dev, op, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, form := range []gpu.Form{gpu.Plain, gpu.Reset, gpu.Resumable} {
			l, err := lib.Launch(op, form, b, ctl)
			if err != nil {
				t.Fatalf("%s/%s: %v", k.name, form, err)
			}
			if got := dev.funcs[l.Func]; got != k.name+"_"+form.String() {
				t.Errorf("%s/%s: function %q", k.name, form, got)
			}
			if l.Form != form || l.Block.Count() != k.threads || l.SharedMem != k.smem {
				t.Errorf("%s/%s: launch %+v", k.name, form, l)
			}
			if want := CtlBytes + paramBytes[k.param]; len(l.Args.Bytes()) != want {
				t.Errorf("%s/%s: %d argument bytes, want %d", k.name, form, len(l.Args.Bytes()), want)
			}
			a := l.Args.Bytes()
			if gpu.Ptr(binary.LittleEndian.Uint64(a[0:])) != ctl.Flag.Dev || gpu.Ptr(binary.LittleEndian.Uint64(a[8:])) != ctl.Counter ||
				gpu.Ptr(binary.LittleEndian.Uint64(a[16:])) != ctl.Done.Dev {
				t.Errorf("%s/%s: Ctl pointers not first in Args", k.name, form)
			}
			if p := gpu.Ptr(binary.LittleEndian.Uint64(a[CtlBytes:])); p != b.T[0].Ptr {
				t.Errorf("%s/%s: first parameter %#x, want the first tensor %#x", k.name, form, p, b.T[0].Ptr)
			}
			logical := int(binary.LittleEndian.Uint32(a[32:]))
			if logical != k.logical() {
				t.Errorf("%s/%s: Ctl.logical %d, want %d", k.name, form, logical, k.logical())
			}
			switch form {
			case gpu.Plain, gpu.Reset:
				if l.Grid != k.grid {
					t.Errorf("%s/%s: grid %v, want %v", k.name, form, l.Grid, k.grid)
				}
			case gpu.Resumable:
				per, _, _ := gpu.H200.Occupancy(k.threads, k.regs, k.smem)
				chunk := int(binary.LittleEndian.Uint32(a[44:]))
				want := min(per*gpu.H200.SMs, ceilDiv(k.logical(), chunk))
				if l.Grid.Count() != want || l.Logical != k.logical() || chunk != k.chunk {
					t.Errorf("%s/resumable: %d workers over %d (chunk %d), want %d over %d (chunk %d)",
						k.name, l.Grid.Count(), l.Logical, chunk, want, k.logical(), k.chunk)
				}
			}
			if l.Cost.FLOPs != op.FLOPs() || l.Cost.Bytes != op.Bytes() {
				t.Errorf("%s: cost %+v", k.name, l.Cost)
			}
		}
		if err := b.Free(dev); err != nil {
			t.Fatal(err)
		}
	}
	// One module per kernel instance, compiled once.
	if lib.Compiles != len(dev.sources) {
		t.Errorf("Compiles %d, modules %d", lib.Compiles, len(dev.sources))
	}
	before := lib.Compiles
	op := allOps()[0]
	b, _ := Alloc(dev, op, 2)
	if _, err := lib.Launch(op, gpu.Plain, b, Control{}); err != nil || lib.Compiles != before {
		t.Errorf("relaunch recompiled (%d -> %d): %v", before, lib.Compiles, err)
	}
	for _, src := range dev.sources {
		if !strings.Contains(src.CUDA, "FORMS(") || !strings.Contains(src.CUDA, "struct Ctl") {
			t.Errorf("module %s lacks the instantiation or the ABI", src.Name)
		}
	}
}

func TestLaunchErrors(t *testing.T) {
	dev := newFake()
	lib := New(dev)
	op := GEMM{M: 64, N: 64, K: 64, In: BF16, Out: BF16}
	b, err := Alloc(dev, op, 1)
	if err != nil {
		t.Fatal(err)
	}
	flag := gpu.HostWord{Index: 1, Dev: 0x1000}
	cases := []struct {
		name string
		form gpu.Form
		bufs Buffers
		ctl  Control
		want error
	}{
		{"reset without flag", gpu.Reset, b, Control{}, ErrUnsupported},
		{"resumable without counter", gpu.Resumable, b, Control{Flag: flag, Done: flag}, ErrUnsupported},
		{"padded through Launch", gpu.Padded, b, Control{}, ErrUnsupported},
		{"no buffers", gpu.Plain, Buffers{}, Control{}, ErrBuffers},
		{"wrong buffers", gpu.Plain, Buffers{T: b.T[:2]}, Control{}, ErrBuffers},
		{"negative offset", gpu.Plain, b, Control{Offset: -1}, ErrShape},
		{"offset past the grid", gpu.Reset, b, Control{Flag: flag, Offset: 1}, ErrShape},
	}
	for _, c := range cases {
		if _, err := lib.Launch(op, c.form, c.bufs, c.ctl); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	big := GEMM{M: 640, N: 640, K: 64, In: BF16, Out: BF16} // 10x10 tiles of 64
	bb, _ := Alloc(dev, big, 1)
	if l, err := lib.Launch(big, gpu.Plain, bb, Control{Offset: 30, Blocks: 50}); err != nil || l.Grid != gpu.D1(50) ||
		binary.LittleEndian.Uint32(l.Args.Bytes()[36:]) != 30 {
		t.Errorf("slice [30, 80): %v %+v", err, l)
	}
	if l, err := lib.Launch(big, gpu.Reset, bb, Control{Flag: flag, Offset: 90}); err != nil || l.Grid != gpu.D1(10) {
		t.Errorf("slice [90, 100): %v %+v", err, l)
	}
	other, _ := Alloc(dev, GEMM{M: 32, N: 64, K: 64, In: BF16, Out: BF16}, 1)
	if _, err := lib.Launch(op, gpu.Plain, other, Control{}); !errors.Is(err, ErrBuffers) {
		t.Errorf("buffers of another shape: %v", err)
	}
	if _, err := lib.Launch(Elementwise{Name: "adam", Elems: 8, In: F32}, gpu.Plain, b, Control{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("adam: %v", err)
	}
	dev.failAt = dev.allocs + 2
	if _, err := Alloc(dev, op, 1); !errors.Is(err, gpu.ErrOutOfMemory) {
		t.Errorf("failed allocation: %v", err)
	}
}

func TestLaunchPadded(t *testing.T) {
	dev := newFake()
	lib := New(dev)
	hp := GEMM{M: 256, N: 256, K: 64, In: BF16, Out: BF16}
	be := LayerNorm{Rows: 1000, Cols: 256, In: F32}
	hb, _ := Alloc(dev, hp, 1)
	bb, _ := Alloc(dev, be, 2)
	ctl := Control{Flag: gpu.HostWord{Index: 1, Dev: 0x1000}, Counter: 0x2000, Done: gpu.HostWord{Index: 2, Dev: 0x1004}, Workers: 40}
	l, err := lib.LaunchPadded(hp, hb, Control{Offset: 4}, 10, be, bb, ctl)
	if err != nil {
		t.Fatal(err)
	}
	if l.Form != gpu.Padded || l.Pad == nil || l.Grid.Count() != 10 || l.Pad.Grid.Count() != 40 || l.Pad.Logical != 1000 {
		t.Fatalf("padded launch %+v pad %+v", l, l.Pad)
	}
	if dev.funcs[l.Func] != PaddedFunc(hp.Kernel(), be.Kernel()) || dev.funcs[l.Pad.Func] != be.Kernel()+"_resumable" {
		t.Errorf("functions %q / %q", dev.funcs[l.Func], dev.funcs[l.Pad.Func])
	}
	if l.Block.Count() != 256 || l.SharedMem != hp.Geometry().SharedMem {
		t.Errorf("block %v smem %d", l.Block, l.SharedMem)
	}
	if want := 2*CtlBytes + paramBytes["GemmP"] + paramBytes["LnP"]; len(l.Args.Bytes()) != want {
		t.Errorf("%d argument bytes, want %d", len(l.Args.Bytes()), want)
	}
	a := l.Args.Bytes()
	if got := binary.LittleEndian.Uint32(a[32:]); got != 10 {
		t.Errorf("HP Ctl.logical %d, want 10 HP blocks", got)
	}
	if got := binary.LittleEndian.Uint32(a[36:]); got != 4 {
		t.Errorf("HP Ctl.offset %d, want 4", got)
	}
	beCtl := CtlBytes + paramBytes["GemmP"]
	if gpu.Ptr(binary.LittleEndian.Uint64(a[beCtl:])) != ctl.Flag.Dev || binary.LittleEndian.Uint32(a[beCtl+32:]) != 1000 {
		t.Errorf("BE Ctl misplaced")
	}
	f := Flatten(l)
	if f.Grid.Count() != 50 || f.Pad != nil || f.Func != l.Func {
		t.Errorf("Flatten: %+v", f)
	}
	if Flatten(l.Pad) != l.Pad {
		t.Errorf("Flatten changed a non-padded launch")
	}
	if !strings.Contains(dev.sources[len(dev.sources)-1].CUDA, "PADDED(") && !strings.Contains(dev.sources[len(dev.sources)-2].CUDA, "PADDED(") {
		t.Errorf("no PADDED instantiation compiled")
	}
	if _, err := lib.LaunchPadded(hp, hb, Control{Offset: 9999}, 0, be, bb, ctl); !errors.Is(err, ErrShape) {
		t.Errorf("HP offset past the grid: %v", err)
	}
	if _, err := lib.LaunchPadded(hp, hb, Control{}, 0, be, bb, Control{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("BE without control: %v", err)
	}
}

// TestLaunchPaddedAsync: with AsyncPairs a missing pair kernel compiles
// off the caller's goroutine — LaunchPadded answers ErrCompiling at once,
// starts one compile however often it is asked, and launches once the
// compile is done; a failed compile is reported, not retried forever
// silently.
func TestLaunchPaddedAsync(t *testing.T) {
	for _, fail := range []error{nil, errors.New("nvrtc: boom")} {
		dev := &compilingDevice{fakeDevice: newFake(), release: make(chan struct{}), fail: fail}
		lib := New(dev)
		lib.AsyncPairs = true
		hp := GEMM{M: 256, N: 256, K: 64, In: BF16, Out: BF16}
		be := LayerNorm{Rows: 1000, Cols: 256, In: F32}
		hb, _ := Alloc(dev, hp, 1)
		bb, _ := Alloc(dev, be, 2)
		ctl := Control{Flag: gpu.HostWord{Index: 1, Dev: 0x1000}, Counter: 0x2000, Done: gpu.HostWord{Index: 2, Dev: 0x1004}, Workers: 40}
		for range 3 {
			if _, err := lib.LaunchPadded(hp, hb, Control{}, 0, be, bb, ctl); !errors.Is(err, ErrCompiling) {
				t.Fatalf("before the compile is done: %v, want ErrCompiling", err)
			}
		}
		close(dev.release)
		var l *gpu.Launch
		var err error
		for range 1000 {
			if l, err = lib.LaunchPadded(hp, hb, Control{}, 0, be, bb, ctl); !errors.Is(err, ErrCompiling) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if got := dev.calls.Load(); got != 1 {
			t.Errorf("%d compiles of one pair, want 1", got)
		}
		if fail != nil {
			if err == nil || !strings.Contains(err.Error(), "boom") || errors.Is(err, ErrCompiling) {
				t.Errorf("failed compile: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if l.Form != gpu.Padded || dev.funcs[l.Func] != PaddedFunc(hp.Kernel(), be.Kernel()) {
			t.Errorf("launch %+v (func %q)", l, dev.funcs[l.Func])
		}
	}
}

func TestWatch(t *testing.T) {
	dev := newFake()
	lib := New(dev)
	op := LayerNorm{Rows: 4, Cols: 8, In: F32}
	flag := gpu.HostWord{Index: 1, Dev: 0x1000}
	l, err := lib.Watch(op, flag, 0x3000, 0x3008)
	if err != nil {
		t.Fatal(err)
	}
	if dev.funcs[l.Func] != WatchFunc || l.Grid.Count() != 1 || l.Args.Len() != 24 {
		t.Errorf("watch launch %+v", l)
	}
	if a := l.Args.Bytes(); gpu.Ptr(binary.LittleEndian.Uint64(a)) != flag.Dev || gpu.Ptr(binary.LittleEndian.Uint64(a[8:])) != 0x3000 {
		t.Errorf("watch arguments % x", a)
	}
	if _, err := lib.Watch(op, gpu.HostWord{}, 0x3000, 0); !errors.Is(err, ErrUnsupported) {
		t.Errorf("watch without a flag: %v", err)
	}
}

func TestAllocFill(t *testing.T) {
	dev := newFake()
	op := Gather{Rows: 300, Cols: 8, In: BF16, Vocab: 17}
	b, err := Alloc(dev, op, 5)
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := b.Get("idx")
	for _, v := range idx.Host {
		if v < 0 || v >= 17 || v != math.Trunc(v) {
			t.Fatalf("index %v outside [0, 17)", v)
		}
	}
	out := b.Outputs()[0]
	got, _, err := Read(dev, out)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range got {
		if !math.IsNaN(v) {
			t.Fatalf("output not poisoned: %v", v)
		}
	}
	table, _ := b.Get("table")
	dev2 := newFake()
	b2, _ := Alloc(dev2, op, 5)
	t2, _ := b2.Get("table")
	for i := range table.Host {
		if table.Host[i] != t2.Host[i] {
			t.Fatal("same seed, different values")
		}
	}
	if err := b.Refill(dev, 6); err != nil {
		t.Fatal(err)
	}
	t3, _ := b.Get("table")
	same := 0
	for i := range t3.Host {
		if t3.Host[i] == t2.Host[i] {
			same++
		}
	}
	if same == len(t3.Host) {
		t.Error("Refill with a new seed kept the values")
	}
}

func TestConversions(t *testing.T) {
	cases := []struct {
		f    float32
		bf16 uint16
		f16  uint16
	}{
		{1, 0x3f80, 0x3c00},
		{-2, 0xc000, 0xc000},
		{0.5, 0x3f00, 0x3800},
		{65504, 0x4780, 0x7bff},
		{1e6, 0x4974, 0x7c00}, // f16 overflow -> inf
		{float32(math.Inf(-1)), 0xff80, 0xfc00},
		{5.960464477539063e-08, 0x3380, 0x0001}, // smallest f16 subnormal
		{1 + 1.0/256, 0x3f80, 0x3c04},           // bf16 tie -> even (down)
		{1 + 3.0/256, 0x3f82, 0x3c0c},           // bf16 tie -> even (up)
	}
	for _, c := range cases {
		if got := F32ToBF16(c.f); got != c.bf16 {
			t.Errorf("F32ToBF16(%g) = %#04x, want %#04x", c.f, got, c.bf16)
		}
		if got := F32ToF16(c.f); got != c.f16 {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", c.f, got, c.f16)
		}
	}
	if !math.IsNaN(float64(BF16ToF32(F32ToBF16(float32(math.NaN()))))) || !math.IsNaN(float64(F16ToF32(F32ToF16(float32(math.NaN()))))) {
		t.Error("NaN does not survive")
	}
	// Every finite half round-trips exactly through float32.
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := F32ToF16(f); back != uint16(h) {
			t.Fatalf("half %#04x -> %g -> %#04x", h, f, back)
		}
	}
}

// TestReferences checks the CPU references against independent formulas.
func TestReferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	vec := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.Float64()*2 - 1
		}
		return v
	}
	dot := func(a, b []float64) float64 {
		s := 0.0
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	// Convolution passes are adjoint: <fwd(x, w), dy> = <x, dgrad(dy, w)> = <w, wgrad(x, dy)>.
	for _, g := range []convGeom{{n: 2, h: 7, w: 6, c: 3, oc: 4, r: 3, s: 3, st: 2, pad: 1}, {n: 1, h: 5, w: 5, c: 2, oc: 3, r: 1, s: 1, st: 1}} {
		g.oh, g.ow = (g.h+2*g.pad-g.r)/g.st+1, (g.w+2*g.pad-g.s)/g.st+1
		x, w, dy := vec(g.n*g.h*g.w*g.c), vec(g.r*g.s*g.c*g.oc), vec(g.n*g.oh*g.ow*g.oc)
		y := refConvFwd(Buffers{}, g, x, w, nil, nil, ActNone)
		a, b, c := dot(y, dy), dot(x, refConvDgrad(g, dy, w)), dot(w, refConvWgrad(g, x, dy))
		if math.Abs(a-b) > 1e-9*math.Abs(a)+1e-12 || math.Abs(a-c) > 1e-9*math.Abs(a)+1e-12 {
			t.Errorf("conv adjoint identity broken: %g %g %g", a, b, c)
		}
	}
	// A 1x1 convolution is a GEMM.
	g := convGeom{n: 2, h: 3, w: 4, c: 5, oc: 6, r: 1, s: 1, st: 1, oh: 3, ow: 4}
	x, w, bias := vec(2*3*4*5), vec(5*6), vec(6)
	if e := RelErr(refConvFwd(Buffers{}, g, x, w, bias, nil, ActReLU), refGEMM(Buffers{}, x, w, bias, nil, 1, 24, 6, 5, ActReLU)); e > 1e-12 {
		t.Errorf("1x1 conv vs GEMM: %g", e)
	}
	// GEMM entry against its definition.
	a, bm := vec(3*4*5), vec(3*5*2)
	c := refGEMM(Buffers{}, a, bm, nil, nil, 3, 4, 2, 5, ActNone)
	if want := dot(a[2*20+3*5:2*20+4*5], []float64{bm[2*10+1], bm[2*10+3], bm[2*10+5], bm[2*10+7], bm[2*10+9]}); math.Abs(c[2*8+3*2+1]-want) > 1e-12 {
		t.Errorf("GEMM[2][3][1] = %g, want %g", c[2*8+7], want)
	}
	// Softmax rows sum to 1; layernorm rows have mean 0 and variance ~1 with gamma 1, beta 0.
	dev := newFake()
	sm := Softmax{Rows: 3, Cols: 50, In: F32}
	sb, _ := Alloc(dev, sm, 3)
	out, _ := Reference(sm, sb)
	for r := 0; r < 3; r++ {
		s := 0.0
		for _, v := range out[0][r*50 : (r+1)*50] {
			s += v
		}
		if math.Abs(s-1) > 1e-12 {
			t.Errorf("softmax row %d sums to %g", r, s)
		}
	}
	ln := LayerNorm{Rows: 2, Cols: 64, In: F32}
	lb, _ := Alloc(dev, ln, 4)
	for _, n := range []string{"gamma", "beta"} {
		tt, _ := lb.Get(n)
		for i := range tt.Host {
			tt.Host[i] = map[string]float64{"gamma": 1, "beta": 0}[n]
		}
	}
	lo, _ := Reference(ln, lb)
	row := lo[0][:64]
	mean, sq := 0.0, 0.0
	for _, v := range row {
		mean += v
		sq += v * v
	}
	if math.Abs(mean/64) > 1e-12 || math.Abs(sq/64-1) > 1e-3 {
		t.Errorf("layernorm row mean %g, mean square %g", mean/64, sq/64)
	}
	// Pooling with a 1x1 window is the identity; mean = sum / cols.
	p := Pool{N: 1, H: 3, W: 3, C: 2, R: 1, S: 1, Max: true, In: F32}
	pb, _ := Alloc(dev, p, 5)
	po, _ := Reference(p, pb)
	if e := RelErr(po[0], pb.T[0].Host); e != 0 {
		t.Errorf("1x1 max pool is not the identity: %g", e)
	}
	rs, rm := Reduce{Name: "sum", Rows: 4, Cols: 9, In: F32}, Reduce{Name: "mean", Rows: 4, Cols: 9, In: F32}
	rb, _ := Alloc(dev, rs, 6)
	so, _ := Reference(rs, rb)
	mo, _ := Reference(rm, rb)
	for i := range so[0] {
		if math.Abs(so[0][i]/9-mo[0][i]) > 1e-12 {
			t.Errorf("sum/cols != mean at %d", i)
		}
	}
	if e := RelErr([]float64{1, math.NaN()}, []float64{1, 2}); !math.IsInf(e, 1) {
		t.Errorf("NaN must fail the comparison, RelErr = %g", e)
	}
}

func TestSelfTestNeedsGPU(t *testing.T) {
	for _, dev := range []gpu.Device{nil, &fakeDevice{backend: "sim"}} {
		if _, err := SelfTest(context.Background(), dev, Options{}); !errors.Is(err, gpu.ErrNoDevice) {
			t.Errorf("SelfTest on %v: err = %v, want gpu.ErrNoDevice", dev, err)
		}
	}
}

func TestSources(t *testing.T) {
	for _, op := range allOps() {
		src, err := Source(op)
		if err != nil {
			t.Fatal(err)
		}
		k, _ := spec(op)
		for _, want := range []string{"B_" + k.name, "FORMS(" + k.name + ",", WatchFunc, k.body} {
			if !strings.Contains(src, want) {
				t.Errorf("%s: source lacks %q", k.name, want)
			}
		}
		if strings.Count(src, "{") != strings.Count(src, "}") {
			t.Errorf("%s: unbalanced braces", k.name)
		}
	}
	src, err := PairSource(allOps()[0], LayerNorm{Rows: 4, Cols: 8, In: F32})
	if err != nil || !strings.Contains(src, "PADDED(pad_") {
		t.Errorf("pair source: %v", err)
	}
	if _, err := Source(Elementwise{Name: "adam", Elems: 1, In: F32}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("adam source: %v", err)
	}
}

// TestFreezePairs: a frozen library starts no pair compile and answers
// ErrCompiling; WaitPairs reports the compiles in flight; a thaw lets the
// pair compile and launch.
func TestFreezePairs(t *testing.T) {
	dev := &compilingDevice{fakeDevice: newFake(), release: make(chan struct{})}
	lib := New(dev)
	lib.AsyncPairs = true
	hp := GEMM{M: 256, N: 256, K: 64, In: BF16, Out: BF16}
	be := LayerNorm{Rows: 1000, Cols: 256, In: F32}
	hb, _ := Alloc(dev, hp, 1)
	bb, _ := Alloc(dev, be, 2)
	ctl := Control{Flag: gpu.HostWord{Index: 1, Dev: 0x1000}, Counter: 0x2000, Done: gpu.HostWord{Index: 2, Dev: 0x1004}, Workers: 40}
	lib.FreezePairs(true)
	if _, err := lib.LaunchPadded(hp, hb, Control{}, 0, be, bb, ctl); !errors.Is(err, ErrCompiling) {
		t.Fatalf("frozen: %v, want ErrCompiling", err)
	}
	if dev.calls.Load() != 0 {
		t.Fatal("a frozen library compiled")
	}
	lib.FreezePairs(false)
	if _, err := lib.LaunchPadded(hp, hb, Control{}, 0, be, bb, ctl); !errors.Is(err, ErrCompiling) {
		t.Fatalf("thawed, compile pending: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if done, pending := lib.WaitPairs(ctx); done != 0 || pending != 1 {
		t.Errorf("WaitPairs with the compile held: %d done, %d pending", done, pending)
	}
	cancel()
	close(dev.release)
	if done, pending := lib.WaitPairs(context.Background()); done != 1 || pending != 0 {
		t.Errorf("WaitPairs after the compile: %d done, %d pending", done, pending)
	}
	lib.FreezePairs(true)
	if _, err := lib.LaunchPadded(hp, hb, Control{}, 0, be, bb, ctl); err != nil {
		t.Errorf("a pair compiled before the freeze must launch: %v", err)
	}
}

// PrecompilePairs compiles each padded pair once, in parallel on a
// compiler device, so that LaunchPadded then compiles nothing; a failing
// compile names its module.
func TestPrecompilePairs(t *testing.T) {
	dev := &compilingDevice{fakeDevice: newFake(), release: make(chan struct{})}
	close(dev.release)
	lib := New(dev)
	hp := GEMM{M: 96, N: 80, K: 64, In: BF16, Out: BF16}
	bes := []Op{Elementwise{Name: "add", Elems: 7000, Inputs: 2, In: BF16}, LayerNorm{Rows: 33, Cols: 300, In: BF16}}
	pairs := [][2]Op{{hp, bes[0]}, {hp, bes[1]}, {hp, bes[0]}}
	if err := lib.Precompile(append([]Op{hp}, bes...)); err != nil {
		t.Fatal(err)
	}
	if err := lib.PrecompilePairs(pairs); err != nil {
		t.Fatal(err)
	}
	if got := dev.calls.Load(); got != 5 {
		t.Errorf("%d compiles, want 3 kernels and 2 distinct pairs", got)
	}
	before := lib.Compiles
	ctl := Control{Flag: gpu.HostWord{Dev: 0x100, Index: 1}, Counter: 0x200, Done: gpu.HostWord{Dev: 0x300, Index: 2}, Workers: 2}
	hb, _ := Alloc(dev, hp, 1)
	for _, be := range bes {
		bb, _ := Alloc(dev, be, 2)
		if _, err := lib.LaunchPadded(hp, hb, Control{}, 0, be, bb, ctl); err != nil {
			t.Fatal(err)
		}
	}
	if lib.Compiles != before || dev.calls.Load() != 5 {
		t.Errorf("LaunchPadded compiled again after PrecompilePairs (%d -> %d modules)", before, lib.Compiles)
	}
	bad := &compilingDevice{fakeDevice: newFake(), release: make(chan struct{}), fail: errors.New("nvrtc: boom")}
	close(bad.release)
	err := New(bad).PrecompilePairs(pairs)
	if err == nil || !strings.Contains(err.Error(), PaddedFunc(mustSpec(t, hp).name, mustSpec(t, bes[0]).name)) {
		t.Errorf("failing compile: %v, want the pair's module named", err)
	}
}

func mustSpec(t *testing.T, op Op) *kspec {
	t.Helper()
	k, err := spec(op)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
