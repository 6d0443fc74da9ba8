package cuda

import (
	"context"
	"testing"

	"atoll/gpu/scenario"
)

// TestGPUBEGraphsBesideHP runs scenario.BEGraphsBesideHP on the GPU: does a
// least-priority stream of full-device spin kernels slow a
// greatest-priority pass of 20 small kernels more in graphs than launched
// one at a time, and by how much beside kernels of 5, 20 and 80 µs? The
// simulator's side: gpu/scenario TestBEGraphsBesideHPOnSim.
//
//	go test -c -o bin/cuda.test ./gpu/cuda
//	(cd gpu/cuda && ../../bin/cuda.test -test.run 'BEGraphsBesideHP$' -test.v)
func TestGPUBEGraphsBesideHP(t *testing.T) {
	d, _ := openGPU(t)
	r, err := scenario.BEGraphsBesideHP(context.Background(), d, []int{5, 20, 80}, 2, scenario.Held{})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + r.Table())
	for _, x := range r.Rows {
		if x.HPPass < r.Alone/2 || x.BEPerMs <= 0 {
			t.Errorf("BE %d µs, %s: HP pass %v against %v alone, BE %.1f kernels/ms: the timing is wrong", x.BlockUs, x.Mode, x.HPPass, r.Alone, x.BEPerMs)
		}
	}
}
