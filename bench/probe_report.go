package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"atoll/kernels"
	"atoll/profiles"
	"atoll/sched"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// WriteProbe writes r as indented JSON.
func WriteProbe(w io.Writer, r *ProbeResult) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadProbe reads a probe result (to replay its setup on another backend).
func ReadProbe(rd io.Reader) (*ProbeResult, error) {
	var r ProbeResult
	dec := json.NewDecoder(rd)
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: reading a probe result: %w", ErrProbe, err)
	}
	if r.APIVersion != ProbeVersion {
		return nil, fmt.Errorf("%w: apiVersion %q, this build reads %q", ErrProbe, r.APIVersion, ProbeVersion)
	}
	if r.Setup == nil || r.Setup.HPProfile == nil || len(r.Setup.BE) == 0 {
		return nil, fmt.Errorf("%w: the result has no setup to replay", ErrProbe)
	}
	check := func(what string, p *profiles.Profile, op kernels.GEMM) error {
		if err := sched.ValidateProfile(p); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrProbe, what, err)
		}
		for i := range p.Kernels {
			if got, want := p.Kernels[i].Kernel, op.Kernel(); got != want {
				return fmt.Errorf("%w: %s profile kernel %d is %s, its op is %s", ErrProbe, what, i, got, want)
			}
		}
		return nil
	}
	if err := check("HP", r.Setup.HPProfile, r.Setup.HPOp); err != nil {
		return nil, err
	}
	for _, b := range r.Setup.BE {
		if err := check(fmt.Sprintf("BE %.0f µs", b.TargetBlockUs), b.Profile, b.Op); err != nil {
			return nil, err
		}
	}
	return &r, nil
}

// ProbeTable renders the probe like the design brief's §2 table: one row
// per BE block length and mechanism, HP latency p50/p99 in µs, the p99
// over dedicated's p99 of the same block length, preemption latency, BE
// launches by form, padded launches, BE normalized work and the median
// host launch lag of an HP request's first and last kernel.
func ProbeTable(w io.Writer, r *ProbeResult) error {
	t := tablewriter.NewTable(w,
		tablewriter.WithRenderer(renderer.NewBlueprint()),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAlignment(tw.AlignRight),
	)
	t.Header([]string{"BE block µs", "mechanism", "HP p50 µs", "HP p99 µs", "p99/dedicated", "preempt p50 µs", "preempt p99 µs", "BE launches", "padded", "BE norm", "launch lag µs"})
	ded := map[float64]float64{}
	for _, c := range r.Cells {
		if c.Policy == "dedicated" && c.Error == "" {
			ded[c.TargetBlockUs] = c.HP.P99
		}
	}
	for _, c := range r.Cells {
		blk := fmt.Sprintf("%.0f (%.0f)", c.TargetBlockUs, c.BlockUs)
		if c.Error != "" {
			if err := t.Append([]string{blk, c.Policy, "error: " + firstLine(c.Error), "", "", "", "", "", "", "", ""}); err != nil {
				return err
			}
			continue
		}
		ratio := "-"
		if d := ded[c.TargetBlockUs]; d > 0 {
			ratio = fmt.Sprintf("%.2fx", c.HP.P99/d)
		}
		pre50, pre99 := "-", "-"
		if c.Preempt.Count > 0 {
			pre50, pre99 = fmt.Sprintf("%.0f", c.Preempt.P50), fmt.Sprintf("%.0f", c.Preempt.P99)
		}
		var forms []string
		for _, f := range []string{"plain", "reset", "resumable", "padded"} {
			if n := c.BEForms[f]; n > 0 {
				forms = append(forms, fmt.Sprintf("%s %d", f, n))
			}
		}
		fs := strings.Join(forms, ", ")
		if fs == "" {
			fs = "-"
		}
		row := []string{blk, c.Policy, fmt.Sprintf("%.0f", c.HP.P50), fmt.Sprintf("%.0f", c.HP.P99), ratio,
			pre50, pre99, fs, fmt.Sprint(c.Padded), fmt.Sprintf("%.2f", c.BENorm),
			fmt.Sprintf("%.0f/%.0f", c.FirstLaunchLag.P50, c.LastLaunchLag.P50)}
		if err := t.Append(row); err != nil {
			return err
		}
	}
	return t.Render()
}

