package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"atoll/gpu"
	"atoll/gpu/cuda"
	"atoll/server"
)

const devicesHelp = `
Usage: atoll devices [--config FILE] [--devices LIST]

Lists the NVIDIA GPUs NVML sees (name, memory, clocks, utilization, power,
temperature; SM count from the CUDA driver) and says which backend atoll
would use: the CUDA driver when it opens GPU 0, the simulated GPU otherwise.
On a machine with no driver it says so and exits 0.

With --config (a daemon config, as atoll serve takes) or --devices, it also
shows where the daemon would place its models: each GPU of devices and the
models with a replica on it (models[].devices), or the placement error.

  atoll devices --config atoll.yaml
  atoll devices --config atoll.yaml --devices 0,1
`

func init() {
	register(command{name: "devices", summary: "list GPUs (NVML) and the backend atoll would use", run: runDevices})
}

func runDevices(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "devices", devicesHelp)
	configFile := fs.String("config", "", "a daemon config `file`: show where its models go")
	devices := fs.String("devices", "", "GPUs the daemon would serve (`0,1` or all), over the config's")
	if err := parse(fs, args); err != nil {
		return err
	}
	inv, err := cuda.Inventory()
	switch {
	case errors.Is(err, gpu.ErrNoDevice):
		fmt.Fprintf(e.stdout, "no GPU: %v\n", err)
	case err != nil:
		return err
	default:
		t := tablewriter.NewTable(e.stdout, tablewriter.WithRenderer(renderer.NewBlueprint()), tablewriter.WithHeaderAutoFormat(tw.Off))
		t.Header([]string{"#", "name", "driver", "SMs", "memory GiB (used/total)", "SM MHz (max)", "mem MHz (max)", "util %", "power W (limit)", "temp °C"})
		for _, d := range inv {
			if err := t.Append([]string{
				fmt.Sprint(d.Index), d.Name, d.Driver, fmt.Sprint(d.SMs),
				fmt.Sprintf("%.1f / %.1f", gib(d.MemoryUsed), gib(d.MemoryTotal)),
				fmt.Sprintf("%d (%d)", d.SMClock, d.SMClockMax),
				fmt.Sprintf("%d (%d)", d.MemClock, d.MemClockMax),
				fmt.Sprint(d.UtilGPU),
				fmt.Sprintf("%.0f (%.0f)", d.PowerDraw, d.PowerLimit),
				fmt.Sprint(d.Temperature),
			}); err != nil {
				return err
			}
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	err = cuda.Run(0, func(d *cuda.Device) error {
		in := d.Info()
		fmt.Fprintf(e.stdout, "backend: cuda — %s, %d SMs, driver %s, stream priorities %d..%d\n",
			in.Name, in.Spec.SMs, in.Driver, in.Priorities.Least, in.Priorities.Greatest)
		return nil
	})
	if errors.Is(err, gpu.ErrNoDevice) {
		fmt.Fprintf(e.stdout, "backend: sim — the simulated GPU (%v)\n", err)
		err = nil
	}
	if err != nil || (*configFile == "" && *devices == "") {
		return err
	}
	cfg := server.DefaultConfig()
	if *configFile != "" {
		f, err := os.Open(*configFile)
		if err != nil {
			return err
		}
		cfg, err = server.ParseConfig(f, *configFile)
		f.Close()
		if err != nil {
			return err
		}
	}
	if *devices != "" {
		cfg.Devices = *devices
	}
	available := 1
	if cfg.Backend == "cuda" {
		available = len(inv)
	}
	plan, err := server.Plan(cfg, available)
	if err != nil {
		return err
	}
	t := tablewriter.NewTable(e.stdout, tablewriter.WithRenderer(renderer.NewBlueprint()), tablewriter.WithHeaderAutoFormat(tw.Off))
	t.Header([]string{"gpu", "models (replicas)", "job models"})
	for _, p := range plan {
		var ms, js []string
		for _, m := range p.Models {
			ms = append(ms, m.Name)
		}
		for _, j := range p.Jobs {
			js = append(js, j.Model)
		}
		if err := t.Append([]string{fmt.Sprint(p.Device), strings.Join(ms, ", "), strings.Join(js, ", ")}); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stdout, "placement (%s backend, devices %q):\n", cfg.Backend, cfg.Devices)
	return t.Render()
}

func gib(b uint64) float64 { return float64(b) / (1 << 30) }
