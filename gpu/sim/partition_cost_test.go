package sim

import (
	"testing"
	"time"

	"atoll/gpu"
)

// A kernel confined to an SM partition takes the duration its cost's
// partition points give there (interpolated), not the wave count of its
// grid on fewer SMs; without points it keeps the wave count; on the whole
// device the points change nothing.
func TestPartitionPointsTimeConfinedKernels(t *testing.T) {
	pts := []gpu.CostPoint{{SMs: 64, Duration: 150 * us}, {SMs: 128, Duration: 110 * us}, {SMs: 132, Duration: 100 * us}}
	run := func(sms int, withPoints bool) time.Duration {
		r := newRig(t, Config{})
		s := r.stream(0)
		if sms < 132 {
			s = r.partitionStream(sms, false, 0)
		}
		l := plain("k", 264, 1024, 100*us) // one wave: 2 blocks on every SM
		if withPoints {
			l.Cost.Partition = pts
		}
		r.launch(s, l)
		r.drain()
		return r.last()
	}
	if got := run(132, true); got != 100*us {
		t.Errorf("whole device with points: %v, want 100µs", got)
	}
	// 96 SMs: halfway between 64 (150 µs) and 128 (110 µs) → 130 µs.
	if got := run(96, true); !near(got, 130*us, time.Nanosecond) {
		t.Errorf("96 SMs with points: %v, want 130µs", got)
	}
	// Without points the one-wave grid takes two rounds on 96 SMs.
	if got := run(96, false); got != 200*us {
		t.Errorf("96 SMs without points: %v, want 200µs (two rounds of 100 µs blocks)", got)
	}
	// Below the smallest point: its duration × its SMs / the partition's.
	if got := run(32, true); !near(got, 300*us, time.Nanosecond) {
		t.Errorf("32 SMs with points: %v, want 300µs", got)
	}
}
