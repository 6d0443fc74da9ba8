package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
)

// TestSamePriorityOrder reproduces design §2: with equal stream priorities
// an HP kernel launched after long BE kernels of other streams waits (FIFO)
// until every BE block has been dispatched, then for a slot; a more urgent
// priority, or round robin among equal priorities, starts it as soon as a
// slot frees.
func TestSamePriorityOrder(t *testing.T) {
	spec := gpu.H100SXM
	spec.SMs = 4
	const threads, beStreams, waves = 256, 3, 2
	perSM, _, err := spec.Occupancy(threads, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	slots := spec.SMs * perSM
	tb := time.Millisecond // solo duration of one BE block
	lat := spec.LaunchLatency
	hpAt := 100 * us // the SMs are full of BE blocks by then

	run := func(t *testing.T, order SamePriority, hpPrio int) (hpStart, lastBEDispatch time.Duration) {
		r := newRig(t, Config{Spec: spec, SamePriority: order})
		var be []gpu.Stream
		for range beStreams {
			be = append(be, r.stream(0))
		}
		hp := r.stream(hpPrio)
		for i := range beStreams {
			r.launch(be[i], plain("be", slots*waves, threads, waves*tb))
		}
		if err := r.d.Wait(context.Background(), hpAt); err != nil {
			t.Fatal(err)
		}
		r.launch(hp, plain("hp", spec.SMs, threads, 50*us))
		r.drain()
		hpSeq := uint64(beStreams + 1)
		for _, e := range r.trace {
			if e.Kind == TraceDispatch && e.Kernel != hpSeq {
				lastBEDispatch = max(lastBEDispatch, e.Time)
			}
		}
		s, ok := r.starts()[hpSeq]
		if !ok {
			t.Fatal("HP kernel never started")
		}
		return s, lastBEDispatch
	}

	t.Run("fifo-same-priority", func(t *testing.T) {
		start, last := run(t, FIFO, 0)
		// Each BE kernel runs its waves back to back on the whole GPU; the
		// HP kernel gets the first slot the last BE wave frees.
		if want := lat + beStreams*waves*tb; start != want {
			t.Errorf("HP starts at %v, want %v (after all %d BE waves)", start, want, beStreams*waves)
		}
		if start < last {
			t.Errorf("HP starts at %v, before the last BE block was dispatched at %v", start, last)
		}
	})
	t.Run("fifo-more-urgent", func(t *testing.T) {
		start, last := run(t, FIFO, -5)
		if want := lat + tb; start != want {
			t.Errorf("HP starts at %v, want %v (the first freed slot)", start, want)
		}
		if start >= last {
			t.Errorf("HP starts at %v, not ahead of BE blocks (last dispatched at %v)", start, last)
		}
	})
	t.Run("round-robin-same-priority", func(t *testing.T) {
		start, last := run(t, RoundRobin, 0)
		if want := lat + tb; start != want {
			t.Errorf("HP starts at %v, want %v (the first freed slot)", start, want)
		}
		if start >= last {
			t.Errorf("HP starts at %v, not ahead of BE blocks (last dispatched at %v)", start, last)
		}
	})
}

// TestFIFOSameStreamQueue: kernels queued on one stream are not eligible
// until their predecessor completes, so under FIFO a same-priority kernel
// of another stream waits only for the blocks of the stream's current
// kernel, not for the whole queue.
func TestFIFOSameStreamQueue(t *testing.T) {
	spec := gpu.H100SXM
	spec.SMs = 4
	perSM, _, _ := spec.Occupancy(256, 0, 0)
	slots := spec.SMs * perSM
	tb := time.Millisecond
	r := newRig(t, Config{Spec: spec})
	be, hp := r.stream(0), r.stream(0)
	for range 3 {
		r.launch(be, plain("be", 2*slots, 256, 2*tb))
	}
	if err := r.d.Wait(context.Background(), 100*us); err != nil {
		t.Fatal(err)
	}
	r.launch(hp, plain("hp", spec.SMs, 256, 50*us))
	r.drain()
	lat := spec.LaunchLatency
	// The first BE kernel's second wave goes first (it is ahead); then the
	// HP kernel, ahead of the second BE kernel that became eligible later.
	if got, want := r.starts()[4], lat+2*tb; got != want {
		t.Errorf("HP starts at %v, want %v (after the first BE kernel only)", got, want)
	}
	if got, hp := r.starts()[2], r.starts()[4]; got != hp {
		t.Errorf("second BE kernel starts at %v, want %v with the HP kernel (it fills the SMs the HP kernel leaves)", got, hp)
	}
}

func TestSamePriorityString(t *testing.T) {
	for _, c := range []struct {
		o    SamePriority
		want string
	}{{FIFO, "fifo"}, {RoundRobin, "round-robin"}, {RoundRobin + 1, "SamePriority(2)"}} {
		if got := c.o.String(); got != c.want {
			t.Errorf("%d: %q, want %q", uint8(c.o), got, c.want)
		}
	}
	_, err := New(Config{SamePriority: 7})
	if err == nil || !strings.Contains(err.Error(), "sim.FIFO or sim.RoundRobin") {
		t.Errorf("SamePriority 7: %v, want an error naming the valid values", err)
	}
}

// A kernel that fills less than a wave is placed one block per SM across
// the device first, as the GPU places it (gpu/cuda
// TestGPUPartialWavePlacement, results/begraphs-h200/partial-wave.txt on an
// H200): 144 blocks two of which fit an SM take all 132 SMs, so a
// whole-SM kernel of the greatest priority starts no block until they
// end; 66 of them leave 66 SMs, where it starts at once.
func TestPartialWavePlacement(t *testing.T) {
	for _, c := range []struct {
		blocks, sms int
		hpWaits     bool
	}{
		{144, 132, true},
		{66, 66, false},
	} {
		r := newRig(t, Config{})
		lo, hi := r.stream(0), r.stream(-5)
		be := plain("be", c.blocks, 256, 200*us)
		be.SharedMem = 100 << 10
		r.launch(lo, be)
		if err := r.d.Wait(context.Background(), r.d.Now()+50*time.Microsecond); err != nil {
			t.Fatal(err)
		}
		hp := plain("hp", 96, 384, 10*us)
		hp.SharedMem = 220 << 10
		r.launch(hi, hp)
		r.drain()
		used := map[int16]bool{}
		var beEnd, hpStart time.Duration
		for _, e := range r.trace {
			switch {
			case e.Name == "be" && e.Kind == TraceDispatch:
				for _, sm := range e.SMs {
					used[sm] = true
				}
			case e.Name == "be" && e.Kind == TraceKernelEnd:
				beEnd = e.Time
			case e.Name == "hp" && e.Kind == TraceKernelStart:
				hpStart = e.Time
			}
		}
		if len(used) != c.sms {
			t.Errorf("%d blocks two to an SM: on %d SMs, want %d (the GPU's)", c.blocks, len(used), c.sms)
		}
		if waits := hpStart >= beEnd; waits != c.hpWaits {
			t.Errorf("%d blocks two to an SM: the whole-SM kernel started at %v, they ended at %v; want it to wait %v", c.blocks, hpStart, beEnd, c.hpWaits)
		}
	}
}
