package kernels

import (
	"bytes"
	"testing"

	"atoll/gpu"
)

// TestLaunchCache: the launch path's per-op cache gives every launch of an
// op the same function, name and arguments (but the epoch) as the first,
// keeps different ops apart, and follows the buffers given each time.
func TestLaunchCache(t *testing.T) {
	dev := newFake()
	lib := New(dev)
	a := GEMM{M: 256, N: 256, K: 64, In: BF16, Out: BF16}
	b := GEMM{M: 128, N: 256, K: 64, In: BF16, Out: BF16}
	ba, _ := Alloc(dev, a, 1)
	bb, _ := Alloc(dev, b, 2)
	ba2, _ := Alloc(dev, a, 3)
	first, err := lib.Launch(a, gpu.Plain, ba, Control{})
	if err != nil {
		t.Fatal(err)
	}
	compiles := lib.Compiles
	again, err := lib.Launch(a, gpu.Plain, ba, Control{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := lib.Launch(b, gpu.Plain, bb, Control{})
	if err != nil {
		t.Fatal(err)
	}
	moved, err := lib.Launch(a, gpu.Plain, ba2, Control{})
	if err != nil {
		t.Fatal(err)
	}
	const epoch = 40 // packCtl: 4 pointers, logical, offset, then the epoch
	// GemmP ends with the run's identity: its epoch is its last int32.
	tail := CtlBytes + paramBytes["GemmP"] - 8
	same := func(x, y *gpu.Launch) bool {
		p, q := bytes.Clone(x.Args.Bytes()), bytes.Clone(y.Args.Bytes())
		for _, b := range [][]byte{p, q} {
			copy(b[epoch:epoch+4], []byte{0, 0, 0, 0})
			copy(b[tail:tail+4], []byte{0, 0, 0, 0})
		}
		return bytes.Equal(p, q)
	}
	if lib.Compiles != compiles {
		t.Errorf("launching a compiled op again compiled %d more modules", lib.Compiles-compiles)
	}
	if again.Func != first.Func || again.Name != first.Name || again.Grid != first.Grid || !same(first, again) {
		t.Errorf("a cached launch differs from the first: %+v vs %+v", again, first)
	}
	if bytes.Equal(first.Args.Bytes()[epoch:epoch+4], again.Args.Bytes()[epoch:epoch+4]) {
		t.Errorf("the epoch did not advance")
	}
	if other.Grid == first.Grid || same(first, other) {
		t.Errorf("two ops share a cache entry")
	}
	if same(first, moved) {
		t.Errorf("a launch over other buffers kept the old pointers")
	}
	if n := len(dev.sources); lib.Compiles != n || compiles == 0 {
		t.Errorf("%d compiles, %d modules loaded", lib.Compiles, n)
	}
}
