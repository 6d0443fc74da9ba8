package scenario

import (
	"context"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
)

// spinSim is the demo's simulator of spec with the turn between kernels
// given and no co-run interference: the scenarios' kernels only spin, and
// the interference is a fit to real kernels beside each other, which
// would slow spinning blocks that do not slow each other on a GPU.
func spinSim(t *testing.T, spec gpu.Spec, turn time.Duration) (*sim.Device, sim.Config) {
	t.Helper()
	c := sim.Defaults(spec, 1)
	c.KernelGap, c.CoRunDevice, c.CoRunSM, c.CoRunMemory = turn, 0, 0, 0
	d, err := sim.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return d, c
}

// TestBEGraphsBesideHPOnSim runs the scenario on the demo's simulator of an
// H100 (spinSim), as it is (no turn between kernels) and with the measured
// turn (sim.MeasuredKernelGap), and logs both tables: the simulator's side
// of the GPU's (gpu/cuda TestGPUBEGraphsBesideHP, results/begraphs-h100):
//
//	go test -run BEGraphsBesideHPOnSim -v ./gpu/scenario
//
// On the GPU, beside BE waves of 80 µs blocks, HP's pass took 6.5-7.6
// times its time alone: each of its kernels waited for a wave of BE to
// end, since BE's pending blocks took the SMs its previous kernel left
// before the next could. Without a turn the simulator's next HP kernel is
// pending the instant the previous one ends and wins those SMs; with it,
// BE's blocks win as on the GPU.
func TestBEGraphsBesideHPOnSim(t *testing.T) {
	at80 := map[time.Duration]float64{}
	for _, turn := range []time.Duration{0, sim.MeasuredKernelGap} {
		d, c := spinSim(t, gpu.H100SXM, turn)
		r, err := BEGraphsBesideHP(context.Background(), d, []int{5, 20, 80}, 1, Held{Record: c.EventCost, Turn: turn})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("turn between kernels %v:\n%s", turn, r.Table())
		// Alone, a pass is its 20 kernels of 10 µs and the turns between
		// them: not less, and not twice that.
		if r.Alone < 200*time.Microsecond || r.Alone > 400*time.Microsecond {
			t.Errorf("turn %v: HP pass alone %v, want 200-400 µs", turn, r.Alone)
		}
		if len(r.Rows) != 3*len(BEGraphsModes) {
			t.Fatalf("%d rows, want %d", len(r.Rows), 3*len(BEGraphsModes))
		}
		for _, x := range r.Rows {
			if x.Ratio < 0.95 || x.BEPerMs <= 0 {
				t.Errorf("turn %v, BE %d µs, %s: HP ratio %.3f, BE %.1f kernels/ms: HP faster than alone, or BE did not run", turn, x.BlockUs, x.Mode, x.Ratio, x.BEPerMs)
			}
			if x.BlockUs == 80 {
				at80[turn] = max(at80[turn], x.Ratio)
			}
		}
	}
	if a, b := at80[0], at80[sim.MeasuredKernelGap]; a > 3 || b < 4 {
		t.Errorf("beside 80 µs BE waves HP's pass is %.2f× alone without a turn and %.2f× with it: want under 3 (HP wins every race) and over 4 (BE wins them)", a, b)
	}
}

func TestBEGraphsBesideHPRefusesDeviceWithoutGraphs(t *testing.T) {
	d, err := sim.New(sim.Config{Spec: gpu.H100SXM})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := BEGraphsBesideHP(context.Background(), noGraphs{d}, []int{5}, 1, Held{}); err == nil {
		t.Fatal("a device without graphs was accepted")
	}
}

// noGraphs hides the simulator's graphs.
type noGraphs struct{ gpu.Device }

// TestWholeSMBesideWavesOnSim runs WholeSMBesideWaves on the demo's
// simulator of an H200 (spinSim, its measured turn) and logs the table, the
// simulator's side of the GPU's (gpu/cuda TestGPUWholeSMBesideWaves,
// results/wholesm-h200):
//
//	go test -run WholeSMBesideWavesOnSim -v ./gpu/scenario
//
// HP's blocks each need a whole SM, so every HP kernel after the first
// waits at least for BE's blocks to leave the SMs its predecessor's turn
// gave them.
func TestWholeSMBesideWavesOnSim(t *testing.T) {
	d, c := spinSim(t, gpu.H200, sim.MeasuredTurn(gpu.H200.Name))
	r, err := WholeSMBesideWaves(context.Background(), d, []int{5, 20}, 1, Held{Record: c.EventCost, Turn: c.KernelGap})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", r.Table())
	if r.Alone < 200*time.Microsecond || r.Alone > 400*time.Microsecond {
		t.Errorf("HP pass alone %v, want 200-400 µs", r.Alone)
	}
	if len(r.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(r.Rows))
	}
	for _, x := range r.Rows {
		if x.BEPerMs <= 0 || x.Ratio < 1+0.5*float64(x.BlockUs)*19/(r.Alone.Seconds()*1e6) {
			t.Errorf("BE %d µs: HP ratio %.3f, BE %.1f kernels/ms: HP's 19 later kernels did not each wait for BE's blocks to leave, or BE did not run", x.BlockUs, x.Ratio, x.BEPerMs)
		}
	}
}
