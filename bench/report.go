package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"atoll/internal/gzipped"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// ReportVersion is the apiVersion of interference reports.
const ReportVersion = "atoll/bench/v1"

// ErrReport reports a malformed or incompatible report.
var ErrReport = errors.New("bench: report")

// WorkloadInfo names what ran, so reports of different runs can be checked
// for comparability.
type WorkloadInfo struct {
	HPModel     string  `json:"hpModel"`
	HPBatch     int     `json:"hpBatch"`
	BEModel     string  `json:"beModel,omitempty"`
	BEBatch     int     `json:"beBatch,omitempty"`
	Profiles    string  `json:"profiles"` // where the kernel timings came from (GPU, estimated/measured)
	Arrival     string  `json:"arrival"`
	Load        float64 `json:"load"`
	RatePerSec  float64 `json:"ratePerSec"`
	Seed        uint64  `json:"seed"`
	DurationSec float64 `json:"durationSec"`
	WarmupSec   float64 `json:"warmupSec"`
	SoloHPUs    float64 `json:"soloHpUs"`            // HP request service time alone (the load's unit)
	HPStreams   int     `json:"hpStreams,omitempty"` // HP clients serving the model at once (Config.HPStreams; absent: one)
	HPBatches   string  `json:"hpBatches,omitempty"` // batch sizes of the passes that may serve several waiting requests, e.g. "2,4,8" (Config.HPBatched; absent: one request per pass)
	Cell        string  `json:"cell,omitempty"`      // the matrix cell, when a matrix ran it
}

