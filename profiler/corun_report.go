package profiler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"

	"atoll/internal/gzipped"
)

// CoRunReport is what CoRun measured: how much slower the HP model's
// kernels run while each BE kernel runs back to back in its partition.
type CoRunReport struct {
	APIVersion   string      `json:"apiVersion"`
	GPU          string      `json:"gpu"`
	Backend      string      `json:"backend"`
	Device       string      `json:"device"`
	Command      string      `json:"command,omitempty"`
	Date         string      `json:"date"`
	HP           ModelBatch  `json:"hp"`
	BE           ModelBatch  `json:"be"`
	PartitionSMs int         `json:"partitionSms"`
	HPRest       bool        `json:"hpRest,omitempty"`       // HP on the SMs the partition leaves
	BEDepth      int         `json:"beDepth,omitempty"`      // BE launches queued at most (0: all at once)
	HPGraph      bool        `json:"hpGraph,omitempty"`      // HP passes submitted as graphs
	HPPassEvents bool        `json:"hpPassEvents,omitempty"` // one HP event a pass: HPAloneUs and HPKernelSlowdown hold the pass's figure only
	HPGapUs      float64     `json:"hpGapUs,omitempty"`      // each HP pass sent alone, this long after the one before completed
	BEGraphs     bool        `json:"beGraphs,omitempty"`     // every BE kernel queued in graphs
	Passes       int         `json:"passes"`
	HPKernels    []string    `json:"hpKernels"`
	HPAloneUs    []float64   `json:"hpAloneUs"`        // per HP kernel, median of every baseline pass
	HPRequestUs  []float64   `json:"hpRequestAloneUs"` // each baseline's median pass, in order
	Kernels      []CoRunBE   `json:"beKernels"`
	Summary      CoRunTotals `json:"summary"`
}

// ModelBatch names a model and its batch size.
type ModelBatch struct {
	Model string `json:"model"`
	Batch int    `json:"batch"`
}

// CoRunBE is one BE kernel's co-run.
type CoRunBE struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	// SameAs is the index of the kernel of the same launch shape whose
	// measurement this one shares (-1: measured itself).
	SameAs int `json:"sameAs"`
	// ProfileUs, MemoryPct and ComputePct are the BE profile's.
	ProfileUs  float64 `json:"profileUs"`
	MemoryPct  float64 `json:"memoryPct"`
	ComputePct float64 `json:"computePct"`
	// AloneUs is its time per launch alone in the partition.
	AloneUs float64 `json:"aloneUs"`
	// Passes is how many HP passes ran with it queued throughout (passes
	// the queue did not cover are dropped); 0: none, and the figures
	// below are 0.
	Passes int `json:"passes"`
	// HPSlowdown is the HP pass's median time beside it over the
	// median time alone (1: unharmed).
	HPSlowdown float64 `json:"hpSlowdown"`
	// HPKernelSlowdown is, per HP kernel, its median time beside it over
	// its median alone.
	HPKernelSlowdown []float64 `json:"hpKernelSlowdown"`
	// BESlowdown is the BE kernel's own time per launch while the HP
	// passes ran over its time alone (only with BEDepth, where each BE
	// launch is followed by an event; 0: not measured). It counts the
	// launches that completed within the covered passes, so a queue too
	// shallow to outlast the host's refill shows as a slowdown too:
	// CoRunTotals weighs only kernels whose queue holds 200 µs or more.
	BESlowdown float64 `json:"beSlowdown,omitempty"`
	// BEChunk, above 1, is how many launches each queued item held: a
	// kernel whose BEDepth launches would hold less than 200 µs is queued
	// in graphs of launches lasting 50 µs (0 or 1: one launch an item).
	BEChunk int `json:"beChunk,omitempty"`
}

