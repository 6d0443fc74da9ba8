package run_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/cuda"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/run"
)

var (
	trainModel = flag.String("train.model", "resnet50-train", "TestGPUTrainStep: the zoo training step to run at full size (\"\" for none)")
	trainBatch = flag.Int("train.batch", 32, "TestGPUTrainStep: its batch")
	trainRuns  = flag.Int("train.runs", 10, "TestGPUTrainStep: timed steps (median reported)")
)

// Tolerances of TestGPUTrainStep against the CPU reference (which rounds at
// the same points as the device): the loss as for inference outputs; the
// momenta (after one step, the gradients themselves) went through the
// whole bf16 backward pass, a few bf16 ulps per layer.
const (
	tolTrainLoss = 3e-2
	tolTrainGrad = 1e-1
	tolTrainSpot = 2e-2 // one layer from its device inputs
)

// TestGPUTrainStep runs training steps wholly on GPU 0 through the kernel
// library:
//
//   - a reduced ResNet step, compared with the CPU reference (models.Reference):
//     the loss, every updated weight and every momentum (= gradient);
//   - the full zoo step (-train.model, -train.batch): one step checked layer
//     by layer for the weight-free training kernels (each recomputed on the
//     CPU from its device inputs: BN statistics and their finishing, the
//     loss and its gradient, the bias gradient, pooling backward), the loss
//     finite, then -train.runs timed steps (device time between events
//     around the launches; the weights keep training).
//
// It prints a summary and writes it to $OUT/train_gpu.txt. Skipped without
// a GPU.
func TestGPUTrainStep(t *testing.T) {
	var b strings.Builder
	err := cuda.Run(0, func(d *cuda.Device) error {
		fmt.Fprintf(&b, "device: %s, driver %s\n", d.Info().Name, d.Info().Driver)
		lib := kernels.New(d)
		if err := gpuTinyTrain(t, d, lib, &b); err != nil {
			t.Errorf("tiny step: %v", err)
		}
		if *trainModel != "" {
			if err := gpuZooTrain(t, d, lib, &b); err != nil {
				t.Errorf("%s: %v", *trainModel, err)
			}
		}
		return nil
	})
	if errors.Is(err, gpu.ErrNoDevice) {
		t.Skipf("no GPU: %v", err)
	}
	fmt.Print(b.String())
	if out := os.Getenv("OUT"); out != "" {
		if werr := os.WriteFile(filepath.Join(out, "train_gpu.txt"), []byte(b.String()), 0o644); werr != nil {
			t.Errorf("writing the summary: %v", werr)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

func gpuTinyTrain(t *testing.T, dev gpu.Device, lib *kernels.Library, b *strings.Builder) error {
	m, err := models.NewResNet("tiny-resnet-train", models.ResNetConfig{Blocks: [4]int{2, 2, 2, 2}, Image: 64, Width: 16, Classes: 10, Train: true})
	if err != nil {
		return err
	}
	g, err := m.Graph(8)
	if err != nil {
		return err
	}
	w, inputs := models.InitWeights(g, 1), models.InitInputs(g, 2)
	in, err := run.New(dev, lib, g, w, inputs)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := in.Run(context.Background()); err != nil {
		return err
	}
	ref, err := models.Reference(g, w, inputs)
	if err != nil {
		return err
	}
	loss, err := in.Output()
	if err != nil {
		return err
	}
	eLoss := models.RelErr(loss, ref[g.Output])
	var worstW, worstM float64
	var worstWName, worstMName string
	var errsM []float64
	for _, tt := range g.Tensors {
		if tt.Kind != models.KindWeight && tt.Kind != models.KindState {
			continue
		}
		got, err := in.Read(tt.Name)
		if err != nil {
			return err
		}
		e := models.RelErr(got, ref[tt.Name])
		if tt.Kind == models.KindWeight && e > worstW {
			worstW, worstWName = e, tt.Name
		}
		if tt.Kind == models.KindState {
			errsM = append(errsM, e)
			if e > worstM {
				worstM, worstMName = e, tt.Name
			}
		}
	}
	slices.Sort(errsM)
	fmt.Fprintf(b, "%s batch %d: %d layers on the GPU; vs CPU reference: loss %.3g; weights worst %.3g (%s); momenta median %.3g worst %.3g (%s)\n",
		g.Model, g.Batch, len(g.Layers), eLoss, worstW, worstWName, errsM[len(errsM)/2], worstM, worstMName)
	if eLoss > tolTrainLoss || worstM > tolTrainGrad || math.IsNaN(eLoss+worstM) {
		return fmt.Errorf("relative errors loss %.3g (≤ %g), worst momentum %.3g (≤ %g)", eLoss, tolTrainLoss, worstM, tolTrainGrad)
	}
	return nil
}

func gpuZooTrain(t *testing.T, dev gpu.Device, lib *kernels.Library, b *strings.Builder) error {
	m, err := models.Get(*trainModel)
	if err != nil {
		return err
	}
	g, err := m.Graph(*trainBatch)
	if err != nil {
		return err
	}
	in, err := run.New(dev, lib, g, models.InitWeights(g, 1), models.InitInputs(g, 2))
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
	// Layer spot checks from the device buffers of that step.
	var bad []string
	checked := 0
	for i, l := range g.Layers {
		if len(l.W) > 0 || !spotKernel(in.Op(i)) {
			continue
		}
		bufs, err := in.Buffers(i)
		if err != nil {
			return err
		}
		for j := range bufs.T {
			tb := &bufs.T[j]
			if tb.Role == kernels.Output {
				continue
			}
			if tb.Host, _, err = kernels.Read(dev, *tb); err != nil {
				return err
			}
		}
		ref, err := kernels.Reference(in.Op(i), bufs)
		if err != nil {
			return fmt.Errorf("layer %s: %w", l.Name, err)
		}
		for j, o := range bufs.Outputs() {
			got, _, err := kernels.Read(dev, o)
			if err != nil {
				return err
			}
			checked++
			if e := models.RelErr(got, ref[j]); e > tolTrainSpot || math.IsNaN(e) {
				bad = append(bad, fmt.Sprintf("%s.%s %.3g", l.Name, o.Name, e))
			}
		}
	}
	fmt.Fprintf(b, "  layer spot checks (weight-free training kernels vs CPU from device inputs): %d outputs, %d above %.g %v\n", checked, len(bad), tolTrainSpot, bad)
	if len(bad) > 0 {
		return fmt.Errorf("spot checks failed: %v", bad)
	}
	var ms []float64
	var losses []float64
	for range *trainRuns {
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

// spotKernel says whether the spot checks recompute op (the training
// kernels whose CPU references are cheap at full size).
func spotKernel(op kernels.Op) bool {
	switch o := op.(type) {
	case kernels.BNStats:
		return o.Pixels*o.C <= 1<<23
	case kernels.BNFinalize, kernels.XentLoss, kernels.XentBackward, kernels.ColumnSum, kernels.PoolBackward, kernels.SplitSum:
		return true
	}
	return false
}
