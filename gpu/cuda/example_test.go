package cuda_test

import (
	"errors"
	"fmt"

	"atoll/gpu"
	"atoll/gpu/cuda"
)

// Open the first GPU, or fall back when there is none.
func ExampleRun() {
	err := cuda.Run(0, func(d *cuda.Device) error {
		m, err := d.LoadModule(gpu.ModuleSource{Name: "hello", CUDA: `extern "C" __global__ void k(int *p) { *p = 42; }`})
		if err != nil {
			return err
		}
		k, err := m.Function("k")
		if err != nil {
			return err
		}
		p, err := d.Alloc(4)
		if err != nil {
			return err
		}
		s, err := d.NewStream(gpu.StreamOptions{Priority: d.Info().Priorities.Greatest})
		if err != nil {
			return err
		}
		l := &gpu.Launch{Name: "k", Func: k, Grid: gpu.D1(1), Block: gpu.D1(1)}
		l.Args.Ptr(p)
		if err := d.Launch(s, l); err != nil {
			return err
		}
		if err := d.Synchronize(); err != nil {
			return err
		}
		out := make([]byte, 4)
		return d.CopyFromDevice(out, p)
	})
	if errors.Is(err, gpu.ErrNoDevice) {
		fmt.Println("no GPU: use the simulator")
	}
}
