package exec_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/cuda"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
)

var (
	gpuFull     = flag.Bool("models.full", true, "TestGPUModels: also run the full-size zoo models (ResNet-50, BERT-base, VGG-19, MobileNetV2 at batch 1)")
	gpuCPUFull  = flag.Bool("models.cpufull", false, "TestGPUModels: compare VGG-19 and BERT-base at sequence 384 at full size with the CPU reference too (about a minute of CPU each)")
	gpuRuns     = flag.Int("models.runs", 20, "TestGPUModels: timed forward passes per model (median reported)")
	gpuTorchRef = flag.String("models.torchref", "", "TestGPUModels: path of tools/torchref/ref.py (default: found from the working directory)")
	gpuPython   = flag.String("models.python", "", "TestGPUModels: Python with torch for ref.py (default $ATOLL_PYTHON, then python3)")
	gpuSubst    = flag.Bool("models.subst", true, "TestGPUModels: bind layers the library lacks to equivalent kernels where possible (exec.Options.Substitute)")
	gpuOnly     = flag.String("models.only", "", "TestGPUModels: run only the cases whose name matches this regular expression (e.g. 'bert')")
)

// Tolerances of TestGPUModels, as relative L2 errors of the output. Every
// activation is stored in bf16 (8 mantissa bits); the kernels accumulate in
// fp32. Against the CPU reference (which rounds at the same points) the
// difference is accumulation order and the occasional tie, a few bf16
// ulps; against PyTorch in fp32 it is atoll's bf16 storage itself, which
// the CPU reference matches within about 1% on reduced models
// (models.TestTorchReference).
const (
	tolCPU   = 3e-2
	tolTorch = 5e-2
)

type gpuCase struct {
	name  string
	model func() (models.Model, error)
	batch int
	cpu   bool   // compare with the CPU reference
	probe string // an intermediate tensor to compare as well ("" for none)
}

type gpuRow struct {
	model, mode                 string
	layers, onGPU               int
	errCPU, errTorch            float64 // NaN: not compared
	probeCPU, probeTorch        float64
	atollMS, torchMS, torchBF   float64 // NaN: not timed
	timedWhat, torchDev, detail string
}

