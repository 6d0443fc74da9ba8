package profiles

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"atoll/gpu"
)

// The committed profiles: profiles/<gpu>/<model>-bs<N>.json, where <model>
// is the zoo name (training models end in "-train").
//
//go:embed */*.json
var embedded embed.FS

// Entry names one embedded profile.
type Entry struct {
	GPU   string // spec name, e.g. "H100-SXM"
	Model string // zoo name, e.g. "resnet50" or "resnet50-train"
	Batch int
	Phase string // PhaseInference or PhaseTraining
	Path  string // inside the embedded tree, e.g. "H100-SXM/resnet50-bs1.json", or the store's file
	// Stored: the profile is in the store (StoreDir), where it takes
	// precedence over an embedded one of the same GPU, model and batch.
	Stored bool
}

func (e Entry) String() string { return fmt.Sprintf("%s/%s-bs%d", e.GPU, e.Model, e.Batch) }

// List returns the profiles a lookup can find — the store's and the
// embedded ones, a stored profile in place of an embedded one of the same
// name — sorted by GPU, model and batch.
func List() []Entry {
	out := storeEntries()
	stored := map[string]bool{}
	for _, e := range out {
		stored[e.String()] = true
	}
	paths, _ := fs.Glob(embedded, "*/*.json")
	for _, p := range paths {
		if e, ok := parseEntry(p); ok && !stored[e.String()] {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.GPU != b.GPU {
			return a.GPU < b.GPU
		}
		if a.Model != b.Model {
			return a.Model < b.Model
		}
		return a.Batch < b.Batch
	})
	return out
}

// parseEntry reads GPU, model, batch and phase from a path.
func parseEntry(p string) (Entry, bool) {
	dir, file := path.Split(p)
	base, ok := strings.CutSuffix(file, ".json")
	if !ok {
		return Entry{}, false
	}
	i := strings.LastIndex(base, "-bs")
	if i <= 0 {
		return Entry{}, false
	}
	batch, err := strconv.Atoi(base[i+3:])
	if err != nil || batch < 1 {
		return Entry{}, false
	}
	g := strings.TrimSuffix(dir, "/")
	if spec, err := gpu.LookupSpec(g); err != nil || spec.Name != g {
		return Entry{}, false // not a GPU directory (e.g. testdata)
	}
	e := Entry{GPU: g, Model: base[:i], Batch: batch, Phase: PhaseInference, Path: p}
	if strings.HasSuffix(e.Model, "-train") {
		e.Phase = PhaseTraining
	}
	return e, true
}

// FileName is the path, relative to the profiles directory, at which the
// profile for this GPU, zoo model and batch is committed.
func FileName(gpuName, model string, batch int) string {
	return fmt.Sprintf("%s/%s-bs%d.json", gpuName, model, batch)
}

func storeText() string {
	if d := StoreDir(); d != "" {
		return d
	}
	return "(none)"
}

// Lookup parses the profile (the store's, else the embedded one) for a GPU (spec or driver name), model,
// batch size and phase. model is a zoo name; a training profile can be named
// either by its zoo name ("resnet50-train") or by the architecture with
// phase PhaseTraining ("resnet50", "training"). An empty phase means the one
// the name implies. The error (wrapping ErrNotFound) lists what exists.
func Lookup(gpuName, model string, batch int, phase string) (*Profile, error) {
	spec, err := gpu.LookupSpec(gpuName)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	name := model
	switch phase {
	case "", PhaseInference:
		if phase == PhaseInference && strings.HasSuffix(model, "-train") {
			return nil, fmt.Errorf("%w: model %q is a training step but phase %q was asked for", ErrNotFound, model, phase)
		}
	case PhaseTraining:
		if !strings.HasSuffix(model, "-train") {
			name = model + "-train"
		}
	default:
		return nil, fmt.Errorf("%w: unknown phase %q (want %q or %q)", ErrNotFound, phase, PhaseInference, PhaseTraining)
	}
	file := FileName(spec.Name, name, batch)
	if strings.ContainsAny(name, `/\`) || strings.Contains(name, "..") {
		return nil, fmt.Errorf("%w: model name %q is not a zoo name", ErrNotFound, model)
	}
	if data, path, ok, err := readStore(file); err != nil {
		return nil, fmt.Errorf("profile store: %w", err)
	} else if ok {
		return parse(bytes.NewReader(data), path)
	}
	data, err := embedded.ReadFile(file)
	if err != nil {
		var have []string
		for _, e := range List() {
			have = append(have, e.String())
		}
		return nil, fmt.Errorf("%w for %s (looked for %s in the store %s and the embedded set); have: %s; make one with `atoll profile --model %s --batch %d`",
			ErrNotFound, strings.TrimSuffix(file, ".json"), file, storeText(), strings.Join(have, ", "), name, batch)
	}
	return parse(bytes.NewReader(data), file)
}