// ProbeSummary renders the §2 layout: one row per BE block length, one
// column per mechanism, each cell HP latency "p99 (p99 / dedicated p99)"
// in µs; "error" where the cell failed.
func ProbeSummary(w io.Writer, r *ProbeResult) error {
	var blocks []float64
	var pols []string
	cells := map[float64]map[string]ProbeCell{}
	for _, c := range r.Cells {
		if cells[c.TargetBlockUs] == nil {
			cells[c.TargetBlockUs] = map[string]ProbeCell{}
			blocks = append(blocks, c.TargetBlockUs)
		}
		if !slices.Contains(pols, c.Policy) {
			pols = append(pols, c.Policy)
		}
		cells[c.TargetBlockUs][c.Policy] = c
	}
	t := tablewriter.NewTable(w,
		tablewriter.WithRenderer(renderer.NewBlueprint()),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAlignment(tw.AlignRight),
	)
	t.Header(append([]string{"HP p99 µs"}, pols...))
	for _, b := range blocks {
		row := []string{fmt.Sprintf("%.0f µs blocks", b)}
		ded := cells[b]["dedicated"]
		for _, p := range pols {
			c, ok := cells[b][p]
			switch {
			case !ok:
				row = append(row, "")
			case c.Error != "":
				row = append(row, "error")
			case ded.Error == "" && ded.HP.P99 > 0:
				row = append(row, fmt.Sprintf("%.0f (%.2fx)", c.HP.P99, c.HP.P99/ded.HP.P99))
			default:
				row = append(row, fmt.Sprintf("%.0f", c.HP.P99))
			}
		}
		if err := t.Append(row); err != nil {
			return err
		}
	}
	return t.Render()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// DescribeProbe is the header printed above the table.
func DescribeProbe(r *ProbeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "device: %s (%s)", r.Device, r.Backend)
	if r.Driver != "" {
		fmt.Fprintf(&b, ", %s", r.Driver)
	}
	s := r.Setup
	hk := s.HPProfile.Kernels[0]
	fmt.Fprintf(&b, "\nHP: %d x %s %s, grid %v x %d threads, %.1f µs each alone (%s); %d requests after %d discarded, one every %v",
		len(s.HPProfile.Kernels), hk.Kernel, s.HPOp.Shape(), hk.Grid[0]*hk.Grid[1]*hk.Grid[2], hk.Block[0], hk.DurationUs, s.HPProfile.Source,
		r.Config.Requests, r.Config.Warmup, r.Config.Gap)
	fmt.Fprintf(&b, "\nHP request launched directly (no scheduler): %.1f µs back to back, %.1f µs after the device idled between requests", r.DirectHPUs, r.DirectIdleHPUs)
	for _, be := range s.BE {
		k := be.Profile.Kernels[0]
		fmt.Fprintf(&b, "\nBE %4.0f µs: %d x %s %s, %d blocks x %d threads (%d waves), %.1f µs alone -> %.1f µs per block",
			be.TargetBlockUs, len(be.Profile.Kernels), k.Kernel, be.Op.Shape(), k.Grid[0]*k.Grid[1]*k.Grid[2], k.Block[0], be.Waves, k.DurationUs, be.BlockUs)
		if len(be.FormUs) > 0 {
			fmt.Fprintf(&b, "; alone as reset %.1f µs (%.1f with the relay), as resumable %.1f µs", be.FormUs["reset"], be.FormUs["reset-relay"], be.FormUs["resumable"])
		}
	}
	return b.String()
}
