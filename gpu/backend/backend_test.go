package backend

import (
	"errors"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
)

func TestOpen(t *testing.T) {
	d, err := Open(Config{Backend: "sim", Sim: sim.Config{Spec: gpu.H100SXM, Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if in := d.Info(); in.Backend != "sim" || in.Spec.SMs != 132 {
		t.Errorf("sim device: %+v", in)
	}
	d.Close()
	// The simulator's whole configuration reaches it.
	if _, err := Open(Config{Backend: "sim", Sim: sim.Config{HostQueryCost: -time.Microsecond}}); !errors.Is(err, sim.ErrConfig) {
		t.Errorf("a negative host cost: %v, want sim.ErrConfig", err)
	}
	if _, err := Open(Config{Backend: "tpu"}); err == nil || !strings.Contains(err.Error(), "want sim") {
		t.Errorf("unknown backend: %v", err)
	}
	// Without a GPU (CI), cuda says so with gpu.ErrNoDevice.
	if d, err := Opener(Config{Backend: "cuda"})(); err == nil {
		d.Close()
		t.Skip("a GPU is present")
	} else if !errors.Is(err, gpu.ErrNoDevice) {
		t.Errorf("cuda without a GPU: %v, want gpu.ErrNoDevice", err)
	}
}
