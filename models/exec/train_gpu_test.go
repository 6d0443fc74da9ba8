package exec_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
)

var (
	trainModel = flag.String("train.model", "resnet50-train", "TestGPUTrainStep: the zoo training step to run at full size (\"\" for none)")
	trainBatch = flag.Int("train.batch", 32, "TestGPUTrainStep: its batch")
	trainRuns  = flag.Int("train.runs", 10, "TestGPUTrainStep: timed steps (median reported)")
)

// Bounds of TestGPUTrainStep.
//
// The defect check is per layer: every layer's device outputs against its
// kernel's CPU reference computed from that layer's device inputs (read
// just before it ran), so that nothing but the kernel's own rounding
// separates them (fp32 accumulation order, bf16 outputs an ulp apart,
// well under 1%). A kernel bug (a wrong index, a missing split, a lost
// channel) moves an output by far more than tolTrainSpot.
//
// The whole step is only compared with the CPU's own spread: the first-step
// gradients of a small random network with batch norm are chaotic at the
// scale of one bf16 ulp (the tiny step's momenta move by a median ~0.7
// when the input moves one ulp; see docs/models.md), so the device, which
// rounds at other points, is held to tolTrainSpread times what a one-ulp
// input change does to the CPU reference in the same run.
const (
	tolTrainSpot   = 2e-2    // one layer from its device inputs
	tolTrainSpread = 1.5     // the whole step, in units of the CPU's one-ulp spread
	spreadRuns     = 2       // perturbed CPU steps measuring the spread
	convSamples    = 256     // sampled elements per full-size convolution
	fullElems      = 1 << 24 // the largest BN layer the full-size check recomputes in full
)

// TestGPUTrainStep runs training steps wholly on GPU 0 through the kernel
// library:
//
//   - a reduced ResNet step, run layer by layer with every layer's outputs
//     checked against the CPU from its device inputs (tolTrainSpot), then
//     the whole step (loss and momenta = gradients) against the CPU
//     reference (models.Reference), within tolTrainSpread times the
//     reference's own one-ulp spread;
//   - the full zoo step (-train.model, -train.batch): a first step (the
//     loss finite), a second one run layer by layer with per-layer checks
//     of every layer whose CPU reference is affordable at full size (the
//     batch-norm kernels up to fullElems, the loss, softmax and their
//     gradient, column sums, pooling backward, split sums and SGD in full;
//     every convolution — forward, data and weight gradient, split or not
//     — on convSamples sampled elements), then
//     -train.runs timed steps (device time between events around the
//     launches; the weights keep training).
//
// It prints the worst layers and writes the summary to $OUT/train_gpu.txt.
// Skipped without a GPU.
func TestGPUTrainStep(t *testing.T) {
	gpuStepTest(t, "train_gpu.txt", "tiny step", tinyTrainCheck, *trainModel, gpuZooTrain)
}

// tinyTrainCheck runs the reduced ResNet step on dev layer by layer
// through step(in)(i) and checks it (tinyStepCheck: SGD's momenta, inputs
// moved for the spread).
func tinyTrainCheck(dev gpu.Device, lib *kernels.Library, b *strings.Builder, step func(*exec.Instance) func(int) error) error {
	m, err := models.NewResNet("tiny-resnet-train", tinyGPUTrain)
	if err != nil {
		return err
	}
	return tinyStepCheck(dev, lib, b, step, tinyStep{model: m, batch: 8, moved: inputsMoved, movedWhat: "input", verdict: "momentum"})
}

// stepVerdict fails a reduced training step on any layer output above
// tolTrainSpot (a kernel defect) or a whole-step error above tolTrainSpread
// times the CPU's own one-ulp spread (gross failure); state names the
// optimizer state compared ("momentum", "gradient").
func stepVerdict(bad []layerErr, dv, spread stepErr, state string) error {
	var fails []string
	if len(bad) > 0 {
		fails = append(fails, fmt.Sprintf("%d layer outputs differ from the CPU on their device inputs by more than %g: %v", len(bad), tolTrainSpot, bad[:min(8, len(bad))]))
	}
	for _, c := range []struct {
		what     string
		gpu, cpu float64
	}{{"loss", dv.loss, spread.loss}, {"median " + state, dv.median, spread.median}, {"worst " + state, dv.worst, spread.worst}} {
		if !(c.gpu <= tolTrainSpread*c.cpu) {
			fails = append(fails, fmt.Sprintf("whole step: %s relative error %.3g, above %g x the CPU's one-ulp spread %.3g", c.what, c.gpu, tolTrainSpread, c.cpu))
		}
	}
	if len(fails) > 0 {
		return errors.New(strings.Join(fails, "; "))
	}
	return nil
}

