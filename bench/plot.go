package bench

import (
	"fmt"
	"io"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// PlotCDF draws the HP latency CDF of each report, plus HP alone
// (dedicated) from the first report, as format "svg", "png" or "pdf". The
// y axis is the percentile on a tail-stretching scale (−log10(1 − p)), so
// p50, p90, p99 and p99.9 are evenly spaced and the tail is readable.
func PlotCDF(w io.Writer, rs []*Report, format string) error {
	if len(rs) == 0 {
		return fmt.Errorf("%w: nothing to plot", ErrReport)
	}
	format = strings.ToLower(format)
	switch format {
	case "svg", "png", "pdf":
	default:
		return fmt.Errorf("%w: unknown plot format %q (want svg, png or pdf)", ErrReport, format)
	}
	p := plot.New()
	p.Title.Text = "HP latency CDF — " + rs[0].Workload.HPModel + " beside " + orNone(rs[0].Workload.BEModel)
	p.X.Label.Text = "HP latency (ms, scheduled arrival → completion, log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Label.Text = "percentile"
	p.Y.Tick.Marker = tailTicks{}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())

	add := func(name string, cdf []float64, i int, dashed bool) error {
		if len(cdf) != len(CDFPercents) {
			return nil // a report without a CDF: skip rather than draw a lie
		}
		pts := make(plotter.XYs, 0, len(cdf))
		for j, us := range cdf {
			if CDFPercents[j] >= 100 {
				break // the max has no finite tail coordinate
			}
			pts = append(pts, plotter.XY{X: us / 1000, Y: tailY(CDFPercents[j])})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	if err := add("dedicated (HP alone)", rs[0].DedicatedCDF, 0, true); err != nil {
		return err
	}
	for i, r := range rs {
		if r.Policy == "dedicated" {
			continue // the dashed baseline is the same run
		}
		if err := add(r.Policy, r.HPCDF, i+1, false); err != nil {
			return err
		}
	}
	wt, err := p.WriterTo(8*vg.Inch, 5*vg.Inch, format)
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}

func orNone(s string) string {
	if s == "" {
		return "nothing"
	}
	return s
}

// tailY maps a percentile to −log10(1 − p/100): p50 → 0.3, p99 → 2.
func tailY(p float64) float64 {
	return -log10(1 - p/100)
}

type tailTicks struct{}

func (tailTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for _, p := range []float64{50, 90, 99, 99.9} {
		y := tailY(p)
		if y >= min && y <= max {
			ts = append(ts, plot.Tick{Value: y, Label: fmt.Sprintf("p%g", p)})
		}
	}
	return ts
}

func log10(x float64) float64 { return math.Log10(x) }