// TestGPUModels runs zoo models on GPU 0 through the kernel library and
// compares their outputs with the CPU reference (models.Reference) and,
// where a Python with torch is found, with PyTorch (tools/torchref/ref.py
// on the same weights and inputs, float32, on the GPU). It prints a table:
// relative errors, atoll's median forward latency (device time between
// events around the launches) and PyTorch eager's.
//
// Models whose every layer has a kernel run wholly on the GPU ("gpu").
// Others run "hybrid": the layers the kernel library lacks run on the host
// between GPU segments (exec.Instance.RunHybrid) so that the numbers can
// still be checked end to end; their timing then covers only the GPU
// prefix and says so. Skipped without a GPU.
func TestGPUModels(t *testing.T) {
	cases := []gpuCase{
		{"tiny-resnet", func() (models.Model, error) {
			return models.NewResNet("tiny-resnet", models.ResNetConfig{Blocks: [4]int{2, 2, 2, 2}, Image: 64, Width: 16, Classes: 10})
		}, 2, true, "layer4.1.conv3"},
		{"tiny-vgg", func() (models.Model, error) { return models.NewVGG("tiny-vgg", tinyVGG) }, 2, true, "features.36"},
		{"tiny-bert", func() (models.Model, error) {
			return models.NewBERT("tiny-bert", models.BERTConfig{Layers: 2, Hidden: 64, Heads: 4, FFN: 256, Vocab: 100, Positions: 64, Types: 2, Seq: 32, Pooler: true})
		}, 2, true, "encoder.1.ffn.layernorm"},
	}
	zoo := func(name string) func() (models.Model, error) {
		return func() (models.Model, error) { return models.Get(name) }
	}
	if *gpuFull {
		cases = append(cases,
			gpuCase{"resnet50", zoo("resnet50"), 1, true, "layer4.2.conv3"},
			gpuCase{"mobilenetv2", zoo("mobilenetv2"), 1, true, ""},
			gpuCase{"bert-base", zoo("bert-base"), 1, true, "encoder.11.ffn.layernorm"},
			gpuCase{"bert-base-384", zoo("bert-base-384"), 1, *gpuCPUFull, "encoder.11.ffn.layernorm"},
			gpuCase{"distilbert", zoo("distilbert"), 1, true, "encoder.5.ffn.layernorm"},
			gpuCase{"vgg19", zoo("vgg19"), 1, *gpuCPUFull, "features.36"},
		)
	}
	if *gpuOnly != "" {
		re, err := regexp.Compile(*gpuOnly)
		if err != nil {
			t.Fatalf("-models.only: %v", err)
		}
		cases = slices.DeleteFunc(cases, func(c gpuCase) bool { return !re.MatchString(c.name) })
	}
	py, ref := torchTools(t)
	var rows []gpuRow
	var device string
	err := cuda.Run(0, func(d *cuda.Device) error {
		device = d.Info().Name + ", driver " + d.Info().Driver
		lib := kernels.New(d)
		for _, c := range cases {
			r, err := gpuModel(t, d, lib, c, py, ref)
			if err != nil {
				// Keep going: one model's failure must not hide the others'
				// results (a sticky CUDA error will show on the rest too).
				r.mode, r.detail = "ERROR", err.Error()
				t.Errorf("%s: %v", c.name, err)
			}
			rows = append(rows, r)
		}
		return nil
	})
	if errors.Is(err, gpu.ErrNoDevice) {
		t.Skipf("no GPU: %v", err)
	}
	table := gpuTable(device, rows, py != "")
	fmt.Print(table)
	if out := os.Getenv("OUT"); out != "" {
		if werr := os.WriteFile(filepath.Join(out, "models_gpu.txt"), []byte(table), 0o644); werr != nil {
			t.Errorf("writing the table: %v", werr)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.errCPU > tolCPU || r.probeCPU > tolCPU {
			t.Errorf("%s: relative error against the CPU reference %.3g (probe %.3g), want ≤ %.g", r.model, r.errCPU, r.probeCPU, tolCPU)
		}
		if r.errTorch > tolTorch || r.probeTorch > tolTorch {
			t.Errorf("%s: relative error against PyTorch %.3g (probe %.3g), want ≤ %.g", r.model, r.errTorch, r.probeTorch, tolTorch)
		}
	}
}

func gpuModel(t *testing.T, dev gpu.Device, lib *kernels.Library, c gpuCase, py, ref string) (gpuRow, error) {
	nan := func() float64 { return mathNaN }
	r := gpuRow{model: c.name, errCPU: nan(), errTorch: nan(), probeCPU: nan(), probeTorch: nan(), atollMS: nan(), torchMS: nan(), torchBF: nan()}
	m, err := c.model()
	if err != nil {
		return r, err
	}
	g, err := m.Graph(c.batch)
	if err != nil {
		return r, err
	}
	w, inputs := models.InitWeights(g, 1), models.InitInputs(g, 2)
	in, err := exec.NewWith(dev, lib, g, w, inputs, exec.Options{Substitute: *gpuSubst})
	if err != nil {
		return r, err
	}
	defer in.Close()
	r.layers, r.onGPU = len(g.Layers), in.Runnable()
	ctx := context.Background()
	var host []string
	if subs := in.Substitutions(); len(subs) > 0 {
		r.detail = "substituted: " + strings.Join(subs, "; ")
	}
	if in.Runnable() == len(g.Layers) {
		r.mode = "gpu"
		err = in.Run(ctx)
	} else {
		host, err = in.RunHybrid(ctx)
		r.mode = "hybrid"
		r.onGPU = len(g.Layers) - len(host)
		r.detail = strings.TrimPrefix(r.detail+"; host: "+summarize(host), "; ")
	}
	if err != nil {
		return r, err
	}
	out, err := in.Output()
	if err != nil {
		return r, err
	}
	var probe []float64
	if c.probe != "" {
		if probe, err = in.Read(c.probe); err != nil {
			return r, err
		}
	}
	if c.cpu {
		vals, err := models.Reference(g, w, inputs)
		if err != nil {
			return r, err
		}
		r.errCPU = models.RelErr(out, vals[g.Output])
		if probe != nil {
			r.probeCPU = models.RelErr(probe, vals[c.probe])
		}
	}
	if py != "" {
		tb, err := torchRun(t, py, ref, w, inputs, "float32")
		if err != nil {
			t.Logf("%s: ref.py: %v", c.name, err)
			r.detail = strings.TrimPrefix(r.detail+"; ref.py failed (see log)", "; ")
			tb = &models.Bundle{}
		}
		// PyTorch eager in bf16 too: atoll's precision, the fair latency.
		if bb, err := torchRun(t, py, ref, w, inputs, "bfloat16"); err == nil {
			if v, err := strconv.ParseFloat(bb.Metadata["eager_ms_median"], 64); err == nil {
				r.torchBF = v
			}
		} else {
			t.Logf("%s: ref.py in bfloat16: %v", c.name, err)
		}
		if d, ok := tb.Get(g.Output); ok {
			r.errTorch = models.RelErr(out, d.Values())
		}
		if d, ok := tb.Get(c.probe); ok && probe != nil {
			r.probeTorch = models.RelErr(probe, d.Values())
		}
		if v, err := strconv.ParseFloat(tb.Metadata["eager_ms_median"], 64); err == nil {
			r.torchMS = v
		}
		if tb.Metadata != nil {
			r.torchDev = tb.Metadata["device"]
		}
	}
	// Timing: the whole pass, or the sum of a hybrid model's GPU segments
	// (maximal runs of runnable layers), each timed between its events.
	type seg struct{ from, to int }
	var segs []seg
	for i := 0; i < len(g.Layers); {
		if in.Err(i) != nil {
			i++
			continue
		}
		j := i
		for j < len(g.Layers) && in.Err(j) == nil {
			j++
		}
		segs = append(segs, seg{i, j})
		i = j
	}
	r.timedWhat = "whole pass"
	if r.mode != "gpu" {
		r.timedWhat = fmt.Sprintf("GPU layers only (%d of %d, in %d segments)", r.onGPU, len(g.Layers), len(segs))
	}
	var ts []time.Duration
	for i := range 3 + *gpuRuns {
		var sum time.Duration
		for _, s := range segs {
			if err := in.RunLayers(ctx, s.from, s.to); err != nil {
				return r, err
			}
			sum += in.LastRun()
		}
		if i >= 3 {
			ts = append(ts, sum)
		}
	}
	if len(ts) > 0 {
		slices.Sort(ts)
		r.atollMS = float64(ts[len(ts)/2]) / 1e6
	}
	return r, nil
}

var mathNaN = func() float64 { var z float64; return z / z }()

func summarize(names []string) string {
	count := map[string]int{}
	var order []string
	for _, n := range names {
		k := n[strings.LastIndexByte(n, '.')+1:]
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	var parts []string
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%s x%d", k, count[k]))
	}
	return strings.Join(parts, ", ")
}

// torchTools finds a Python with torch and ref.py; empty strings (and a
// logged reason) if either is missing.
func torchTools(t *testing.T) (py, ref string) {
	ref = *gpuTorchRef
	if ref == "" {
		for _, c := range []string{"../../tools/torchref/ref.py", "tools/torchref/ref.py"} {
			if _, err := os.Stat(c); err == nil {
				ref = c
				break
			}
		}
	}
	if ref == "" {
		t.Logf("tools/torchref/ref.py not found from %s: no PyTorch comparison (-models.torchref)", must(os.Getwd()))
		return "", ""
	}
	for _, c := range []string{*gpuPython, os.Getenv("ATOLL_PYTHON"), "python3", "/usr/bin/python3"} {
		if c != "" && osexec.Command(c, "-c", "import torch, numpy").Run() == nil {
			return c, ref
		}
	}
	t.Logf("no Python with torch and numpy: no PyTorch comparison (-models.python or $ATOLL_PYTHON)")
	return "", ""
}

func must(s string, _ error) string { return s }

// torchRun writes the weights and inputs, runs ref.py on the GPU (cuda
// when torch sees one) with timing, and reads its outputs.
func torchRun(t *testing.T, py, ref string, w, in *models.Bundle, dtype string) (*models.Bundle, error) {
	dir := t.TempDir()
	write := func(name string, b *models.Bundle) (string, error) {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			return "", err
		}
		if err := models.WriteSafetensors(f, b); err != nil {
			f.Close()
			return "", err
		}
		return p, f.Close()
	}
	wp, err := write("w.safetensors", w)
	if err != nil {
		return nil, err
	}
	ip, err := write("in.safetensors", in)
	if err != nil {
		return nil, err
	}
	op := filepath.Join(dir, "torch.safetensors")
	cmd := osexec.Command(py, ref, "--weights", wp, "--inputs", ip, "--out", op, "--dtype", dtype, "--time", strconv.Itoa(max(*gpuRuns, 1)))
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ref.py: %w\n%s", err, out)
	}
	f, err := os.Open(op)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return models.ReadSafetensors(f)
}