// Report is one policy's run of one co-location workload, with the
// baselines it is measured against (HP alone on the same arrival sequence,
// BE alone) so that it stands on its own.
type Report struct {
	APIVersion string       `json:"apiVersion"`
	Policy     string       `json:"policy"`
	Backend    string       `json:"backend"` // "sim" or "cuda"
	Device     string       `json:"device"`
	Driver     string       `json:"driver,omitempty"`
	Command    string       `json:"command"`
	Workload   WorkloadInfo `json:"workload"`

	HP           Latency   `json:"hp"`                       // completion − scheduled arrival
	HPService    Latency   `json:"hpService"`                // completion − first kernel start
	Dedicated    Latency   `json:"dedicated"`                // HP alone, same arrivals
	HPCDF        []float64 `json:"hpCdfUs,omitempty"`        // latency at CDFPercents
	DedicatedCDF []float64 `json:"dedicatedCdfUs,omitempty"` // same, HP alone
	P99Overhead  *float64  `json:"p99Overhead"`              // HP.P99 / Dedicated.P99 − 1
	DeltaP99Us   *float64  `json:"deltaP99Us"`

	HPCompleted  int      `json:"hpCompleted"`
	HPNormalized *float64 `json:"hpNormalized"` // completed rate shared / dedicated
	BEWorkPerSec float64  `json:"beWorkPerSec"` // BE solo-kernel seconds done per second
	BEAlonePerS  float64  `json:"beAloneWorkPerSec"`
	BENormalized *float64 `json:"beNormalized"`
	System       *float64 `json:"systemThroughput"` // HPNormalized + BENormalized

	// HPBusyShare is the share of the measured window with an HP request
	// in flight; BEBesideBusyHP and BEWhileHPIdle split BENormalized by
	// it: BE work finished while HP was busy per second of busy time,
	// and the rest per second of idle time, each over BE's alone rate
	// (so BENormalized = share·beside + (1 − share)·idle). Where BE's
	// throughput comes from — beside HP or in HP's idle time — on the
	// simulator and the GPU alike (the core sees completions as the host
	// does). Absent in reports made before them.
	HPBusyShare    *float64 `json:"hpBusyShare,omitempty"`
	BEBesideBusyHP *float64 `json:"beBesideBusyHp,omitempty"`
	BEWhileHPIdle  *float64 `json:"beWhileHpIdle,omitempty"`
	// BEDryShare is the share of HP's busy time in which BE's stream had
	// no work on the GPU's clock (sched.Trace.BEDryHPBusy): BE beside busy
	// HP held back by the policy or not refilled in time by the host,
	// rather than queued and running slowly.
	BEDryShare *float64 `json:"beDryShareHpBusy,omitempty"`
	// BEDryGaps summarizes the empty spans of BE's stream that began
	// while HP was busy (sched.Trace.BEDryGaps), in µs: with a policy that
	// keeps BE running beside HP, the host's time from a BE completion to
	// its next BE launch — a few long gaps (the thread away) or many short
	// ones (each refill late).
	BEDryGaps *Latency `json:"beDryGapsHpBusy,omitempty"`

	// BEItersPerSec and BEAloneItersPerSec count whole BE iterations
	// (training steps, batches) finished per second, shared and alone.
	BEItersPerSec      float64 `json:"beItersPerSec,omitempty"`
	BEAloneItersPerSec float64 `json:"beAloneItersPerSec,omitempty"`
	// BEKernelsPerStep is the BE kernels one iteration launches in Plain
	// form (its profile's kernels): with BENormalized it gives the device
	// time BE lost per kernel, (1/BEItersPerSec − 1/BEAloneItersPerSec) /
	// BEKernelsPerStep — with HP idle, the host's turnaround between a
	// completion and the next launch (tools/gpu/launchpath.sh).
	BEKernelsPerStep int `json:"beKernelsPerStep,omitempty"`

	// P99CI and P99OverheadCI are 95 % bootstrap intervals (BootstrapIters
	// resamples of this run's requests and the dedicated run's): moving
	// blocks of neighbouring requests (BlockLength) where the samples are
	// in arrival order, single requests where they are stored sorted.
	P99CI         *CI `json:"p99CiUs,omitempty"`
	P99OverheadCI *CI `json:"p99OverheadCi,omitempty"`
	// HPSamples and DedicatedSamples hold every measured request's latency
	// (EncodeSeries: arrival order; older reports EncodeSamples: sorted),
	// so any percentile and CI can be recomputed.
	HPSamples        string `json:"hpSamples,omitempty"`
	DedicatedSamples string `json:"dedicatedSamples,omitempty"`

	// SoloKernelsUs is the HP request's kernels' summed profiled duration;
	// Causes split each request's latency beyond it (sched.Cause), and
	// Blame names the BE kernels HP kernels were slowed beside, most
	// delay first.
	SoloKernelsUs float64     `json:"soloKernelsUs,omitempty"`
	Causes        []CauseStat `json:"causes,omitempty"`
	Blame         []BlameStat `json:"blame,omitempty"`
	// HPKernels is each HP kernel's device span in this run (completion −
	// max(submission, the previous completion); Config.KernelSpans), mean
	// and median over the measured requests, beside the solo baseline the
	// causes measure against, in the pass's order. Kernels that complete
	// at one event (a chunk of the request's graph without
	// --hp-kernel-events) count as one: the first holds their span, the
	// others 0.
	HPKernels []KernelSpan `json:"hpKernels,omitempty"`

	Preemptions    int     `json:"preemptions"`
	PreemptLatency Latency `json:"preemptLatency"`
	Padded         int     `json:"paddedLaunches"`
	// Unpadded counts padded decisions launched as the HP kernel alone
	// because the pair kernel was not compiled yet.
	Unpadded int `json:"unpaddedLaunches,omitempty"`
	Launches int `json:"launches"`
	// GraphLaunches are the HP requests submitted as one graph each, and
	// HPGraphs whether graphs were used ("on", "off", "off: why";
	// sched.Options.NoHPGraphs).
	GraphLaunches int    `json:"graphLaunches,omitempty"`
	HPGraphs      string `json:"hpGraphs,omitempty"`
	// HPGraphEvents is the events an HP graph records per pass (one per
	// chunk of its kernels, or one per kernel with
	// sched.Options.HPKernelEvents).
	HPGraphEvents int `json:"hpGraphEvents,omitempty"`
	// BEGraphs says whether BE chunks went as graphs ("on", "off", "off:
	// why"; sched.Options.NoBEGraphs), BEChunks how many chunks were
	// recorded and BEChunkLaunches how many replays were submitted.
	BEGraphs        string `json:"beGraphs,omitempty"`
	BEChunks        int    `json:"beChunks,omitempty"`
	BEChunkLaunches int    `json:"beChunkLaunches,omitempty"`
	// Streams says where the policy's streams ran: priorities, SM
	// partitions (sched.StreamPlan.String).
	Streams string `json:"streams,omitempty"`
	// HPByBatch counts the measured HP requests by the batch of the pass
	// that served them ("1", "2", ...; Workload.HPBatches), where passes
	// may serve several.
	HPByBatch map[string]int `json:"hpRequestsByBatch,omitempty"`
	// BLAS is the vendor library the device ran whole launches of GEMMs
	// and convolutions on (gpu.Info.BLAS; "" for none).
	BLAS string `json:"blas,omitempty"`
	// GraphWaits are HP requests that waited in the driver for a graph
	// instance; StaleGraphEvents the device's stale graph-event answers
	// turned away (sched.Trace).
	GraphWaits       int `json:"graphWaits,omitempty"`
	StaleGraphEvents int `json:"staleGraphEvents,omitempty"`
	// HostStalls are the gaps of 1 ms or more in the driver thread's
	// waits for the GPU over the run (gpu.HostStalls; a GPU run's only):
	// HP latency in a run with stalls measures the host as much as the
	// policy. Nil where the device does not watch for them.
	HostStalls *StallStat `json:"hostStalls,omitempty"`
	// LaunchOrder is how each scheduler round sent its launches:
	// "hp-first" (the default) or "decision" (--launch-order decision;
	// sched.Options.DecisionOrder). Empty in reports made before it.
	LaunchOrder string `json:"launchOrder,omitempty"`
	// HostUsPerLaunch is the driver's host time per launch (bind, launch,
	// record), from the run's wall clock: the real cost on a GPU; on the
	// simulator it is the Go code's own cost, not a model figure.
	HostUsPerLaunch float64 `json:"hostUsPerLaunch"`
	// HostPerLaunch splits the driver's host time per launch, in µs: the
	// launch itself (up to the device's Launch call — binding —, the call,
	// and after it — the event Record —, which add up to HostUsPerLaunch)
	// and the polls for completions (with the event queries they made per
	// launch).
	HostPerLaunch *HostSplit `json:"hostPerLaunch,omitempty"`
	WallSec       float64    `json:"wallSec"`
}

