package models_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"atoll/models"
)

var update = flag.Bool("update", false, "TestTorchGolden: rewrite testdata/torchref/*.safetensors with tools/torchref/ref.py (needs torch)")

// goldenCases are the reduced models whose PyTorch outputs are committed:
// the CPU reference is checked against PyTorch on every test run, torch or
// not.
var goldenCases = []struct {
	name  string
	model func() (models.Model, error)
	batch int
}{
	{"tiny-resnet", func() (models.Model, error) { return models.NewResNet("tiny-resnet", tinyResNet) }, 2},
	{"tiny-vgg", func() (models.Model, error) { return models.NewVGG("tiny-vgg", tinyVGG) }, 2},
	{"tiny-bert", func() (models.Model, error) { return models.NewBERT("tiny-bert", tinyBERT) }, 2},
}

func digest(t *testing.T, b *models.Bundle) string {
	t.Helper()
	var buf bytes.Buffer
	if err := models.WriteSafetensors(&buf, b); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(s[:])
}

// TestTorchGolden compares the CPU reference with PyTorch outputs committed
// in testdata/torchref (made by tools/torchref/ref.py, float32, on the
// weights and inputs InitWeights and InitInputs draw from seeds 11 and 12;
// their digests are recorded so that a change of initialisation is caught
// rather than compared against stale outputs).
func TestTorchGolden(t *testing.T) {
	py := ""
	if *update {
		if py = torchPython(); py == "" {
			t.Fatal("-update needs a python3 with torch and numpy (set ATOLL_PYTHON)")
		}
	}
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			m, err := c.model()
			g := graphOf(t, m, err, c.batch)
			w, in := models.InitWeights(g, 11), models.InitInputs(g, 12)
			path := filepath.Join("testdata", "torchref", c.name+".safetensors")
			if *update {
				ref := runTorchRef(t, py, g, w, in)
				ref.Metadata["weights_sha256"] = digest(t, w)
				ref.Metadata["inputs_sha256"] = digest(t, in)
				var buf bytes.Buffer
				if err := models.WriteSafetensors(&buf, ref); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatalf("%v (make it with: go test ./models -run TestTorchGolden -update)", err)
			}
			defer f.Close()
			ref, err := models.ReadSafetensors(f)
			if err != nil {
				t.Fatal(err)
			}
			if ref.Metadata["weights_sha256"] != digest(t, w) || ref.Metadata["inputs_sha256"] != digest(t, in) {
				t.Fatalf("%s was made from other weights or inputs (InitWeights/InitInputs changed?): regenerate with go test ./models -run TestTorchGolden -update", path)
			}
			got, err := models.Reference(g, w, in)
			if err != nil {
				t.Fatal(err)
			}
			if ref.Len() < 2 {
				t.Fatalf("%s holds %d tensors", path, ref.Len())
			}
			for _, d := range ref.Tensors() {
				e := models.RelErr(got[d.Name], d.Values())
				t.Logf("%-26s rel err vs torch %.2e (torch %s)", d.Name, e, ref.Metadata["torch"])
				if e > 2e-2 {
					t.Errorf("%s: relative error %.3g against PyTorch", d.Name, e)
				}
			}
		})
	}
}
