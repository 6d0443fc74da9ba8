package sim

import (
	"errors"
	"testing"
	"time"

	"atoll/gpu"
)

// With CoRunDevice, a kernel beside another kernel's blocks on the device's
// other SMs runs 1 + CoRunDevice slower however many SMs they hold, and
// alone exactly its profiled time; CoRunSM adds the share of its own SM's
// warp slots another kernel holds, CoRunMemory the fourth power of the
// share of the DRAM bandwidth another kernel moves anywhere. Computed by
// hand for kernels that fill whole SMs and take no compute share, and
// whose DRAM demand stays below the device's.
func TestCoRunInterference(t *testing.T) {
	const hpDur = 100 * us
	beDur := 10 * time.Millisecond
	// BE's bytes: half the DRAM bandwidth over its duration (U = 0.5).
	halfDRAM := 0.5 * gpu.H100SXM.DRAMBandwidth * beDur.Seconds()
	hpTimeBytes := func(cfg Config, beSMs int, beBytes float64) time.Duration {
		r := newRig(t, cfg)
		hi := r.partitionStream(96, true, -5) // HP on the 36 lowest SMs
		if beSMs > 0 {
			// One block per SM of the partition (the top beSMs SMs),
			// lasting far longer than HP.
			be := plain("be", beSMs, 1024, beDur)
			be.Cost.Bytes = beBytes
			r.launch(r.partitionStream(beSMs, false, 0), be)
		}
		r.launch(hi, plain("hp", 36, 1024, hpDur))
		r.drain()
		return r.last()
	}
	hpTime := func(cfg Config, beSMs int) time.Duration { return hpTimeBytes(cfg, beSMs, 0) }
	off := Config{}
	on := Config{CoRunDevice: 0.4}
	if got := hpTime(on, 0); got != hpDur {
		t.Errorf("HP alone with the interference on: %v, want %v", got, hpDur)
	}
	if got := hpTime(off, 96); got != hpDur {
		t.Errorf("HP beside BE with the interference off: %v, want %v (disjoint SMs, no shares)", got, hpDur)
	}
	slow := 1 + 0.4
	want := time.Duration(float64(hpDur) * slow)
	for _, sms := range []int{96, 16} {
		if got := hpTime(on, sms); !near(got, want, 10*time.Nanosecond) {
			t.Errorf("HP beside BE on %d other SMs: %v, want %v", sms, got, want)
		}
	}
	// BE moving half the DRAM bandwidth, on 96 or 16 other SMs: U = 0.5.
	mem := Config{CoRunDevice: 0.4, CoRunMemory: 2}
	want = time.Duration(float64(hpDur) * (1 + 0.4 + 2*0.0625))
	for _, sms := range []int{96, 16} {
		if got := hpTimeBytes(mem, sms, halfDRAM); !near(got, want, 10*time.Nanosecond) {
			t.Errorf("HP beside BE moving half the DRAM bandwidth on %d other SMs: %v, want %v", sms, got, want)
		}
	}
	// On shared SMs: HP on every SM of the device beside BE blocks of half
	// an SM's warps on the 96 partition SMs that move half the DRAM
	// bandwidth.
	shared := func(cfg Config) time.Duration {
		r := newRig(t, cfg)
		lo := r.partitionStream(96, false, 0)
		hi := r.stream(-5)
		be := plain("be", 96, 1024, beDur) // 32 of 64 warps
		be.Cost.Bytes = halfDRAM
		r.launch(lo, be)
		if err := r.d.Wait(t.Context(), 10*us); err != nil {
			t.Fatal(err)
		}
		// One block on every SM, moving a quarter of the bandwidth: its own
		// DRAM use does not count against it.
		hp := plain("hp", 132, 1024, hpDur)
		hp.Cost.Bytes = 0.25 * gpu.H100SXM.DRAMBandwidth * hpDur.Seconds()
		r.launch(hi, hp)
		r.drain()
		return r.last()
	}
	// HP's blocks on the partition's SMs share them with a BE block (S =
	// 0.5), see BE on the device (D = 1) and its DRAM use (U = 0.5); they
	// finish last.
	slow = 1 + 0.4 + 0.5*0.5 + 2*0.0625
	want = time.Duration(float64(hpDur) * slow)
	if got := shared(Config{CoRunDevice: 0.4, CoRunSM: 0.5, CoRunMemory: 2}); !near(got, want, 10*time.Nanosecond) {
		t.Errorf("HP sharing SMs with BE: %v, want %v", got, want)
	}
	for _, bad := range []Config{{CoRunDevice: -0.1}, {CoRunSM: 11}, {CoRunMemory: -1}} {
		if _, err := New(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v): %v, want ErrConfig", bad, err)
		}
	}
}

// partitionStream is a stream at priority prio of the SM partition of sms
// SMs, or with rest of the SMs it leaves.
func (r *rig) partitionStream(sms int, rest bool, prio int) gpu.Stream {
	r.t.Helper()
	newCtx := r.d.NewPartition
	if rest {
		newCtx = r.d.NewPartitionRest
	}
	cx, err := newCtx(sms)
	if err != nil {
		r.t.Fatal(err)
	}
	s, err := r.d.NewStream(gpu.StreamOptions{Context: cx, Priority: prio})
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

// last is the duration of the kernel launched last.
func (r *rig) last() time.Duration {
	var k uint64
	for id := range r.starts() {
		k = max(k, id)
	}
	return r.ends()[k] - r.starts()[k]
}