// CauseStat is one cause's share of the HP requests' delay: its mean and
// p99 over the requests (µs), and its part of the summed delay.
type CauseStat struct {
	Cause  string  `json:"cause"`
	MeanUs float64 `json:"meanUs"`
	P99Us  float64 `json:"p99Us"`
}

// KernelSpan is one HP kernel's device span in a run (Report.HPKernels).
type KernelSpan struct {
	Kernel   string  `json:"kernel"`
	SoloUs   float64 `json:"soloUs"`
	MeanUs   float64 `json:"meanUs"`
	MedianUs float64 `json:"medianUs"`
}

// BlameStat is the HP delay one BE kernel was beside.
type BlameStat struct {
	Kernel       string  `json:"kernel"`
	TotalUs      float64 `json:"totalUs"`
	PerRequestUs float64 `json:"perRequestUs"` // TotalUs over the measured requests
}

// Finish fills the derived fields (overheads, normalized throughputs) from
// the measured ones. NaN results are left nil: a field that does not apply
// is absent, never a made-up number.
func (r *Report) Finish() {
	set := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	r.APIVersion = ReportVersion
	r.P99Overhead = set(Overhead(r.HP.P99, r.Dedicated.P99))
	if r.HP.Count > 0 && r.Dedicated.Count > 0 {
		r.DeltaP99Us = set(r.HP.P99 - r.Dedicated.P99)
	}
	r.HPNormalized = set(Normalized(float64(r.HPCompleted), float64(r.Dedicated.Count)))
	if r.Workload.BEModel != "" {
		r.BENormalized = set(Normalized(r.BEWorkPerSec, r.BEAlonePerS))
	}
	if r.HPNormalized != nil {
		be := 0.0
		if r.BENormalized != nil {
			be = *r.BENormalized
		}
		r.System = set(*r.HPNormalized + be)
	}
}

// WriteReport writes r as indented JSON.
func WriteReport(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadReport parses a report, refusing unknown fields and other versions.
// A gzip stream (a report stored as .json.gz) is decompressed first.
func ReadReport(rd io.Reader) (*Report, error) {
	data, err := gzipped.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrReport, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Report
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrReport, jsonErrorAt(data, err))
	}
	if r.APIVersion != ReportVersion {
		return nil, fmt.Errorf("%w: apiVersion %q is not %q (was this file written by atoll bench?)", ErrReport, r.APIVersion, ReportVersion)
	}
	if r.Policy == "" {
		return nil, fmt.Errorf("%w: policy is empty", ErrReport)
	}
	return &r, nil
}