// tinyGPUTrain is the reduced ResNet step TestGPUTrainStep checks in full
// (a 2x2 final feature map; batch 8 gives split weight gradients; the
// patch bound cuts the stem's and the first stage's 3x3 passes into
// launches over slices of the images, Layer.Part).
var tinyGPUTrain = models.ResNetConfig{Blocks: [4]int{2, 2, 2, 2}, Image: 64, Width: 16, Classes: 10, Train: true, MaxPatchBytes: 256 << 10}

func gpuZooTrain(dev gpu.Device, lib *kernels.Library, b *strings.Builder) error {
	return gpuZooStep(dev, lib, b, *trainModel, *trainBatch, *trainRuns, spotRef)
}

// gpuZooStep runs a zoo training step at full size on the GPU: a first
// step (compiles), a second one layer by layer with every layer ref
// chooses checked against the CPU from its own device inputs, then runs
// timed steps; it writes the summary to b.
func gpuZooStep(dev gpu.Device, lib *kernels.Library, b *strings.Builder, model string, batch, runs int, ref func(kernels.Op) refFn) error {
	m, err := models.Get(model)
	if err != nil {
		return err
	}
	g, err := m.Graph(batch)
	if err != nil {
		return err
	}
	in, err := exec.New(dev, lib, g, models.InitWeights(g, 1), models.InitInputs(g, 2))
	if err != nil {
		return err
	}
	defer in.Close()
	if in.Runnable() != len(g.Layers) {
		return in.Err(in.Runnable())
	}
	ctx := context.Background()
	t0 := time.Now()
	if err := in.Run(ctx); err != nil { // compiles every module
		return err
	}
	first := time.Since(t0)
	loss, err := in.Output()
	if err != nil {
		return err
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	fmt.Fprintf(b, "%s batch %d: %d layers, all on the GPU; first step %v wall (with compiles), loss %.4f\n",
		g.Model, g.Batch, len(g.Layers), first.Round(time.Millisecond), mean(loss))
	if l := mean(loss); math.IsNaN(l) || math.IsInf(l, 0) {
		return fmt.Errorf("loss %v after one step", l)
	}
	// The second step layer by layer, checked from its device inputs.
	t0 = time.Now()
	errs, err := checkedStep(dev, in, func(i int) error { return in.RunLayers(ctx, i, i+1) }, func(i int) refFn { return ref(in.Op(i)) })
	if err != nil {
		return err
	}
	sum, bad := worstLayers(errs, 10, tolTrainSpot)
	fmt.Fprintf(b, "  step 2 layer by layer (%v wall), layers vs the CPU from their device inputs (convolutions on %d sampled elements): %d outputs, %d above %g\n%s\n",
		time.Since(t0).Round(time.Millisecond), convSamples, len(errs), len(bad), tolTrainSpot, sum)
	if len(bad) > 0 {
		return fmt.Errorf("layer checks failed: %v", bad[:min(10, len(bad))])
	}
	var ms []float64
	var losses []float64
	for range runs {
		if err := in.Run(ctx); err != nil {
			return err
		}
		ms = append(ms, float64(in.LastRun())/1e6)
		l, err := in.Output()
		if err != nil {
			return err
		}
		losses = append(losses, mean(l))
	}
	if len(ms) > 0 {
		slices.Sort(ms)
		fmt.Fprintf(b, "  step time (device, %d steps): median %.2f ms, min %.2f ms; loss over the steps %.4f -> %.4f\n",
			len(ms), ms[len(ms)/2], ms[0], losses[0], losses[len(losses)-1])
		for _, l := range losses {
			if math.IsNaN(l) || math.IsInf(l, 0) {
				return fmt.Errorf("loss %v during the timed steps", l)
			}
		}
	}
	return nil
}

// spotRef is how the full-size check recomputes op: in full where the CPU
// reference is cheap at full size, on sampled elements for convolutions;
// nil (unchecked) for the rest (the largest BN layers, the pools and the
// gradient adds, which the tiny step checks in full).
func spotRef(op kernels.Op) refFn {
	switch o := op.(type) {
	case kernels.BNStats:
		if o.Pixels*o.C <= fullElems {
			return fullRef
		}
	case kernels.BNApply:
		if o.Pixels*o.C <= fullElems {
			return fullRef
		}
	case kernels.BNBackward:
		if o.Pixels*o.C <= fullElems {
			return fullRef
		}
	case kernels.BNFinalize, kernels.XentLoss, kernels.XentBackward, kernels.Softmax, kernels.ColumnSum, kernels.PoolBackward, kernels.SplitSum, kernels.SGD:
		return fullRef
	case kernels.Conv2D:
		if o.Act == kernels.ActNone || o.Act == kernels.ActReLU {
			return sampledConv(convSamples)
		}
	}
	return nil
}
