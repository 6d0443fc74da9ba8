package exec_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
	"atoll/models/exec"
)

var onnxDir = flag.String("models.onnx", "", "TestGPUONNX: directory of NAME.onnx files with NAME.ref.safetensors (tools/onnx/export.py) to check on the GPU against onnxruntime")

// TestGPUONNX runs every exported model in -models.onnx on the GPU with the
// file's weights and compares its output with onnxruntime's for the same
// input (written by tools/onnx/export.py), and times the whole pass beside
// the zoo model of the same name (median of -models.runs passes).
func TestGPUONNX(t *testing.T) {
	if *onnxDir == "" {
		t.Skip("no -models.onnx directory")
	}
	files, err := filepath.Glob(filepath.Join(*onnxDir, "*.onnx"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no .onnx files in %s", *onnxDir)
	}
	slices.Sort(files)
	var rows []string
	var device string
	err = cuda.Run(0, func(d *cuda.Device) error {
		device = d.Info().Name + ", driver " + d.Info().Driver + ", " + d.Info().BLAS
		lib := kernels.New(d)
		for _, f := range files {
			row, err := onnxOnGPU(t, d, lib, f)
			if err != nil {
				t.Errorf("%s: %v", filepath.Base(f), err)
				row = fmt.Sprintf("| %s | ERROR: %v |", filepath.Base(f), err)
			}
			rows = append(rows, row)
		}
		return nil
	})
	if errors.Is(err, gpu.ErrNoDevice) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	table := fmt.Sprintf("ONNX exports on %s (torch.onnx.export, random weights; reference: onnxruntime on the CPU, float32)\n\n"+
		"| file | atoll model | rel. error vs onnxruntime | atoll whole pass, ms (median of %d) | zoo model, same pass, ms |\n|---|---|---|---|---|\n%s\n",
		device, *gpuRuns, strings.Join(rows, "\n"))
	fmt.Print(table)
	if out := os.Getenv("OUT"); out != "" {
		if werr := os.WriteFile(filepath.Join(out, "onnx_gpu.txt"), []byte(table), 0o644); werr != nil {
			t.Errorf("writing the table: %v", werr)
		}
	}
}

func onnxOnGPU(t *testing.T, dev gpu.Device, lib *kernels.Library, f string) (string, error) {
	name := strings.TrimSuffix(filepath.Base(f), ".onnx")
	m, err := models.Get(f)
	if err != nil {
		return "", err
	}
	refF, err := os.Open(strings.TrimSuffix(f, ".onnx") + ".ref.safetensors")
	if err != nil {
		return "", err
	}
	ref, err := models.ReadSafetensors(refF)
	refF.Close()
	if err != nil {
		return "", err
	}
	io := m.ONNXIO()
	in, ok := ref.Get("input." + io.Input)
	want, ok2 := ref.Get("output." + io.Output)
	if !ok || !ok2 {
		return "", fmt.Errorf("the reference lacks input.%s or output.%s", io.Input, io.Output)
	}
	g, err := m.Graph(in.Shape[0])
	if err != nil {
		return "", err
	}
	inputs, err := io.GraphInput(g, in.Values())
	if err != nil {
		return "", err
	}
	ms, out, err := timedPasses(dev, lib, g, m.Weights(), inputs)
	if err != nil {
		return "", err
	}
	e := models.RelErr(out, want.Values())
	tol := 2e-2
	if e > tol {
		t.Errorf("%s: relative error against onnxruntime %.3g, want ≤ %g", name, e, tol)
	}
	zooMS := "–"
	if zm, err := models.Get(name); err == nil {
		zg, err := zm.Graph(in.Shape[0])
		if err != nil {
			return "", err
		}
		if zms, _, err := timedPasses(dev, lib, zg, models.InitWeights(zg, 1), models.InitInputs(zg, 2)); err == nil {
			zooMS = fmt.Sprintf("%.3f", zms)
		} else {
			zooMS = "error: " + err.Error()
		}
	}
	return fmt.Sprintf("| %s | %s | %.2e | %.3f | %s |", filepath.Base(f), m.Description(), e, ms, zooMS), nil
}

// timedPasses runs g's whole forward pass on the GPU: one warm-up, then
// -models.runs timed passes; it returns their median wall time (the host's
// launches included, unlike TestGPUModels' device time) and the output.
func timedPasses(dev gpu.Device, lib *kernels.Library, g *models.Graph, w, inputs *models.Bundle) (float64, []float64, error) {
	in, err := exec.NewWith(dev, lib, g, w, inputs, exec.Options{Substitute: true})
	if err != nil {
		return 0, nil, err
	}
	defer in.Close()
	if in.Runnable() != len(g.Layers) {
		return 0, nil, fmt.Errorf("%d of %d layers runnable: %v", in.Runnable(), len(g.Layers), in.Err(in.Runnable()))
	}
	ctx := context.Background()
	if err := in.Run(ctx); err != nil {
		return 0, nil, err
	}
	out, err := in.Output()
	if err != nil {
		return 0, nil, err
	}
	var ds []float64
	for range max(1, *gpuRuns) {
		start := time.Now()
		if err := in.Run(ctx); err != nil {
			return 0, nil, err
		}
		ds = append(ds, float64(time.Since(start).Microseconds())/1e3)
	}
	slices.Sort(ds)
	return ds[len(ds)/2], out, nil
}