// jsonErrorAt turns encoding/json's byte offsets into line numbers.
func jsonErrorAt(data []byte, err error) string {
	var off int64 = -1
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
		if te.Field != "" {
			return fmt.Sprintf("line %d: field %s: expected %s, got JSON %s", lineOf(data, off), te.Field, te.Type, te.Value)
		}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Sprintf("line %d: unexpected end of input (truncated file?)", lineOf(data, int64(len(bytes.TrimRight(data, " \t\r\n")))))
	}
	if off >= 0 {
		return fmt.Sprintf("line %d: %v", lineOf(data, off), err)
	}
	return err.Error()
}

func lineOf(data []byte, off int64) int {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	return bytes.Count(data[:off], []byte("\n")) + 1
}

// Comparable checks that reports ran the same workload on the same device,
// so their rows can stand in one table. It returns an error naming the
// first difference.
func Comparable(rs []*Report) error {
	for _, r := range rs[1:] {
		a, b := rs[0], r
		switch {
		case a.Workload != b.Workload:
			return fmt.Errorf("%w: %s and %s ran different workloads (%+v vs %+v)", ErrReport, a.Policy, b.Policy, a.Workload, b.Workload)
		case a.Backend != b.Backend || a.Device != b.Device:
			return fmt.Errorf("%w: %s ran on %s/%s, %s on %s/%s", ErrReport, a.Policy, a.Backend, a.Device, b.Policy, b.Backend, b.Device)
		}
	}
	return nil
}

// Table renders the comparison table: one row per report, in order.
func Table(w io.Writer, rs []*Report) error {
	t := tablewriter.NewTable(w,
		tablewriter.WithRenderer(renderer.NewBlueprint()),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAlignment(tw.AlignRight),
	)
	t.Header([]string{"policy", "HP p50 ms", "HP p95 ms", "HP p99 ms", "p99 overhead", "Δp99 µs", "BE norm", "system", "preemptions", "padded"})
	for _, r := range rs {
		row := []string{
			r.Policy,
			ms(r.HP.P50), ms(r.HP.P95), ms(r.HP.P99),
			pct(r.P99Overhead), num(r.DeltaP99Us, "%+.0f"),
			num(r.BENormalized, "%.2f"), num(r.System, "%.2f"),
			fmt.Sprint(r.Preemptions), fmt.Sprint(r.Padded),
		}
		if err := t.Append(row); err != nil {
			return err
		}
	}
	return t.Render()
}

func ms(us float64) string { return fmt.Sprintf("%.3f", us/1000) }

func pct(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", *v*100)
}

func num(v *float64, f string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(f, *v)
}

