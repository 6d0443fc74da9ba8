package kernels

import (
	"fmt"

	"atoll/gpu"
)

// A resumable launch of a GEMM: persistent workers over the 1024 logical
// 128x128 tiles, Ctl first in the arguments. (The fake device stands in for
// gpu/cuda; on a GPU, pass the opened device.)
func ExampleLibrary_Launch() {
	dev := newFake()
	lib := New(dev)
	op := GEMM{M: 4096, N: 4096, K: 4096, In: BF16, Out: BF16, Bias: true, Act: ActGELU}
	bufs, err := Alloc(dev, op, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctl := Control{Flag: gpu.HostWord{Index: 1, Dev: 0x1000}, Counter: 0x2000, Done: gpu.HostWord{Index: 2, Dev: 0x1004}}
	l, err := lib.Launch(op, gpu.Resumable, bufs, ctl)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(l.Name, "workers:", l.Grid.Count(), "logical:", l.Logical, "threads:", l.Block.Count(), "smem:", l.SharedMem, "args:", l.Args.Len())
	// Output: gemm_bf16_128x128/resumable workers: 264 logical: 1024 threads: 256 smem: 71680 args: 236
}