// CoRunTotals summarise a report over the BE model's step, each kernel
// weighted by its profiled time.
type CoRunTotals struct {
	// MeanHPSlowdown is the step-time-weighted mean HP slowdown: what BE
	// running beside HP all through its step would cost HP on average.
	MeanHPSlowdown float64 `json:"meanHpSlowdown"`
	// ShareWithin maps a slowdown bound ("1.02") to the share of the BE
	// step's time spent in kernels whose HP slowdown is at most it.
	ShareWithin map[string]float64 `json:"shareWithin"`
	// Unmeasured is the share of the step's time in kernels with no
	// covered pass.
	Unmeasured float64 `json:"unmeasured"`
	// BaselineSpread is (max - min) / median of the baseline passes.
	BaselineSpread float64 `json:"baselineSpread"`
	// MeanBESlowdown is the step-time-weighted mean of BESlowdown over the
	// kernels with one whose queue (BEDepth × BEChunk × their time alone)
	// holds 200 µs or more, and BEWeighed the share of the step they make up
	// (0 without BEDepth).
	MeanBESlowdown float64 `json:"meanBeSlowdown,omitempty"`
	BEWeighed      float64 `json:"beWeighed,omitempty"`
}

// CoRunBounds are the slowdown bounds of CoRunTotals.ShareWithin.
var CoRunBounds = []float64{1.02, 1.05, 1.10, 1.25}

func coRunTotals(r *CoRunReport) CoRunTotals {
	t := CoRunTotals{ShareWithin: map[string]float64{}}
	total, weighted := 0.0, 0.0
	for _, e := range r.Kernels {
		total += e.ProfileUs
	}
	if total <= 0 {
		return t
	}
	for _, e := range r.Kernels {
		w := e.ProfileUs / total
		if e.Passes == 0 {
			t.Unmeasured += w
			continue
		}
		weighted += w * e.HPSlowdown
		for _, b := range CoRunBounds {
			if e.HPSlowdown <= b {
				t.ShareWithin[fmt.Sprintf("%.2f", b)] += w
			}
		}
	}
	if m := 1 - t.Unmeasured; m > 0 {
		t.MeanHPSlowdown = round(weighted/m, 1e4)
	}
	if r.BEDepth > 0 {
		be := 0.0
		for _, e := range r.Kernels {
			if e.BESlowdown > 0 && float64(r.BEDepth*max(1, e.BEChunk))*e.AloneUs >= 200 {
				t.BEWeighed += e.ProfileUs / total
				be += e.ProfileUs / total * e.BESlowdown
			}
		}
		if t.BEWeighed > 0 {
			t.MeanBESlowdown = round(be/t.BEWeighed, 1e4)
		}
		t.BEWeighed = round(t.BEWeighed, 1e4)
	}
	for k, v := range t.ShareWithin {
		t.ShareWithin[k] = round(v, 1e4)
	}
	t.Unmeasured = round(t.Unmeasured, 1e4)
	if len(r.HPRequestUs) > 0 {
		lo, hi := slices.Min(r.HPRequestUs), slices.Max(r.HPRequestUs)
		if m := median(r.HPRequestUs); m > 0 {
			t.BaselineSpread = round((hi-lo)/m, 1e4)
		}
	}
	return t
}

func sums(passes [][]float64) []float64 {
	out := make([]float64, len(passes))
	for i, p := range passes {
		for _, v := range p {
			out[i] += v
		}
	}
	return out
}

// columnMedians is the median of each column of rows.
func columnMedians(rows [][]float64) []float64 {
	if len(rows) == 0 {
		return nil
	}
	out := make([]float64, len(rows[0]))
	col := make([]float64, len(rows))
	for j := range out {
		for i, r := range rows {
			col[i] = r[j]
		}
		out[j] = median(col)
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// WriteCoRun writes r as indented JSON.
func WriteCoRun(w io.Writer, r *CoRunReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(r)
}

// ReadCoRun parses a co-run report (a gzip stream is decompressed first),
// refusing unknown fields and other versions.
func ReadCoRun(rd io.Reader) (*CoRunReport, error) {
	data, err := gzipped.ReadAll(rd)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r CoRunReport
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("not a co-run report: %w", err)
	}
	if r.APIVersion != CoRunAPIVersion {
		return nil, fmt.Errorf("apiVersion %q, want %q (a report of atoll corun)", r.APIVersion, CoRunAPIVersion)
	}
	want := len(r.HPKernels)
	if r.HPPassEvents {
		want = 1 // the pass's
	}
	for _, k := range r.Kernels {
		if k.Passes > 0 && len(k.HPKernelSlowdown) != want {
			return nil, fmt.Errorf("BE kernel %d (%s): %d HP kernel slowdowns, want %d (%d HP kernels, events after each pass: %v)", k.Index, k.Name, len(k.HPKernelSlowdown), want, len(r.HPKernels), r.HPPassEvents)
		}
	}
	return &r, nil
}