// Describe is a one-paragraph header naming what the table's rows ran.
func Describe(r *Report) string {
	var b strings.Builder
	w := r.Workload
	fmt.Fprintf(&b, "device: %s (%s)", r.Device, r.Backend)
	if r.Driver != "" {
		fmt.Fprintf(&b, ", driver %s", r.Driver)
	}
	fmt.Fprintf(&b, "\nHP: %s bs%d, %s arrivals at load %.2f (%.0f req/s, solo %.0f µs)", w.HPModel, w.HPBatch, w.Arrival, w.Load, w.RatePerSec, w.SoloHPUs)
	if w.HPStreams > 1 {
		fmt.Fprintf(&b, ", served by %d streams (a request to the one with the fewest unfinished)", w.HPStreams)
	}
	if len(w.HPBatches) > 0 {
		fmt.Fprintf(&b, ", requests waiting served together in passes of batch %s", w.HPBatches)
	}
	if w.BEModel != "" {
		fmt.Fprintf(&b, "\nBE: %s bs%d, closed loop", w.BEModel, w.BEBatch)
	}
	fmt.Fprintf(&b, "\nprofiles: %s; %.1f s per run after %.1f s warm-up, seed %d", w.Profiles, w.DurationSec, w.WarmupSec, w.Seed)
	if r.BLAS != "" {
		fmt.Fprintf(&b, "\nGEMMs and convolutions (but depthwise): %s where launched whole; every other kernel and form atoll's own", r.BLAS)
	}
	if len(r.HPByBatch) > 0 {
		fmt.Fprintf(&b, "\nHP requests by the batch of their pass in the %s run: %s", r.Policy, byBatch(r.HPByBatch))
	}
	if r.Streams != "" {
		fmt.Fprintf(&b, "\n%s run: %s", r.Policy, r.Streams)
	}
	switch {
	case r.HPGraphs == "on":
		fmt.Fprintf(&b, "\nHP passes launched whole go as one graph each (--hp-graphs): %d in the %s run, %d of them waited for a free instance", r.GraphLaunches, r.Policy, r.GraphWaits)
		if r.HPGraphEvents > 0 {
			fmt.Fprintf(&b, ", each recording %d events (--hp-kernel-events)", r.HPGraphEvents)
		}
	case r.HPGraphs != "":
		fmt.Fprintf(&b, "\nHP kernels launched one by one (graphs %s)", r.HPGraphs)
	}
	switch {
	case r.BEChunks > 0:
		fmt.Fprintf(&b, "\nBE chunks launched whole go as one graph each (--be-graphs): %d chunks recorded, %d replays in the %s run", r.BEChunks, r.BEChunkLaunches, r.Policy)
	case strings.HasPrefix(r.BEGraphs, "off:"):
		fmt.Fprintf(&b, "\nBE kernels launched one by one (graphs %s)", r.BEGraphs)
	}
	if s := r.HostStalls; s != nil && s.Count > 0 {
		fmt.Fprintf(&b, "\nthe host stalled %d times in the %s run (the driver's thread kept 1 ms or more from the GPU; %.1f ms in all, the longest %.1f ms): HP latency there measures the host as much as the policy", s.Count, r.Policy, s.TotalMs, s.LongestMs)
	}
	return b.String()
}

// byBatch lists counts by batch size, smallest first: "1: 812, 2: 96".
func byBatch(m map[string]int) string {
	var sizes []int
	for k := range m {
		if n, err := strconv.Atoi(k); err == nil {
			sizes = append(sizes, n)
		}
	}
	slices.Sort(sizes)
	var parts []string
	for _, n := range sizes {
		parts = append(parts, fmt.Sprintf("%d: %d", n, m[strconv.Itoa(n)]))
	}
	return strings.Join(parts, ", ")
}

// CauseTable writes each report's HP delay by cause (mean / p99 per
// request, µs, beyond the HP kernels' profiled time) and the BE kernels HP
// ran slower beside.
func CauseTable(w io.Writer, rs []*Report) error {
	t := tablewriter.NewTable(w,
		tablewriter.WithRenderer(renderer.NewBlueprint()),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAlignment(tw.AlignRight),
	)
	header := append([]string{"policy (µs mean / p99)"}, causeOrder(rs)...)
	header = append(header, "top BE kernel beside HP (µs/request)", "BE beside busy HP / in idle (HP busy)")
	t.Header(header)
	for _, r := range rs {
		if len(r.Causes) == 0 {
			continue
		}
		row := []string{r.Policy}
		for _, c := range r.Causes {
			row = append(row, fmt.Sprintf("%.0f / %.0f", c.MeanUs, c.P99Us))
		}
		top := ""
		if len(r.Blame) > 0 {
			top = fmt.Sprintf("%s %.0f", r.Blame[0].Kernel, r.Blame[0].PerRequestUs)
		}
		split := ""
		if r.HPBusyShare != nil && r.BEBesideBusyHP != nil && r.BEWhileHPIdle != nil {
			split = fmt.Sprintf("%.2f / %.2f (%.0f %%)", *r.BEBesideBusyHP, *r.BEWhileHPIdle, 100**r.HPBusyShare)
		}
		if err := t.Append(append(row, top, split)); err != nil {
			return err
		}
	}
	return t.Render()
}

