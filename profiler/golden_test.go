package profiler_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"atoll/gpu"
	"atoll/models"
	"atoll/profiler"
	"atoll/profiles"
)

var update = flag.Bool("update", false, "rewrite the committed estimated profiles under profiles/")

// golden is the set of estimated profiles committed under profiles/.
var golden = []struct {
	model string
	batch int
}{
	{"resnet50", 1},
	{"resnet152", 1},
	{"mobilenetv2", 1},
	{"vgg19", 1},
	{"bert-base", 1},
	{"bert-base-384", 1},
	{"distilbert", 1},
	{"resnet50-train", 32},
	{"bert-base-train", 8},
}

// TestGolden regenerates the committed estimated profiles and fails when
// they differ from what Estimate makes now (run with -update to rewrite
// them after a deliberate change to the models, the kernels' geometry, the
// spec or the estimate). A file that a measured (or Nsight Compute)
// profile has replaced is left alone, in both modes.
func TestGolden(t *testing.T) {
	spec := gpu.H100SXM
	want := map[string]bool{}
	for _, g := range golden {
		rel := profiles.FileName(spec.Name, g.model, g.batch)
		want[rel] = true
		m, err := models.Get(g.model)
		if err != nil {
			t.Fatal(err)
		}
		layers, err := m.Ops(g.batch)
		if err != nil {
			t.Fatal(err)
		}
		p, err := profiler.Estimate(spec, g.model, g.batch, layers)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := profiles.Write(&buf, p); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join("..", "profiles", filepath.FromSlash(rel))
		if old, err := profiles.Load(file); err == nil && old.Source != profiles.SourceEstimated {
			// A measurement (atoll profile) has replaced the estimate: keep it.
			t.Logf("profiles/%s is %s, not estimated: left alone", rel, old.Source)
			continue
		}
		if *update {
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: %v (run: go test ./profiler -run TestGolden -update)", rel, err)
			continue
		}
		if !bytes.Equal(have, buf.Bytes()) {
			t.Errorf("profiles/%s is stale: it differs from what Estimate makes now (run: go test ./profiler -run TestGolden -update, and review the diff)", rel)
		}
	}
	if *update {
		return
	}
	// Every committed estimated profile must come from this generator.
	for _, e := range profiles.List() {
		if e.GPU != spec.Name || want[e.Path] {
			continue
		}
		p, err := profiles.Lookup(e.GPU, e.Model, e.Batch, e.Phase)
		if err != nil {
			t.Errorf("%s: %v", e.Path, err)
			continue
		}
		if p.Source == profiles.SourceEstimated {
			t.Errorf("profiles/%s is an estimated profile this generator does not make; add it to golden or delete it", e.Path)
		}
	}
}
