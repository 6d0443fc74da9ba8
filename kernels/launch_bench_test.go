package kernels_test

import (
	"testing"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/kernels"
)

// BenchmarkLibraryLaunch is the host-side cost of building one launch once
// its module is compiled: it runs on the launch path of every scheduled
// kernel, so it must stay far below a kernel's duration (the physics probe
// measured ~65 µs per call when the module source was rebuilt every time).
func BenchmarkLibraryLaunch(b *testing.B) {
	dev, err := sim.New(sim.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	lib := kernels.New(dev)
	op := kernels.GEMM{M: 1024, N: 1024, K: 1024, In: kernels.BF16, Out: kernels.BF16}
	bufs, err := kernels.Alloc(dev, op, 1)
	if err != nil {
		b.Fatal(err)
	}
	words, err := dev.NewHostWords(2)
	if err != nil {
		b.Fatal(err)
	}
	ctr, err := dev.Alloc(kernels.CounterBytes)
	if err != nil {
		b.Fatal(err)
	}
	for _, form := range []gpu.Form{gpu.Plain, gpu.Reset, gpu.Resumable} {
		b.Run(form.String(), func(b *testing.B) {
			ctl := kernels.Control{Flag: words[0], Counter: ctr, Done: words[1]}
			if _, err := lib.Launch(op, form, bufs, ctl); err != nil { // compile once
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := lib.Launch(op, form, bufs, ctl); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
