// Command soakplot draws a soak's samples (tools/gpu/soak-churn.sh's
// samples.txt: phase, unix seconds, goroutines, RSS bytes, GPU memory in
// use bytes, requests answered 200) as three stacked panels against
// minutes into the soak, one SVG:
//
//	go run ./tools/soakplot results/soak-h200/samples.txt results/soak-h200/soak.svg
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: soakplot SAMPLES.txt OUT.svg")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "soakplot:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	var series [3]plotter.XYs
	t0 := -1.0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 || strings.HasPrefix(fs[0], "#") {
			continue
		}
		if len(fs) != 6 {
			return fmt.Errorf("%s:%d: %d fields, want 6 (phase unix_s goroutines rss_bytes gpu_mem_used_bytes requests_ok)", in, n, len(fs))
		}
		var v [4]float64
		for i := range v {
			if v[i], err = strconv.ParseFloat(fs[i+1], 64); err != nil {
				return fmt.Errorf("%s:%d: field %d: %w", in, n, i+2, err)
			}
		}
		if t0 < 0 {
			t0 = v[0]
		}
		x := (v[0] - t0) / 60
		series[0] = append(series[0], plotter.XY{X: x, Y: v[1]})
		series[1] = append(series[1], plotter.XY{X: x, Y: v[2] / 1e6})
		series[2] = append(series[2], plotter.XY{X: x, Y: v[3] / 1e9})
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(series[0]) < 2 {
		return fmt.Errorf("%s: %d samples, need at least 2", in, len(series[0]))
	}
	labels := []string{"goroutines", "daemon RSS (MB)", "GPU memory in use (GB)"}
	plots := make([][]*plot.Plot, len(labels))
	for i, l := range labels {
		p := plot.New()
		p.Y.Label.Text = l
		p.Y.Min = 0
		if i == len(labels)-1 {
			p.X.Label.Text = "minutes since the first sample"
		}
		if i == 0 {
			p.Title.Text = "soak: " + in
		}
		p.Add(plotter.NewGrid())
		line, points, err := plotter.NewLinePoints(series[i])
		if err != nil {
			return err
		}
		p.Add(line, points)
		plots[i] = []*plot.Plot{p}
	}
	c := vgsvg.New(8*vg.Inch, 7*vg.Inch)
	tiles := draw.Tiles{Rows: len(labels), Cols: 1, PadY: vg.Points(8), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align(plots, tiles, draw.New(c))
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(w); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
