package sched_test

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"atoll/policies"
	"atoll/profiles"
	"atoll/sched"
)

// TestRunZoo runs every policy with the committed H100 profiles: ResNet-50
// inference (batch 1) as HP at load 0.3, Poisson arrivals, beside
// ResNet-50 training (batch 32) and BERT-base training (batch 8) as BE.
func TestRunZoo(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	hp, err := profiles.Lookup("H100-SXM", "resnet50", 1, "inference")
	if err != nil {
		t.Fatalf("committed profile: %v", err)
	}
	be1, err := profiles.Lookup("H100-SXM", "resnet50-train", 32, "training")
	if err != nil {
		t.Fatalf("committed profile: %v", err)
	}
	be2, err := profiles.Lookup("H100-SXM", "bert-base-train", 8, "training")
	if err != nil {
		t.Fatalf("committed profile: %v", err)
	}
	const dur = 300 * time.Millisecond
	solo := hp.Total()
	mean := time.Duration(float64(solo) / 0.3)
	r := rand.New(rand.NewSource(7))
	var arr []time.Duration
	for a := time.Duration(r.ExpFloat64() * float64(mean)); a < dur; a += time.Duration(r.ExpFloat64() * float64(mean)) {
		arr = append(arr, a)
	}
	w := sched.Workload{
		HP: []sched.HPWorkload{{Name: "resnet50", Profile: hp, Arrivals: arr}},
		BE: []sched.BEWorkload{{Name: "resnet50-train", Profile: be1}, {Name: "bert-train", Profile: be2}},
	}
	p99 := map[string]time.Duration{}
	for _, name := range policies.Names() {
		pol, _ := policies.ByName(name)
		start := time.Now()
		tr, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: pol, Duration: dur, Warmup: 20 * time.Millisecond})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var lats []time.Duration
		for _, q := range tr.Requests {
			lats = append(lats, q.Latency())
		}
		p99[name] = pct(lats, 0.99)
		var pre []time.Duration
		for _, p := range tr.Preemptions {
			pre = append(pre, p.Latency())
		}
		t.Logf("%-9s p50 %8v p99 %8v | BE %.2f of the window | preempt p50 %v p99 %v (%d) | padded %d/%d launches | %v wall",
			name, pct(lats, 0.5), pct(lats, 0.99), float64(tr.BEWork)/float64(tr.Window()),
			pct(pre, 0.5), pct(pre, 0.99), len(pre), tr.PaddedLaunches, tr.Launches, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("HP solo %v, %d requests", solo, len(arr))
	if !(p99["dedicated"] <= p99["atoll"] && p99["priority"] < p99["streams"]) {
		t.Errorf("p99 out of the expected order: %v", p99)
	}
}
