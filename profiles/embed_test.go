package profiles_test

import (
	"errors"
	"strings"
	"testing"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/models"
	"atoll/profiles"
)

// Every committed profile parses, agrees with its file name, and matches
// the launches its zoo model makes at its batch size.
func TestEmbeddedMatchModels(t *testing.T) {
	entries := profiles.List()
	if len(entries) == 0 {
		t.Fatal("no embedded profiles")
	}
	for _, e := range entries {
		t.Run(e.String(), func(t *testing.T) {
			p, err := profiles.Lookup(e.GPU, e.Model, e.Batch, "")
			if err != nil {
				t.Fatal(err)
			}
			if p.GPU != e.GPU || p.Model != e.Model || p.Batch != e.Batch || p.Phase != e.Phase {
				t.Errorf("file %s holds %s %s bs%d %s", e.Path, p.GPU, p.Model, p.Batch, p.Phase)
			}
			spec, err := gpu.LookupSpec(p.GPU)
			if err != nil {
				t.Fatal(err)
			}
			m, err := models.Get(p.Model)
			if err != nil {
				t.Fatal(err)
			}
			if m.Phase() != p.Phase {
				t.Errorf("phase %s, model %s is %s", p.Phase, m.Name(), m.Phase())
			}
			layers, err := m.Ops(p.Batch)
			if err != nil {
				t.Fatal(err)
			}
			if err := profiles.Check(p, models.Ops(layers), spec); err != nil {
				t.Error(err)
			}
			for i, l := range layers {
				if i < len(p.Kernels) && p.Kernels[i].Name != l.Name {
					t.Errorf("kernel %d named %q, layer is %q", i, p.Kernels[i].Name, l.Name)
					break
				}
				// A scheduler relies on the tag to keep an optimizer
				// update out of Reset form: it must match the model.
				if i < len(p.Kernels) && p.Kernels[i].InPlace() != l.InPlace() {
					t.Errorf("kernel %d (%s): in-place tag %v, the layer updates in place: %v", i, l.Name, p.Kernels[i].InPlace(), l.InPlace())
				}
				// The simulator charges a vendor convolution's launch more
				// host time than a product's: the tag must follow the
				// library's choice for the op.
				if i < len(p.Kernels) {
					k := &p.Kernels[i]
					if want := k.HasTag(profiles.TagBLAS) && kernels.BLASConv(l.Op); k.HasTag(profiles.TagBLASConv) != want {
						t.Errorf("kernel %d (%s): %s tag %v, want %v (kernels.BLASConv)", i, l.Name, profiles.TagBLASConv, k.HasTag(profiles.TagBLASConv), want)
					}
				}
			}
		})
	}
}

func TestLookup(t *testing.T) {
	p, err := profiles.Lookup("NVIDIA H100 80GB HBM3", "resnet50", 32, profiles.PhaseTraining)
	if err != nil {
		t.Fatal(err)
	}
	if p.Model != "resnet50-train" || p.Phase != profiles.PhaseTraining || p.Batch != 32 {
		t.Errorf("got %s %s bs%d", p.Model, p.Phase, p.Batch)
	}
	if _, err := profiles.Lookup("h100-sxm", "resnet50-train", 32, ""); err != nil {
		t.Errorf("by zoo name: %v", err)
	}
	for _, tc := range []struct {
		gpu, model string
		batch      int
		phase      string
		want       string
	}{
		{"H100-SXM", "resnet50", 3, "", "have: "},
		{"H100-SXM", "resnet50", 3, "", "H100-SXM/resnet50-bs1"},
		{"A100-SXM", "resnet50", 1, "", "looked for A100-SXM/resnet50-bs1.json"},
		{"H200", "resnet50-train", 8, "", "looked for H200/resnet50-train-bs8.json"},
		{"B200", "resnet50", 1, "", `unknown GPU "B200"`},
		{"H100-SXM", "resnet50", 1, "serving", `unknown phase "serving"`},
		{"H100-SXM", "resnet50-train", 32, profiles.PhaseInference, "is a training step"},
		{"H100-SXM", "../resnet50", 1, "", "not a zoo name"},
	} {
		_, err := profiles.Lookup(tc.gpu, tc.model, tc.batch, tc.phase)
		if !errors.Is(err, profiles.ErrNotFound) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Lookup(%s, %s, %d, %q) = %v, want ErrNotFound containing %q", tc.gpu, tc.model, tc.batch, tc.phase, err, tc.want)
		}
	}
}