func gpuTable(device string, rows []gpuRow, torch bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\natoll models on %s (weights seed 1, inputs seed 2; relative L2 error of the output [and of a probe tensor];\n", device)
	b.WriteString("latency: median device time of a forward pass; torch: eager, f32 and bf16; ratio: atoll / the faster torch)\n")
	if !torch {
		b.WriteString("(no PyTorch found: torch columns empty)\n")
	}
	f := func(v float64, format string) string {
		if v != v {
			return "-"
		}
		return fmt.Sprintf(format, v)
	}
	fmt.Fprintf(&b, "%-12s %-7s %-9s %-21s %-21s %-9s %-9s %-9s %-7s %s\n", "model", "mode", "gpu/all", "err vs CPU [probe]", "err vs torch [probe]", "atoll ms", "torch f32", "torch bf16", "ratio", "notes")
	for _, r := range rows {
		ratio := "-"
		best := r.torchMS
		if r.torchBF == r.torchBF && (best != best || r.torchBF < best) {
			best = r.torchBF
		}
		if r.atollMS == r.atollMS && best == best && r.timedWhat == "whole pass" {
			ratio = fmt.Sprintf("%.2fx", r.atollMS/best) // against the faster torch
		}
		notes := r.timedWhat
		if r.detail != "" {
			notes += "; " + r.detail
		}
		if r.torchDev != "" {
			notes += "; torch on " + r.torchDev
		}
		fmt.Fprintf(&b, "%-12s %-7s %-9s %-21s %-21s %-9s %-9s %-9s %-7s %s\n", r.model, r.mode, fmt.Sprintf("%d/%d", r.onGPU, r.layers),
			f(r.errCPU, "%.2e")+" ["+f(r.probeCPU, "%.1e")+"]", f(r.errTorch, "%.2e")+" ["+f(r.probeTorch, "%.1e")+"]",
			f(r.atollMS, "%.3f"), f(r.torchMS, "%.3f"), f(r.torchBF, "%.3f"), ratio, notes)
	}
	return b.String()
}

// The GPU test's driver, run on the simulator (which computes nothing, so
// every error is +Inf): it must run every case to the end, time it and
// print the table, so that the one run on a GPU does not fail on its
// plumbing.
func TestGPUModelsPlumbingSim(t *testing.T) {
	dev := newSim(t)
	lib := kernels.New(dev)
	saved := *gpuRuns
	*gpuRuns = 2
	defer func() { *gpuRuns = saved }()
	py, ref := torchTools(t) // ref.py runs on the CPU here when torch is installed
	var rows []gpuRow
	for _, c := range []gpuCase{
		{"tiny-resnet", func() (models.Model, error) { return models.NewResNet("tiny-resnet", tinyResNet) }, 2, true, "layer4.0.conv3"},
		{"tiny-bert", func() (models.Model, error) { return models.NewBERT("tiny-bert", tinyBERT) }, 2, true, "encoder.0.ffn.layernorm"},
	} {
		r, err := gpuModel(t, dev, lib, c, py, ref)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if py != "" && (r.torchMS != r.torchMS || r.torchBF != r.torchBF || r.errTorch == r.errTorch && r.errTorch < 1) {
			t.Errorf("%s: torch columns %v %v %v", c.name, r.torchMS, r.torchBF, r.errTorch)
		}
		if r.atollMS <= 0 || r.atollMS != r.atollMS || r.errCPU == r.errCPU && r.errCPU < 1 {
			t.Errorf("%s: row %+v (want a time, and an infinite error on the simulator)", c.name, r)
		}
		rows = append(rows, r)
	}
	table := gpuTable("sim", rows, py != "")
	for _, want := range []string{"tiny-resnet  gpu", "tiny-bert    gpu", "substituted: avgpool", "substituted: embeddings.add"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "host:") {
		t.Errorf("a layer ran on the host:\n%s", table)
	}
	t.Log(table)
}

// TestGPUBatchedSlots: a request served in slot 2 of a pass of four (an
// instance at batch 4, the other slots holding other inputs) gets the
// output it gets alone at batch 1, within the bf16 tolerance (the two
// batches may run different cuBLASLt algorithms), for a CNN and an
// encoder: what the daemon's max_batch relies on.
func TestGPUBatchedSlots(t *testing.T) {
	err := cuda.Run(0, func(d *cuda.Device) error {
		lib := kernels.New(d)
		for _, name := range []string{"resnet50", "bert-base"} {
			m, err := models.Get(name)
			if err != nil {
				return err
			}
			g1, err := m.Graph(1)
			if err != nil {
				return err
			}
			g4, err := m.Graph(4)
			if err != nil {
				return err
			}
			x := models.InitInputs(g1, 5)
			alone, err := exec.NewWith(d, lib, g1, models.InitWeights(g1, 1), x, exec.Options{Substitute: true})
			if err != nil {
				return err
			}
			defer alone.Close()
			pass, err := exec.NewWith(d, lib, g4, models.InitWeights(g4, 1), models.InitInputs(g4, 9), exec.Options{Substitute: true})
			if err != nil {
				return err
			}
			defer pass.Close()
			if err := pass.SetInputsAt(2, 4, x); err != nil {
				return err
			}
			ctx := context.Background()
			if err := alone.Run(ctx); err != nil {
				return err
			}
			if err := pass.Run(ctx); err != nil {
				return err
			}
			want, err := alone.Output()
			if err != nil {
				return err
			}
			got, err := pass.OutputAt(2, 4)
			if err != nil {
				return err
			}
			other, err := pass.OutputAt(0, 4)
			if err != nil {
				return err
			}
			e, e0 := models.RelErr(got, want), models.RelErr(other, want)
			t.Logf("%s: slot 2 of 4 against batch 1: relative error %.2e (slot 0, other inputs: %.2e)", name, e, e0)
			if e > tolCPU || !(e0 > e) {
				t.Errorf("%s: slot 2's output is %.2e from the request's alone (slot 0's %.2e); want ≤ %.g and the other slot farther", name, e, e0, tolCPU)
			}
		}
		return nil
	})
	if errors.Is(err, gpu.ErrNoDevice) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}
