package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
)

// --sim-launch-cost takes one duration for every launch or three (own
// kernel, product, convolution), and prints back what it holds.
func TestLaunchCostsFlag(t *testing.T) {
	us := time.Microsecond
	for _, c := range []struct {
		in   string
		want launchCosts
		str  string
	}{
		{"8us", launchCosts{8 * us, 8 * us, 8 * us}, "8µs"},
		{"0", launchCosts{}, "0s"},
		{"8us, 11us,17us", launchCosts{8 * us, 11 * us, 17 * us}, "8µs,11µs,17µs"},
	} {
		var got launchCosts
		if err := got.Set(c.in); err != nil {
			t.Fatalf("Set(%q): %v", c.in, err)
		}
		if got != c.want || got.String() != c.str {
			t.Errorf("Set(%q) = %+v (%s), want %+v (%s)", c.in, got, got.String(), c.want, c.str)
		}
	}
	for _, bad := range []string{"", "8us,11us", "8us,11us,17us,1us", "-1us", "8us,-1us,1us", "fast"} {
		var got launchCosts
		if err := got.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted: %+v", bad, got)
		}
	}
	if d := defaultSimLaunchCost; d.kernel >= d.matmul || d.matmul >= d.conv {
		t.Errorf("defaults %v: a product costs the host more than a kernel, a convolution more than a product (results/hostcost-h200)", d.String())
	}
}

// --sim-notice and --sim-kernel-gap default to the simulated GPU's own
// measured figure, take a duration instead (0 turns the effect off) and
// back "measured", and refuse anything else naming both GPUs' figures.
func TestGPUFigureFlags(t *testing.T) {
	for _, c := range []struct {
		flag         gpuFigure
		h200, others time.Duration
	}{
		{measuredNotice, sim.MeasuredNoticeLatencyH200, sim.MeasuredNoticeLatency},
		{measuredTurn, sim.MeasuredKernelGapH200, sim.MeasuredKernelGap},
	} {
		f := c.flag
		if f.String() != "measured" || f.given() || f.value(gpu.H200.Name) != c.h200 || f.value(gpu.H100SXM.Name) != c.others {
			t.Errorf("default %s: %v on an H200, %v on an H100; want %v and %v", f.String(), f.value(gpu.H200.Name), f.value(gpu.H100SXM.Name), c.h200, c.others)
		}
		if err := f.Set("3us"); err != nil || !f.given() || f.value(gpu.H200.Name) != 3*time.Microsecond || f.String() != "3µs" {
			t.Errorf("Set(3us): %v, %s, given %v", err, f.String(), f.given())
		}
		if err := f.Set("0"); err != nil || f.given() || f.value(gpu.H100SXM.Name) != 0 {
			t.Errorf("Set(0): %v, %v, given %v", err, f.value(gpu.H100SXM.Name), f.given())
		}
		if err := f.Set("measured"); err != nil || f.value(gpu.H200.Name) != c.h200 {
			t.Errorf("Set(measured): %v, %v", err, f.value(gpu.H200.Name))
		}
		for _, bad := range []string{"-1us", "fast", ""} {
			err := f.Set(bad)
			if err == nil || !strings.Contains(err.Error(), c.h200.String()+" on an H200") || !strings.Contains(err.Error(), c.others.String()+" on other GPUs") {
				t.Errorf("Set(%q): %v, want a refusal naming both GPUs' figures", bad, err)
			}
		}
	}
	if sim.MeasuredTurn(gpu.H200.Name) == sim.MeasuredTurn(gpu.H100SXM.Name) {
		t.Errorf("one turn on both GPUs: results/begraphs-h200 measured 0.9 µs, begraphs-h100 1.2 µs")
	}
}

// --sim-graph-yield is on by default (sim.Defaults' GraphYield), off with
// =false, and refuses anything but a boolean.
func TestSimGraphYieldFlag(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f simFlags
	f.register(fs)
	if !f.config(gpu.H200, 1).GraphYield || !sim.Defaults(gpu.H200, 1).GraphYield {
		t.Error("default: graphs yield their speed beside more urgent work, as measured; want GraphYield on")
	}
	if err := fs.Parse([]string{"--sim-graph-yield=false"}); err != nil || f.config(gpu.H200, 1).GraphYield {
		t.Errorf("--sim-graph-yield=false: %v, GraphYield %v", err, f.config(gpu.H200, 1).GraphYield)
	}
	if err := fs.Parse([]string{"--sim-graph-yield"}); err != nil || !f.config(gpu.H200, 1).GraphYield {
		t.Errorf("--sim-graph-yield: %v, GraphYield %v", err, f.config(gpu.H200, 1).GraphYield)
	}
	if err := fs.Parse([]string{"--sim-graph-yield=maybe"}); err == nil {
		t.Error("--sim-graph-yield=maybe accepted")
	}
}
