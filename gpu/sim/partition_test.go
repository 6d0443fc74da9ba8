package sim

import (
	"context"
	"errors"
	"testing"
	"time"

	"atoll/gpu"
)

// TestPartitionConfinesBlocks: a BE kernel in a partition of 120 SMs never
// has a block outside the top 120 SMs, runs concurrently with the primary
// context (no time-slicing), and an HP kernel launched while BE fills the
// partition starts at once on the SMs left outside it.
func TestPartitionConfinesBlocks(t *testing.T) {
	r := newRig(t, Config{})
	d := r.d
	part, err := d.NewPartition(120)
	if err != nil {
		t.Fatal(err)
	}
	be, err := d.NewStream(gpu.StreamOptions{Context: part})
	if err != nil {
		t.Fatal(err)
	}
	hi := r.stream(-5)
	// 2 blocks of 1024 threads fit per SM: 5 waves of 1 ms on 120 SMs.
	r.launch(be, plain("be", 120*2*5, 1024, 5*1000*us))
	if err := d.Wait(context.Background(), 100*us); err != nil {
		t.Fatal(err)
	}
	r.launch(hi, plain("hp", 12, 1024, 30*us))
	r.drain()
	lat := gpu.H100SXM.LaunchLatency
	if got := r.starts()[2]; got != 100*us+lat {
		t.Errorf("HP starts at %v, want %v: the 12 SMs outside the partition are free", got, 100*us+lat)
	}
	if got := r.ends()[1]; !near(got, lat+5000*us, us) {
		t.Errorf("BE ends at %v, want %v (its own 120 SMs, undisturbed)", got, lat+5000*us)
	}
	for _, e := range r.trace {
		if e.Kind == TraceSwitch {
			t.Fatalf("a partition must not time-slice with the primary context: %+v", e)
		}
		if e.Kind != TraceDispatch {
			continue
		}
		for _, sm := range e.SMs {
			if e.Kernel == 1 && sm < 12 {
				t.Fatalf("partition kernel placed a block on SM %d (partition is SMs 12..131)", sm)
			}
			if e.Kernel == 2 && sm >= 12 {
				t.Fatalf("HP kernel placed on SM %d while the partition was full", sm)
			}
		}
	}
}

// TestPartitionWithoutReserveWaits is the same run without the partition:
// the HP kernel waits for the resident BE wave, which is what a partition
// saves.
func TestPartitionWithoutReserveWaits(t *testing.T) {
	r := newRig(t, Config{})
	lo, hi := r.stream(0), r.stream(-5)
	r.launch(lo, plain("be", 132*2*5, 1024, 5*1000*us))
	if err := r.d.Wait(context.Background(), 100*us); err != nil {
		t.Fatal(err)
	}
	r.launch(hi, plain("hp", 12, 1024, 30*us))
	r.drain()
	if got, want := r.starts()[2], gpu.H100SXM.LaunchLatency+1000*us; got != want {
		t.Errorf("HP starts at %v, want %v (end of the first BE wave)", got, want)
	}
}

func TestPartitionSizes(t *testing.T) {
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, -8, 4, 12, 132, 136} {
		if _, err := d.NewPartition(n); !errors.Is(err, gpu.ErrInvalidLaunch) {
			t.Errorf("NewPartition(%d): %v, want ErrInvalidLaunch", n, err)
		}
	}
	for _, n := range []int{8, 64, 128} {
		if _, err := d.NewPartition(n); err != nil {
			t.Errorf("NewPartition(%d): %v", n, err)
		}
	}
	if got := gpu.PartitionFloor(gpu.H100SXM, 131); got != 128 {
		t.Errorf("PartitionFloor(131) = %d, want 128", got)
	}
	if got := gpu.PartitionFloor(gpu.H100SXM, 7); got != 0 {
		t.Errorf("PartitionFloor(7) = %d, want 0", got)
	}
}

// TestPartitionReused: one context per size, however often it is asked
// for (each scheduler run asks).
func TestPartitionReused(t *testing.T) {
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := d.NewPartition(64)
	b, _ := d.NewPartition(64)
	c, _ := d.NewPartition(120)
	if a != b || a == c {
		t.Errorf("partitions %d, %d (same size) and %d: want the first two equal, the third apart", a, b, c)
	}
}

// TestPartitionRestIsDisjoint: with BE in a partition of 96 SMs and HP in
// the rest (36 SMs), kernels wide enough for every SM never place a block
// on the other context's SMs, and side by side each ends when it ends
// alone in its context (they share no SM; these kernels make no memory
// traffic).
func TestPartitionRestIsDisjoint(t *testing.T) {
	lat := gpu.H100SXM.LaunchLatency
	run := func(withBE, withHP bool) (*rig, time.Duration, time.Duration) {
		r := newRig(t, Config{})
		d := r.d
		part, err := d.NewPartition(96)
		if err != nil {
			t.Fatal(err)
		}
		rest, err := d.NewPartitionRest(96)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := d.NewPartitionRest(96); again != rest || rest == part {
			t.Fatalf("rest contexts %d and %d, partition %d: want the rests equal and apart from the partition", rest, again, part)
		}
		be, err := d.NewStream(gpu.StreamOptions{Context: part})
		if err != nil {
			t.Fatal(err)
		}
		hp, err := d.NewStream(gpu.StreamOptions{Context: rest, Priority: -5})
		if err != nil {
			t.Fatal(err)
		}
		if withBE {
			r.launch(be, plain("be", 132*2, 1024, 100*us))
		}
		if withHP {
			r.launch(hp, plain("hp", 132*2, 1024, 10*us))
		}
		r.drain()
		var beEnd, hpEnd time.Duration
		for id, end := range r.ends() {
			if withBE && id == 1 {
				beEnd = end
			} else {
				hpEnd = end
			}
		}
		return r, beEnd, hpEnd
	}
	_, beAlone, _ := run(true, false)
	_, _, hpAlone := run(false, true)
	r, beEnd, hpEnd := run(true, true)
	// 264 blocks of 1024 threads, 2 per SM: one wave on 132 SMs, two on
	// 96, four on 36.
	if beAlone < lat+200*us || hpAlone < lat+40*us {
		t.Errorf("alone: BE ends at %v, HP at %v; want at least 2 and 4 waves", beAlone, hpAlone)
	}
	if !near(beEnd, beAlone, us) || !near(hpEnd, hpAlone, us) {
		t.Errorf("side by side BE ends at %v, HP at %v; alone %v and %v", beEnd, hpEnd, beAlone, hpAlone)
	}
	for _, e := range r.trace {
		if e.Kind == TraceSwitch {
			t.Fatalf("partitions must not time-slice: %+v", e)
		}
		if e.Kind != TraceDispatch {
			continue
		}
		for _, sm := range e.SMs {
			if e.Kernel == 1 && sm < 36 {
				t.Fatalf("partition kernel on SM %d (its SMs are 36..131)", sm)
			}
			if e.Kernel == 2 && sm >= 36 {
				t.Fatalf("rest kernel on SM %d (its SMs are 0..35)", sm)
			}
		}
	}
	for _, n := range []int{0, 4, 132} {
		if _, err := r.d.NewPartitionRest(n); !errors.Is(err, gpu.ErrInvalidLaunch) {
			t.Errorf("NewPartitionRest(%d): %v, want ErrInvalidLaunch", n, err)
		}
	}
}
