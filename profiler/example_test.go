package profiler_test

import (
	"context"
	"fmt"
	"strings"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/kernels"
	"atoll/models"
	"atoll/profiler"
	"atoll/profiles"
)

func ExampleEstimate() {
	m, err := models.Get("distilbert")
	if err != nil {
		panic(err)
	}
	layers, err := m.Ops(1)
	if err != nil {
		panic(err)
	}
	p, err := profiler.Estimate(gpu.H100SXM, m.Name(), 1, layers)
	if err != nil {
		panic(err)
	}
	// The estimate describes exactly the model's launches.
	fmt.Println(p.Source, p.Phase, len(p.Kernels) == len(layers), profiles.Check(p, models.Ops(layers), gpu.H100SXM))
	// Output: estimated inference true <nil>
}

// Measure on the simulator: the same code as on a GPU, timing launches
// that replay the estimate (a GPU would give measured durations).
func ExampleMeasure() {
	dev, err := sim.New(sim.Config{})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	p, err := profiler.Measure(context.Background(), dev, kernels.New(dev), "resnet50", 1, profiler.MeasureOptions{
		Substitute: true, // the global average pool runs as an average Pool
		Runs:       5,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(p.GPU, p.Source, len(p.Kernels), "kernels;", p.Notes["simulated"] != "", len(p.Kernels[0].Scaling), "scaling points")
	// Output: H100-SXM estimated 56 kernels; true 5 scaling points
}

func ExampleParseNCU() {
	csv := `==PROF== Connected to process 7
"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"
"0","conv2d_bf16_64x64_plain","gpu__time_duration.sum","nsecond","12,480"
"0","conv2d_bf16_64x64_plain","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","41.5"
"1","void avgpool_bf16_plain(Ctl, PoolP)","gpu__time_duration.sum","usecond","3.2"
`
	launches, err := profiler.ParseNCU(strings.NewReader(csv))
	if err != nil {
		panic(err)
	}
	for _, l := range launches {
		fmt.Printf("%d %s %.2f us sm %.1f%%\n", l.ID, l.Func(), l.DurationUs, l.SMPct)
	}
	// Output:
	// 0 conv2d_bf16_64x64_plain 12.48 us sm 41.5%
	// 1 avgpool_bf16_plain 3.20 us sm 0.0%
}

// CoRun on the simulator: the same code as on a GPU, here for two kernels
// of VGG-19 bs4 beside MobileNetV2 bs1 with the simulator's co-run
// interference on; the report says how much slower HP ran beside each.
func ExampleCoRun() {
	spec := gpu.H100SXM
	hp, err := profiles.Lookup(spec.Name, "mobilenetv2", 1, "")
	if err != nil {
		panic(err)
	}
	be, err := profiles.Lookup(spec.Name, "vgg19", 4, "")
	if err != nil {
		panic(err)
	}
	cfg := sim.Defaults(spec, 1) // as atoll corun --backend sim runs it
	cfg.BLAS = true
	dev, err := sim.New(cfg)
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	rep, err := profiler.CoRun(context.Background(), dev, kernels.New(dev),
		profiler.CoRunOptions{PartitionSMs: 96, Passes: 2, Kernels: []int{14, 4}, HP: hp, BE: be})
	if err != nil {
		panic(err)
	}
	for _, k := range rep.Kernels {
		fmt.Printf("%s: %d passes, HP %.2fx\n", k.Name, k.Passes, k.HPSlowdown)
	}
	// Output:
	// features.25: 2 passes, HP 1.32x
	// features.7: 2 passes, HP 1.34x
}
