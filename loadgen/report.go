package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"atoll/bench"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// ReportVersion is the apiVersion of load reports.
const ReportVersion = "atoll/load/v1"

// ClassReport is the measured outcome of one class (or of all requests).
// Every count is of measured requests: scheduled at or after the warm-up.
type ClassReport struct {
	Class    string `json:"class"`
	Priority int    `json:"priority,omitempty"`
	// Scheduled requests in the measured window that came due (an
	// interrupted run leaves later ones out).
	Scheduled int `json:"scheduled"`
	Sent      int `json:"sent"`
	Dropped   int `json:"dropped"` // not sent: generator at its in-flight bound
	OK        int `json:"ok"`
	// Errors counts failed requests by kind: "http-503", "http-400",
	// "timeout", "transport", "bad-response", "cancelled".
	Errors map[string]int `json:"errors"`
	// Latency of successful requests: completion − scheduled send time.
	Latency bench.Latency `json:"latency"`
	// Throughput is successful requests per second of the measured window.
	Throughput float64 `json:"throughputPerSec"`
	// WithinSLO counts successful requests with latency ≤ SLO.
	WithinSLO int `json:"withinSlo,omitempty"`
	// SLOAttainment is WithinSLO / Scheduled (dropped and failed requests
	// count as misses); nil without an SLO or requests.
	SLOAttainment *float64 `json:"sloAttainment"`
	// Goodput is WithinSLO per second of the measured window; nil
	// without an SLO.
	Goodput *float64 `json:"goodputPerSec"`
	// MaxGapUs is the longest time between two successive successful
	// completions, and MaxGapAtSec when (from the run's start) it ended:
	// how long clients saw nothing served (a failover's outage, beside the
	// gaps the arrivals themselves leave).
	MaxGapUs    float64 `json:"maxCompletionGapUs"`
	MaxGapAtSec float64 `json:"maxCompletionGapAtSec"`
}

// Report is a load run's summary.
type Report struct {
	APIVersion    string        `json:"apiVersion"`
	URL           string        `json:"url"`
	Model         string        `json:"model"`
	Arrival       string        `json:"arrival,omitempty"`
	Seed          uint64        `json:"seed"`
	Batch         int           `json:"batch"`
	Data          DataFormat    `json:"data,omitempty"` // binary or json tensor data
	OfferedRate   float64       `json:"offeredPerSec"`  // measured requests / measured window
	SpanSec       float64       `json:"spanSec"`
	WarmupSec     float64       `json:"warmupSec"`
	WindowSec     float64       `json:"windowSec"`
	SLOUs         float64       `json:"sloUs,omitempty"`
	MaxInFlight   int           `json:"maxInFlight"`
	Total         ClassReport   `json:"total"`
	Classes       []ClassReport `json:"classes,omitempty"` // only for a mix
	LateThreshUs  float64       `json:"lateThresholdUs"`
	LateSends     int           `json:"lateSends"` // measured requests sent later than the threshold
	MaxLagUs      float64       `json:"maxSendLagUs"`
	SendLag       bench.Latency `json:"sendLag"` // sent − scheduled, measured requests
	Valid         bool          `json:"valid"`
	Invalid       []string      `json:"invalidBecause,omitempty"`
	Interrupted   bool          `json:"interrupted"`
	WallSec       float64       `json:"wallSec"`
	WarmupSkipped int           `json:"warmupRequests"`
	// ErrorMessages is the daemon's first message for each HTTP error
	// kind ("http-400": why it refused).
	ErrorMessages map[string]string `json:"errorMessages,omitempty"`
}

// Summarize turns a run's records into its report.
func Summarize(res *Result) *Report {
	cfg := res.Config
	window := cfg.Span - cfg.Warmup
	r := &Report{
		APIVersion:   ReportVersion,
		URL:          res.URL,
		Model:        cfg.Model,
		Seed:         cfg.Seed,
		Batch:        cfg.Batch,
		Data:         cfg.Data,
		SpanSec:      cfg.Span.Seconds(),
		WarmupSec:    cfg.Warmup.Seconds(),
		WindowSec:    window.Seconds(),
		SLOUs:        us(cfg.SLO),
		MaxInFlight:  cfg.MaxInFlight,
		LateThreshUs: us(cfg.LateThreshold),
		Interrupted:  res.Interrupted,
		WallSec:      res.Wall.Seconds(),
	}
	var lags []time.Duration
	for _, rec := range res.Records {
		if !rec.Measured {
			if rec.Kind != "" {
				r.WarmupSkipped++
			}
			continue
		}
		if rec.Kind != "" && rec.Kind != KindDropped {
			lags = append(lags, rec.Lag())
			if rec.Lag() > cfg.LateThreshold {
				r.LateSends++
			}
		}
	}
	r.SendLag = bench.Summarize(lags)
	r.MaxLagUs = r.SendLag.Max
	r.Total = classReport(res, -1, window)
	if len(res.Messages) > 0 {
		r.ErrorMessages = res.Messages
	}
	if len(cfg.Classes) > 1 {
		for _, i := range classOrder(cfg.Classes) {
			r.Classes = append(r.Classes, classReport(res, i, window))
		}
	}
	if window > 0 {
		r.OfferedRate = float64(r.Total.Scheduled) / window.Seconds()
	}
	if r.LateSends > 0 {
		r.Invalid = append(r.Invalid, fmt.Sprintf("the generator sent %d requests more than %v late (max %.0fµs): it could not keep the schedule, so the offered load was not what was asked; lower --rate or run it on a less busy machine", r.LateSends, cfg.LateThreshold, r.MaxLagUs))
	}
	if r.Total.Dropped > 0 {
		r.Invalid = append(r.Invalid, fmt.Sprintf("the generator dropped %d requests at its in-flight bound of %d: the daemon fell that far behind (they count as SLO misses); raise --max-inflight to offer the full load", r.Total.Dropped, cfg.MaxInFlight))
	}
	if res.Interrupted {
		r.Invalid = append(r.Invalid, "the run was interrupted before the schedule ended")
	}
	r.Valid = len(r.Invalid) == 0
	return r
}