// KernelTable writes, for reports that list HP kernels' spans (Report.
// HPKernels, the same model's), one row per kernel: its solo baseline and
// each report's mean span with its ratio to the solo time of the kernels
// that span covers (a report whose kernels completed in chunks holds a
// chunk's span at its first kernel and "–" at the others), then the
// pass's sum. It writes nothing when no report lists them, and refuses
// reports of different models.
func KernelTable(w io.Writer, rs []*Report) error {
	var with []*Report
	for _, r := range rs {
		if len(r.HPKernels) > 0 {
			with = append(with, r)
		}
	}
	if len(with) == 0 {
		return nil
	}
	ks := with[0].HPKernels
	for _, r := range with[1:] {
		if len(r.HPKernels) != len(ks) || r.HPKernels[0].Kernel != ks[0].Kernel {
			return fmt.Errorf("HP kernel spans of different models (%s, %d kernels; %s, %d kernels)", with[0].Workload.HPModel, len(ks), r.Workload.HPModel, len(r.HPKernels))
		}
	}
	t := tablewriter.NewTable(w,
		tablewriter.WithRenderer(renderer.NewBlueprint()),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAlignment(tw.AlignRight),
	)
	header := []string{"HP kernel (µs)", "solo"}
	for _, r := range with {
		header = append(header, r.Policy+" "+r.Backend+" mean span (× solo)")
	}
	t.Header(header)
	var solo float64
	span := make([]float64, len(with))
	for i, k := range ks {
		solo += k.SoloUs
		row := []string{k.Kernel, fmt.Sprintf("%.1f", k.SoloUs)}
		for n, r := range with {
			m := r.HPKernels[i].MeanUs
			if m == 0 && i > 0 {
				row = append(row, "–") // completed with the kernel before
				continue
			}
			// The span covers this kernel and those after it that
			// completed with it.
			s := r.HPKernels[i].SoloUs
			for j := i + 1; j < len(ks) && r.HPKernels[j].MeanUs == 0; j++ {
				s += r.HPKernels[j].SoloUs
			}
			span[n] += m
			row = append(row, fmt.Sprintf("%.1f (%.2f)", m, m/max(s, 1e-9)))
		}
		if err := t.Append(row); err != nil {
			return err
		}
	}
	row := []string{"pass", fmt.Sprintf("%.1f", solo)}
	for n, r := range with {
		var s float64
		for _, k := range r.HPKernels {
			s += k.SoloUs
		}
		row = append(row, fmt.Sprintf("%.1f (%.2f)", span[n], span[n]/max(s, 1e-9)))
	}
	if err := t.Append(row); err != nil {
		return err
	}
	return t.Render()
}

func causeOrder(rs []*Report) []string {
	for _, r := range rs {
		if len(r.Causes) > 0 {
			var out []string
			for _, c := range r.Causes {
				out = append(out, c.Cause)
			}
			return out
		}
	}
	return nil
}

// StallStat summarises a run's host stalls.
type StallStat struct {
	Count     int     `json:"count"`
	TotalMs   float64 `json:"totalMs"`
	LongestMs float64 `json:"longestMs"`
}

// HostSplit is the driver's host time per launch by part, in µs, and the
// event queries its polls made per launch (Report.HostPerLaunch).
type HostSplit struct {
	BindUs   float64 `json:"bindUs"`
	LaunchUs float64 `json:"launchUs"`
	RecordUs float64 `json:"recordUs"`
	PollUs   float64 `json:"pollUs"`
	Queries  float64 `json:"queries"`
	// DecideUs is the rest of the driver's time in its rounds per launch:
	// the core's and the policy's decisions, attribution, bookkeeping
	// (sched.HostTime.Round less the launches' and polls' parts).
	DecideUs float64 `json:"decideUs"`
	// ArriveStepUs is the mean host time of the core's step on an HP
	// arrival (its decisions, which precede the request's launch),
	// OtherStepUs that of its other steps (completions and the rest), and
	// Steps the steps per launch: the part of DecideUs that delays a
	// request's launch and the part that follows its kernels.
	ArriveStepUs float64 `json:"arriveStepUs,omitempty"`
	OtherStepUs  float64 `json:"otherStepUs,omitempty"`
	Steps        float64 `json:"steps,omitempty"`
	// BusyShare is the share of the run's wall time the driver's thread
	// spent in its rounds rather than waiting for the device.
	BusyShare float64 `json:"busyShare"`
	// GraphBuildMs is the run's time spent recording HP graphs and BE
	// chunk graphs, in ms (not per launch), before the run starts.
	GraphBuildMs float64 `json:"graphBuildMs,omitempty"`
	// SlowLaunches are the run's device launch calls that took
	// sched.SlowLaunch or more (a full launch queue blocks the call), and
	// SlowLaunchMs their time in ms (not per launch).
	SlowLaunches int     `json:"slowLaunches,omitempty"`
	SlowLaunchMs float64 `json:"slowLaunchMs,omitempty"`
}
