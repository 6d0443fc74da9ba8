package sched

import (
	"testing"
	"time"

	"atoll/profiles"
)

// BenchmarkAttribution is the host cost of splitting one ResNet-50
// request (56 kernels) into causes: each kernel's launch and completion
// records and the split at the end, beside one BE client. The driver adds
// one device-clock read per HP launch (gpu/cuda: time.Since).
func BenchmarkAttribution(b *testing.B) {
	hp, err := profiles.Lookup("H100-SXM", "resnet50", 1, "")
	if err != nil {
		b.Fatal(err)
	}
	be, _ := profiles.Lookup("H100-SXM", "resnet50-train", 32, "")
	a := newAttributor([]*HPClient{{vars: []variant{{prof: hp, reqs: 1}}}}, []*BEClient{{prof: be}}, Options{})
	n := len(hp.Kernels)
	t := time.Duration(0)
	b.ReportAllocs()
	for i := range b.N {
		r := RequestRecord{Client: HPClientID(0), ID: i, Arrival: t, Batch: 1}
		for k := range n {
			a.launched(Launch{Client: HPClientID(0), Kernel: k}, t, t+time.Microsecond, false, &Blame{Client: BEClientID(0), Kernel: k}, false)
		}
		for range n {
			t += 30 * time.Microsecond
			a.completed(0, t)
		}
		r.End = t
		a.request(&r, true)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/request")
}
