package models_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"atoll/models"
)

// TorchPython finds a Python with torch and numpy: $ATOLL_PYTHON, then
// python3 on the PATH, then /usr/bin/python3. Empty if none.
func torchPython() string {
	cands := []string{os.Getenv("ATOLL_PYTHON"), "python3", "/usr/bin/python3"}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if exec.Command(c, "-c", "import torch, numpy").Run() == nil {
			return c
		}
	}
	return ""
}

// runTorchRef writes g's weights and inputs, runs tools/torchref/ref.py on
// the CPU in float32 and returns its outputs.
func runTorchRef(t *testing.T, py string, g *models.Graph, w, in *models.Bundle) *models.Bundle {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, b *models.Bundle) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := models.WriteSafetensors(f, b); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wp, ip, op := write("w.safetensors", w), write("in.safetensors", in), filepath.Join(dir, "ref.safetensors")
	cmd := exec.Command(py, "../tools/torchref/ref.py", "--weights", wp, "--inputs", ip, "--out", op, "--device", "cpu")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ref.py: %v\n%s", err, out)
	}
	return readBundle(t, op)
}

// The CPU reference against PyTorch (float32, the network rebuilt by
// tools/torchref/ref.py from the weights' metadata) on reduced models. The
// difference is atoll's bf16 rounding of every activation, so the bound is
// a few bf16 ulps accumulated over the layers. Skipped without torch.
func TestTorchReference(t *testing.T) {
	py := torchPython()
	if py == "" {
		t.Skip("no python3 with torch and numpy (set ATOLL_PYTHON)")
	}
	type tc struct {
		name  string
		model func() (models.Model, error)
		batch int
	}
	cases := []tc{
		{"resnet", func() (models.Model, error) { return models.NewResNet("tiny-resnet", tinyResNet) }, 2},
		{"resnet-2blocks", func() (models.Model, error) {
			c := tinyResNet
			c.Blocks = [4]int{2, 1, 2, 1}
			c.Image = 48
			return models.NewResNet("small-resnet", c)
		}, 1},
		{"bert", func() (models.Model, error) { return models.NewBERT("tiny-bert", tinyBERT) }, 2},
		{"vgg", func() (models.Model, error) { return models.NewVGG("tiny-vgg", tinyVGG) }, 2},
		{"distilbert-like", func() (models.Model, error) {
			c := tinyBERT
			c.Types, c.Pooler, c.Layers = 0, false, 1
			return models.NewBERT("tiny-distil", c)
		}, 3},
	}
	if !testing.Short() {
		cases = append(cases, tc{"mobilenetv2", func() (models.Model, error) { return models.Get("mobilenetv2") }, 1})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := c.model()
			g := graphOf(t, m, err, c.batch)
			w, in := models.InitWeights(g, 11), models.InitInputs(g, 12)
			got, err := models.Reference(g, w, in)
			if err != nil {
				t.Fatal(err)
			}
			ref := runTorchRef(t, py, g, w, in)
			if ref.Len() == 0 {
				t.Fatal("ref.py wrote no tensors")
			}
			for _, d := range ref.Tensors() {
				mine, ok := got[d.Name]
				if !ok {
					t.Errorf("ref.py wrote %q, which the graph does not have", d.Name)
					continue
				}
				e := models.RelErr(mine, d.Values())
				t.Logf("%-28s %8d values  rel err vs torch %.2e", d.Name, len(mine), e)
				if e > 2e-2 {
					t.Errorf("%s: relative error %.3g against PyTorch", d.Name, e)
				}
			}
			if _, ok := ref.Get(g.Output); !ok {
				t.Errorf("ref.py did not write the output %q", g.Output)
			}
		})
	}
}
