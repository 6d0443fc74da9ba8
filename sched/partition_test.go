package sched_test

import (
	"context"
	"testing"
	"time"

	"atoll/policies"
	"atoll/sched"
)

// TestPartitionBoundsWaitBehindLongBlocks: two BE clients of 2 ms one-wave
// kernels (200 blocks of 1024 threads each; together more than the GPU holds)
// (Plain under atoll: preempting them buys nothing) beside a small HP
// model. Without a partition an HP request waits for a resident BE wave;
// with atoll's default partition the HP kernels start on the reserved SMs
// at once, so HP p99 stays near solo, and BE still gets most of its work.
func TestPartitionBoundsWaitBehindLongBlocks(t *testing.T) {
	hp := mustProfile(t, "hp", `
a dur=50us grid=16 block=1024 class=compute
b dur=50us grid=16 block=1024 class=memory
c dur=50us grid=16 block=1024 class=compute
d dur=50us grid=16 block=1024 class=compute
`)
	be := mustProfile(t, "wave", `
long dur=2ms grid=200 block=1024 class=compute
`)
	const dur = 200 * time.Millisecond
	arr := periodic(700*time.Microsecond, 1700*time.Microsecond, dur)
	w := sched.Workload{
		HP: []sched.HPWorkload{{Name: "hp", Profile: hp, Arrivals: arr}},
		BE: []sched.BEWorkload{{Name: "wave", Profile: be}, {Name: "wave2", Profile: be}},
	}
	offP99, offWork, offPart := runNamed(t, "atoll:reserve=off", w, dur)
	onP99, onWork, onPart := runNamed(t, "atoll:reserve=auto", w, dur)
	t.Logf("no partition: p99 %v, BE work %v; partition of %d SMs: p99 %v, BE work %v", offP99, offWork, onPart, onP99, onWork)
	if offPart != 0 || onPart != 120 {
		t.Fatalf("partitions %d and %d SMs, want none and 120 (HP needs 8 SMs: 132-8 rounded down to a multiple of 8)", offPart, onPart)
	}
	solo := hp.Total()
	if onP99 > solo+100*time.Microsecond {
		t.Errorf("with the partition HP p99 is %v, want within 100µs of solo %v", onP99, solo)
	}
	if offP99 < solo+500*time.Microsecond {
		t.Errorf("without a partition HP p99 is %v: the scenario should make HP wait behind 2 ms blocks", offP99)
	}
	if onWork < offWork*8/10 {
		t.Errorf("BE work %v with the partition, %v without: the partition should cost BE little", onWork, offWork)
	}
}

// TestSplitRunsBEBesideBusyHP: HP kernels that need 64 SMs for one wave
// at a rate that keeps HP busy half the time, beside a BE client of 2 ms
// one-wave kernels. With atoll:split and a reserve of 68 SMs, HP runs on
// the 68 SMs BE's partition (64) leaves and BE runs all the time: HP p99
// stays at solo (no BE block holds an SM HP may use) and BE gets its
// partition's whole share. The default atoll leaves HP 36 SMs that no BE
// block holds, half of what its kernels need for one wave, so HP takes
// twice as long there (its BE, in 96 SMs, gets more).
func TestSplitRunsBEBesideBusyHP(t *testing.T) {
	hp := mustProfile(t, "hp", `
a dur=50us grid=128 block=1024 class=compute
b dur=50us grid=128 block=1024 class=compute
c dur=50us grid=128 block=1024 class=compute
d dur=50us grid=128 block=1024 class=compute
`)
	be := mustProfile(t, "wave", `
long dur=2ms grid=264 block=1024 class=compute
`)
	const dur = 200 * time.Millisecond
	arr := periodic(700*time.Microsecond, 400*time.Microsecond, dur)
	w := sched.Workload{
		HP: []sched.HPWorkload{{Name: "hp", Profile: hp, Arrivals: arr}},
		BE: []sched.BEWorkload{{Name: "wave", Profile: be}},
	}
	splitP99, splitWork, _ := runNamed(t, "atoll:split=true,reserve=68", w, dur)
	defP99, defWork, _ := runNamed(t, "atoll", w, dur)
	t.Logf("split 68/64: p99 %v, BE work %v; default atoll: p99 %v, BE work %v", splitP99, splitWork, defP99, defWork)
	solo := hp.Total()
	if splitP99 > solo+20*time.Microsecond {
		t.Errorf("split: HP p99 %v, want within 20µs of solo %v (its kernels fit in one wave on its 68 SMs)", splitP99, solo)
	}
	// 264 blocks at 2 per SM take 3 waves on 64 SMs: 6 ms a kernel, so
	// the run holds about 33 kernels of 2 ms of work each.
	if want := dur / 3 * 9 / 10; splitWork < want {
		t.Errorf("split: BE work %v, want at least %v (its partition all the time)", splitWork, want)
	}
	if defP99 < solo*3/2 {
		t.Errorf("default atoll: HP p99 %v, want at least 1.5x solo %v: its kernels should find too few SMs free", defP99, solo)
	}
}

// runNamed runs w for dur under the atoll policy so named on the
// simulator and returns HP's p99, the BE work done and BE's partition.
func runNamed(t *testing.T, name string, w sched.Workload, dur time.Duration) (p99, work time.Duration, part int) {
	t.Helper()
	pol, err := policies.ByName(name)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: pol, Duration: dur})
	if err != nil {
		t.Fatal(err)
	}
	var lats []time.Duration
	for _, r := range tr.Requests {
		lats = append(lats, r.Latency())
	}
	return pct(lats, 0.99), tr.BEWork, pol.(*policies.Atoll).PartitionSMs()
}
