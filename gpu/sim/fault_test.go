package sim

import (
	"context"
	"errors"
	"strings"
	"testing"

	"atoll/gpu"
)

// A fault kernel's launch is accepted; every later call but the destroys
// and Close then fails with the driver error naming it, as a CUDA context's
// calls do after an illegal instruction or address. Work launched before it
// went through.
func TestFaultKernelPoisonsTheDevice(t *testing.T) {
	r := newRig(t, Config{})
	s := r.stream(0)
	ev, err := r.d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	r.launch(s, gpu.Launch{Name: "k", Grid: gpu.D1(4), Block: gpu.D1(128), Cost: gpu.Cost{Duration: 10e3}})
	mod, err := r.d.LoadModule(gpu.ModuleSource{Name: "drill"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := mod.Function(FaultPrefix + "trap_plain")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.d.Launch(s, &gpu.Launch{Name: "fault", Func: f, Grid: gpu.D1(1), Block: gpu.D1(32)}); err != nil {
		t.Fatalf("the fault kernel's launch: %v, want it accepted", err)
	}
	calls := map[string]error{}
	_, calls["NewEvent"] = r.d.NewEvent()
	calls["Record"] = r.d.Record(ev, s)
	_, calls["Query"] = r.d.Query(ev)
	_, calls["Alloc"] = r.d.Alloc(64)
	calls["CopyToDevice"] = r.d.CopyToDevice(1, []byte{0})
	calls["Launch"] = r.d.Launch(s, &gpu.Launch{Name: "k", Func: r.f, Grid: gpu.D1(1), Block: gpu.D1(32)})
	calls["Wait"] = r.d.Wait(context.Background(), r.d.Now()+1)
	_, calls["NewStream"] = r.d.NewStream(gpu.StreamOptions{})
	for name, err := range calls {
		if !errors.Is(err, gpu.ErrDriver) || !strings.Contains(err.Error(), "trap_plain") {
			t.Errorf("%s after the fault: %v, want the driver error naming the fault kernel", name, err)
		}
	}
	if err := r.d.DestroyEvent(ev); err != nil {
		t.Errorf("DestroyEvent after the fault: %v", err)
	}
	if err := r.d.Close(); err != nil {
		t.Errorf("Close after the fault: %v", err)
	}
}