func classReport(res *Result, class int, window time.Duration) ClassReport {
	cfg := res.Config
	cr := ClassReport{Class: "all", Errors: map[string]int{}}
	if class >= 0 {
		cr.Class, cr.Priority = cfg.Classes[class].Name, cfg.Classes[class].Priority
	} else if len(cfg.Classes) == 1 {
		cr.Priority = cfg.Classes[0].Priority
	}
	var lat, done []time.Duration
	for _, rec := range res.Records {
		if !rec.Measured || rec.Kind == "" || (class >= 0 && rec.Class != class) {
			continue
		}
		cr.Scheduled++
		switch rec.Kind {
		case KindDropped:
			cr.Dropped++
		case KindOK:
			cr.Sent++
			cr.OK++
			lat = append(lat, rec.Latency())
			done = append(done, rec.Done)
			if cfg.SLO > 0 && rec.Latency() <= cfg.SLO {
				cr.WithinSLO++
			}
		default:
			cr.Sent++
			cr.Errors[rec.Kind]++
		}
	}
	cr.Latency = bench.Summarize(lat)
	slices.Sort(done)
	for i := 1; i < len(done); i++ {
		if gap := done[i] - done[i-1]; us(gap) > cr.MaxGapUs {
			cr.MaxGapUs, cr.MaxGapAtSec = us(gap), done[i].Seconds()
		}
	}
	if window > 0 {
		cr.Throughput = float64(cr.OK) / window.Seconds()
	}
	if cfg.SLO > 0 {
		if cr.Scheduled > 0 {
			a := float64(cr.WithinSLO) / float64(cr.Scheduled)
			cr.SLOAttainment = &a
		}
		if window > 0 {
			g := float64(cr.WithinSLO) / window.Seconds()
			cr.Goodput = &g
		}
	}
	return cr
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Table writes the report as a table, one row per class and a total, then
// the run's validity.
func Table(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "%s model %s: %.1f req/s offered over %.1fs measured (%.1fs warm-up, %d warm-up requests excluded), max in-flight %d\n",
		r.URL, r.Model, r.OfferedRate, r.WindowSec, r.WarmupSec, r.WarmupSkipped, r.MaxInFlight)
	t := tablewriter.NewTable(w,
		tablewriter.WithRenderer(renderer.NewBlueprint()),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAlignment(tw.AlignRight),
	)
	slo := "SLO"
	if r.SLOUs > 0 {
		slo = fmt.Sprintf("≤%s", fmtMs(r.SLOUs))
	}
	t.Header([]string{"class", "prio", "sched", "ok", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "ok/s", slo, "goodput/s", "dropped", "errors"})
	rows := append(append([]ClassReport(nil), r.Classes...), r.Total)
	for _, c := range rows {
		prio := "-"
		if c.Priority > 0 {
			prio = fmt.Sprint(c.Priority)
		}
		lat := func(v float64) string {
			if c.Latency.Count == 0 {
				return "-"
			}
			return fmt.Sprintf("%.3f", v/1000)
		}
		row := []string{
			c.Class, prio, fmt.Sprint(c.Scheduled), fmt.Sprint(c.OK),
			lat(c.Latency.P50), lat(c.Latency.P95), lat(c.Latency.P99), lat(c.Latency.P999),
			fmt.Sprintf("%.1f", c.Throughput), frac(c.SLOAttainment), opt(c.Goodput, "%.1f"),
			fmt.Sprint(c.Dropped), errorList(c.Errors),
		}
		if err := t.Append(row); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	kinds := make([]string, 0, len(r.ErrorMessages))
	for k := range r.ErrorMessages {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "%s: %s\n", k, r.ErrorMessages[k])
	}
	fmt.Fprintf(w, "longest gap between completions: %.1fms (ending %.2fs into the run)\n", r.Total.MaxGapUs/1000, r.Total.MaxGapAtSec)
	fmt.Fprintf(w, "send lag (sent − scheduled): p50 %.0fµs p99 %.0fµs max %.0fµs; %d sends later than %v\n",
		r.SendLag.P50, r.SendLag.P99, r.SendLag.Max, r.LateSends, time.Duration(r.LateThreshUs*float64(time.Microsecond)))
	if r.Valid {
		fmt.Fprintln(w, "VALID: every measured request was sent on schedule.")
		return nil
	}
	fmt.Fprintln(w, "INVALID RUN:")
	for _, s := range r.Invalid {
		fmt.Fprintf(w, "  - %s\n", s)
	}
	return nil
}

func fmtMs(us float64) string { return fmt.Sprintf("%gms", us/1000) }

func frac(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", *v*100)
}

func opt(v *float64, f string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(f, *v)
}

func errorList(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
