package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgpdf"
	"gonum.org/v1/plot/vg/vgsvg"
)

// PlotMatrix draws, per measured cell, each run's HP p99 overhead (with
// its 95 % CI as an error bar) against its BE normalized throughput: atoll's
// policies measured against the pooled dedicated runs, PyTorch's setups
// against PyTorch's HP alone. Down and to the right is better.
func PlotMatrix(w io.Writer, cells []*MatrixCell, format string) error {
	var measured []*MatrixCell
	for _, c := range cells {
		if c.Result.Refused == "" {
			measured = append(measured, c)
		}
	}
	if len(measured) == 0 {
		return fmt.Errorf("%w: no measured cell to plot", ErrReport)
	}
	const cols = 2
	rows := (len(measured) + cols - 1) / cols
	width, height := 11*vg.Inch, vg.Length(rows)*3.6*vg.Inch
	var cv vg.CanvasWriterTo
	switch strings.ToLower(format) {
	case "svg":
		cv = vgsvg.New(width, height)
	case "png":
		cv = vgimg.PngCanvas{Canvas: vgimg.New(width, height)}
	case "pdf":
		cv = vgpdf.New(width, height)
	default:
		return fmt.Errorf("%w: unknown plot format %q (want svg, png or pdf)", ErrReport, format)
	}
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for i, mc := range measured {
		p, err := cellPlot(mc)
		if err != nil {
			return err
		}
		plots[i/cols][i%cols] = p
	}
	dc := draw.New(cv)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j, p := range plots[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	_, err := cv.WriteTo(w)
	return err
}

type point struct {
	name    string
	x, y    float64
	lo, hi  float64
	pytorch bool
}

func cellPlot(mc *MatrixCell) (*plot.Plot, error) {
	c := mc.Result.Cell
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %s + %s, load %.2f", c.Name, c.HP, c.BE, c.Load)
	p.X.Label.Text = "BE normalized throughput"
	p.Y.Label.Text = "HP p99 overhead (%)"
	p.Add(plotter.NewGrid())
	var pts []point
	for _, r := range mc.Reports {
		if strings.HasPrefix(r.Policy, "dedicated") || r.P99Overhead == nil {
			continue
		}
		pt := point{name: r.Policy, y: *r.P99Overhead * 100, lo: math.NaN(), hi: math.NaN()}
		if r.BENormalized != nil {
			pt.x = *r.BENormalized
		}
		if r.P99OverheadCI != nil {
			pt.lo, pt.hi = r.P99OverheadCI.Lo*100, r.P99OverheadCI.Hi*100
		}
		pts = append(pts, pt)
	}
	var alone []float64
	aloneOrdered := false
	for _, t := range mc.Torch {
		if t.Setup == "alone" {
			alone, aloneOrdered, _ = DecodeSeries(t.HPSamples)
		}
	}
	for _, t := range mc.Torch {
		if t.Setup == "alone" || len(alone) == 0 {
			continue
		}
		s, ordered, err := DecodeSeries(t.HPSamples)
		if err != nil || len(s) < 2 {
			continue
		}
		var ci CI
		if ordered && aloneOrdered {
			ci = BlockBootstrapOverhead(s, alone, 0.99, c.Seed)
		}
		ss, sa := slices.Sorted(slices.Values(s)), slices.Sorted(slices.Values(alone))
		if !ordered || !aloneOrdered {
			ci = BootstrapOverhead(ss, sa, 0.99, c.Seed)
		}
		pt := point{name: "PyTorch " + t.Setup, y: (Quantile(ss, 0.99)/Quantile(sa, 0.99) - 1) * 100, lo: ci.Lo * 100, hi: ci.Hi * 100, pytorch: true}
		if t.BEAloneSteps > 0 {
			pt.x = t.BEStepsPerSec / t.BEAloneSteps
		}
		pts = append(pts, pt)
	}
	for i, pt := range pts {
		xy := plotter.XYs{{X: pt.x, Y: pt.y}}
		sc, err := plotter.NewScatter(xy)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle.Color = plotutil.Color(i)
		sc.GlyphStyle.Radius = vg.Points(4)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		if pt.pytorch {
			sc.GlyphStyle.Shape = draw.TriangleGlyph{}
		}
		p.Add(sc)
		p.Legend.Add(pt.name, sc)
		if !math.IsNaN(pt.lo) {
			eb, err := plotter.NewYErrorBars(errPoints{{pt.x, pt.y, pt.y - pt.lo, pt.hi - pt.y}})
			if err != nil {
				return nil, err
			}
			eb.Color = plotutil.Color(i)
			p.Add(eb)
		}
	}
	zero := plotter.NewFunction(func(float64) float64 { return 0 })
	zero.Color = color.Gray{Y: 120}
	zero.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(zero)
	p.X.Min, p.X.Max = 0, math.Max(p.X.Max, 1.05)
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}

// errPoints are (x, y, below, above) error bars.
type errPoints [][4]float64

func (e errPoints) Len() int                        { return len(e) }
func (e errPoints) XY(i int) (float64, float64)     { return e[i][0], e[i][1] }
func (e errPoints) YError(i int) (float64, float64) { return e[i][2], e[i][3] }
