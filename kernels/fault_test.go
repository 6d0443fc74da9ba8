package kernels

import (
	"errors"
	"strings"
	"testing"

	"atoll/gpu"
	"atoll/gpu/sim"
)

// The fault drill's kernel: its names (which the simulator knows as a
// fault's by sim.FaultPrefix), one 32-thread block, a one-element
// buffer, every form launchable, no CPU reference, and kinds parsed both
// ways.
func TestFaultOp(t *testing.T) {
	dev := newFake()
	lib := New(dev)
	for _, kind := range []FaultKind{FaultTrap, FaultAddress} {
		op := Fault{Kind: kind}
		if !strings.HasPrefix(op.Kernel(), sim.FaultPrefix) || op.Geometry().Grid.Count() != 1 {
			t.Errorf("%v: kernel %q grid %v", kind, op.Kernel(), op.Geometry().Grid)
		}
		if k, err := ParseFaultKind(kind.String()); err != nil || k != kind {
			t.Errorf("ParseFaultKind(%q) = %v, %v", kind, k, err)
		}
		b, err := Alloc(dev, op, 1)
		if err != nil {
			t.Fatal(err)
		}
		ctl := Control{Flag: gpu.HostWord{Index: 1, Dev: 0x1000}, Counter: 0x2000, Done: gpu.HostWord{Index: 2, Dev: 0x1004}}
		for _, form := range []gpu.Form{gpu.Plain, gpu.Reset, gpu.Resumable} {
			if _, err := lib.Launch(op, form, b, ctl); err != nil {
				t.Errorf("%s %s: %v", op.Kernel(), form, err)
			}
		}
		if _, err := Reference(op, b); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Reference of a fault: %v, want ErrUnsupported", err)
		}
	}
	if _, err := ParseFaultKind("segv"); err == nil {
		t.Error(`ParseFaultKind("segv") accepted`)
	}
	if _, err := Tensors(Fault{Kind: 9}); !errors.Is(err, ErrShape) {
		t.Errorf("an unknown fault kind: %v, want ErrShape", err)
	}
}
