package profiles_test

import (
	"fmt"
	"os"
	"strings"

	"atoll/gpu"
	"atoll/models"
	"atoll/profiles"
)

func ExampleParse() {
	const text = `{
  "apiVersion": "atoll/v1",
  "gpu": "H100-SXM",
  "model": "tiny",
  "batch": 1,
  "phase": "inference",
  "source": "measured",
  "kernels": [
    {
      "name": "fc",
      "kernel": "gemm_bf16_64x64",
      "grid": [16, 1, 1],
      "block": [128, 1, 1],
      "registers": 96,
      "sharedMem": 16384,
      "durationUs": -3,
      "flops": 4096000,
      "bytes": 4100000,
      "computePct": 1,
      "memoryPct": 40,
      "class": "unknown",
      "smsNeeded": 16
    }
  ]
}`
	_, err := profiles.Parse(strings.NewReader(text))
	fmt.Println(err)
	p, err := profiles.Parse(strings.NewReader(strings.Replace(text, "-3", "5.5", 1)))
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Model, len(p.Kernels), p.Total())
	// Output:
	// profiles: line 16: kernels[0] ("fc").durationUs: must be > 0, got -3
	// tiny 1 5.5µs
}

func ExampleLookup() {
	p, err := profiles.Lookup("H100-SXM", "resnet50", 1, profiles.PhaseInference)
	if err != nil {
		panic(err)
	}
	m, _ := models.Get(p.Model)
	layers, _ := m.Ops(p.Batch)
	// Refuse a profile that does not describe these launches.
	if err := profiles.Check(p, models.Ops(layers), gpu.H100SXM); err != nil {
		panic(err)
	}
	// A profile made for another GPU is refused.
	fmt.Println(profiles.Check(p, models.Ops(layers), gpu.H200))
	fmt.Println(p.Source, len(p.Kernels) == len(layers))
	// Output:
	// profiles: profile resnet50 bs1 on H100-SXM does not match: gpu: the model has "H200", the profile "H100-SXM" (re-profile the model on that GPU: atoll profile --model resnet50 --batch 1; or use the profile made for it)
	// measured true
}

func ExampleWrite() {
	p := &profiles.Profile{
		APIVersion: profiles.APIVersion, GPU: "H200", Model: "tiny", Batch: 1,
		Phase: profiles.PhaseInference, Source: profiles.SourceMeasured,
		Kernels: []profiles.Kernel{{
			Name: "fc", Kernel: "gemm_bf16_64x64", Grid: [3]int{16, 1, 1}, Block: [3]int{128, 1, 1},
			Registers: 96, SharedMem: 16384, DurationUs: 5.5, FLOPs: 4096000, Bytes: 4100000,
			ComputePct: 0.1, MemoryPct: 17.3, Class: profiles.ClassUnknown, SMsNeeded: 16,
			Scaling: []profiles.Point{{SMs: 8, DurationUs: 9.75}, {SMs: 132, DurationUs: 5.5}},
		}},
	}
	if err := profiles.Write(os.Stdout, p); err != nil {
		panic(err)
	}
	// Output:
	// {
	//   "apiVersion": "atoll/v1",
	//   "gpu": "H200",
	//   "model": "tiny",
	//   "batch": 1,
	//   "phase": "inference",
	//   "source": "measured",
	//   "kernels": [
	//     {
	//       "name": "fc",
	//       "kernel": "gemm_bf16_64x64",
	//       "grid": [16, 1, 1],
	//       "block": [128, 1, 1],
	//       "registers": 96,
	//       "sharedMem": 16384,
	//       "durationUs": 5.5,
	//       "flops": 4096000,
	//       "bytes": 4100000,
	//       "computePct": 0.1,
	//       "memoryPct": 17.3,
	//       "class": "unknown",
	//       "smsNeeded": 16,
	//       "scaling": [
	//         {"sms": 8, "durationUs": 9.75},
	//         {"sms": 132, "durationUs": 5.5}
	//       ]
	//     }
	//   ]
	// }
}