func TestList(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for _, e := range profiles.List() {
		key := e.String()
		if seen[key] {
			t.Errorf("duplicate entry %s", key)
		}
		seen[key] = true
		if e.Path != profiles.FileName(e.GPU, e.Model, e.Batch) {
			t.Errorf("entry %s has path %s", key, e.Path)
		}
		if prev != "" && key < prev && !strings.HasPrefix(key, strings.Split(prev, "/")[0]) {
			t.Errorf("not sorted: %s after %s", key, prev)
		}
		prev = key
	}
	for _, want := range []string{"H100-SXM/resnet50-bs1", "H100-SXM/bert-base-bs1", "H100-SXM/resnet50-train-bs32"} {
		if !seen[want] {
			t.Errorf("List lacks %s", want)
		}
	}
}

func TestCheck(t *testing.T) {
	spec := gpu.H100SXM
	p, err := profiles.Lookup(spec.Name, "resnet50", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	ops := func(model string, batch int) []kernels.Op {
		m, err := models.Get(model)
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Ops(batch)
		if err != nil {
			t.Fatal(err)
		}
		return models.Ops(l)
	}
	good := ops("resnet50", 1)
	if err := profiles.Check(p, good, spec); err != nil {
		t.Fatalf("matching profile refused: %v", err)
	}
	mutated := func(f func(k *profiles.Kernel)) *profiles.Profile {
		q, _ := profiles.Lookup(spec.Name, "resnet50", 1, "")
		f(&q.Kernels[5])
		return q
	}
	for _, tc := range []struct {
		name  string
		p     *profiles.Profile
		ops   []kernels.Op
		spec  gpu.Spec
		index int
		field string
		msg   string
	}{
		{"other gpu", p, good, gpu.H200, -1, "gpu", `gpu: the model has "H200", the profile "H100-SXM"`},
		{"other batch", p, ops("resnet50", 2), spec, 0, "", `kernels[0] ("conv1")`},
		{"other model", p, ops("resnet152", 1), spec, -1, "", ""},
		{"fewer ops", p, good[:40], spec, -1, "kernels", "the model has 40 launches, the profile 56 kernels"},
		{"more ops", p, append(good[:len(good):len(good)], good[0]), spec, -1, "kernels", "the model has 57 launches"},
		{"kernel", mutated(func(k *profiles.Kernel) { k.Kernel = "gemm_bf16_64x64" }), good, spec, 5, "kernel", `the profile "gemm_bf16_64x64"`},
		{"block", mutated(func(k *profiles.Kernel) { k.Block = [3]int{256, 1, 1} }), good, spec, 5, "block", "the profile 256x1x1"},
		{"shape", mutated(func(k *profiles.Kernel) { k.Shape = "N=1 56x56x64 -> 56x56x65 k=1x1 s=1" }), good, spec, 5, "shape", "56x56x65"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := profiles.Check(tc.p, tc.ops, tc.spec)
			var me *profiles.MismatchError
			if !errors.Is(err, profiles.ErrMismatch) || !errors.As(err, &me) {
				t.Fatalf("Check = %v, want a MismatchError", err)
			}
			if me.Kernel != tc.index && tc.name != "other model" {
				t.Errorf("first mismatch at kernel %d, want %d: %v", me.Kernel, tc.index, err)
			}
			if tc.field != "" && (me.Kernel != tc.index || me.Field != tc.field) {
				t.Errorf("first mismatch at %d %s, want %d %s: %v", me.Kernel, me.Field, tc.index, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("message %q lacks %q", err, tc.msg)
			}
		})
	}
	// An invalid profile is refused as invalid, not as a mismatch.
	bad := mutated(func(k *profiles.Kernel) { k.DurationUs = -1 })
	if err := profiles.Check(bad, good, spec); !errors.Is(err, profiles.ErrInvalid) {
		t.Errorf("Check(invalid) = %v", err)
	}
	if err := profiles.Check(nil, good, spec); !errors.Is(err, profiles.ErrInvalid) {
		t.Errorf("Check(nil) = %v", err)
	}
	withNil := append([]kernels.Op(nil), good...)
	withNil[3] = nil
	if err := profiles.Check(p, withNil, spec); !errors.Is(err, profiles.ErrMismatch) {
		t.Errorf("Check with a nil op = %v", err)
	}
}
