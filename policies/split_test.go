package policies

import (
	"testing"
	"time"

	"atoll/gpu"
	"atoll/profiles"
	"atoll/sched"
)

// scaled is a kernel of 50 µs on the whole H100 with partition points
// that need 64 SMs to come within 4 % of it.
func scaled() profiles.Kernel {
	return profiles.Kernel{Name: "g", Grid: [3]int{264, 1, 1}, Block: [3]int{1024, 1, 1}, DurationUs: 50,
		Partition: []profiles.Point{{SMs: 8, DurationUs: 400}, {SMs: 16, DurationUs: 200}, {SMs: 32, DurationUs: 100},
			{SMs: 64, DurationUs: 52}, {SMs: 96, DurationUs: 50}, {SMs: 132, DurationUs: 50}}}
}

func TestDurationOn(t *testing.T) {
	spec := gpu.H100SXM
	k := scaled()
	for sms, want := range map[int]time.Duration{132: 50 * time.Microsecond, 200: 50 * time.Microsecond,
		68: 51750 * time.Nanosecond, 48: 76 * time.Microsecond, 4: 800 * time.Microsecond} {
		if got := sched.DurationOn(spec, &k, sms); got != want {
			t.Errorf("with points, on %d SMs: %v, want %v", sms, got, want)
		}
	}
	// Without points: 264 blocks of 1024 threads, 2 per SM, one wave on
	// the whole GPU.
	k.Partition = nil
	k.DurationUs = 100
	for sms, want := range map[int]time.Duration{132: 100 * time.Microsecond, 100: 200 * time.Microsecond,
		66: 200 * time.Microsecond, 65: 300 * time.Microsecond} {
		if got := sched.DurationOn(spec, &k, sms); got != want {
			t.Errorf("by waves, on %d SMs: %v, want %v", sms, got, want)
		}
	}
	// A vendor kernel without points: its grid is not the profile's, so
	// it is taken to use every SM.
	k.Tags = []string{profiles.TagBLAS}
	if got, want := sched.DurationOn(spec, &k, 66), 200*time.Microsecond; got != want {
		t.Errorf("vendor kernel without points on 66 SMs: %v, want %v", got, want)
	}
	if got, want := sched.DurationOn(spec, &k, 33), 400*time.Microsecond; got != want {
		t.Errorf("vendor kernel without points on 33 SMs: %v, want %v", got, want)
	}
}

func TestSplitReserve(t *testing.T) {
	spec := gpu.H100SXM
	one := func(k profiles.Kernel) []*profiles.Profile {
		return []*profiles.Profile{{Model: "m", Kernels: []profiles.Kernel{k}}}
	}
	// 68 SMs: 51.75 µs, within 5 % of 50; 60 SMs: 58 µs is not.
	if got := SplitReserve(spec, one(scaled())); got != 68 {
		t.Errorf("scaled kernel: reserve %d, want 68", got)
	}
	small := profiles.Kernel{Name: "s", Grid: [3]int{8, 1, 1}, Block: [3]int{1024, 1, 1}, DurationUs: 10}
	if got := SplitReserve(spec, one(small)); got != 4 {
		t.Errorf("8 blocks: reserve %d, want 4 (one wave on the 4 SMs a 128-SM partition leaves)", got)
	}
	wide := scaled()
	wide.Partition[4].DurationUs = 60 // needs the whole GPU
	if got := SplitReserve(spec, one(wide)); got != 124 {
		t.Errorf("a kernel that needs every SM: reserve %d, want 124 (BE keeps one partition step)", got)
	}
	// Two clients: the one that needs more decides.
	if got := SplitReserve(spec, append(one(small), one(scaled())...)); got != 68 {
		t.Errorf("two clients: reserve %d, want 68", got)
	}
	for _, g := range []gpu.Spec{gpu.H100SXM, gpu.H200} {
		for _, m := range []string{"resnet50", "bert-base"} {
			p, err := profiles.Lookup(g.Name, m, 1, "")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s bs1 on %s: split reserve %d SMs", m, g.Name, SplitReserve(g, []*profiles.Profile{p}))
		}
	}
}
