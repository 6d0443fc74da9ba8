package sched_test

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/policies"
	"atoll/profiles"
	"atoll/sched"
	"atoll/sched/schedtest"
)

// BenchmarkCore measures the core alone (policy included) on the schedtest
// virtual device: one op is one 20 ms run; events/op is reported.
func BenchmarkCore(b *testing.B) {
	for _, nBE := range []int{1, 4, 16} {
		for _, name := range []string{"priority", "orion", "reef", "atoll"} {
			b.Run(fmt.Sprintf("%s/be=%d", name, nBE), func(b *testing.B) {
				r := rand.New(rand.NewSource(1))
				cfg := sched.Config{Spec: gpu.H100SXM, HP: []*profiles.Profile{randProfile(r, "hp", 50, 30)}}
				for i := 0; i < nBE; i++ {
					cfg.BE = append(cfg.BE, randProfile(r, "be", 40, 200))
				}
				var arr []time.Duration
				for a := time.Duration(0); a < 20*time.Millisecond; a += 2 * time.Millisecond {
					arr = append(arr, a)
				}
				events := 0
				b.ReportAllocs()
				for b.Loop() {
					pol, _ := policies.ByName(name)
					cfg.Policy = pol
					core, err := sched.NewCore(cfg)
					if err != nil {
						b.Fatal(err)
					}
					ex := &schedtest.Exec{Core: core}
					if err := ex.Run([][]time.Duration{arr}, 20*time.Millisecond, time.Minute); err != nil {
						b.Fatal(err)
					}
					events += len(ex.Log)
				}
				b.ReportMetric(float64(events)/float64(b.N), "decisions/op")
			})
		}
	}
}
