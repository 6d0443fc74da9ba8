package main

import (
	"context"
	"fmt"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"atoll/profiles"
)

const modelsHelp = `
Usage: atoll models

Lists the profiles atoll can use: for each GPU, model, batch size and phase,
how many kernels one request (or training step) launches, their summed solo
duration, where the numbers came from (estimated by roofline, or measured on
a GPU), and where the profile lives: built into atoll, or in the profile
store that 'atoll profile' writes to (which takes precedence). Use these
names with --hp and --be.
`

func init() {
	register(command{name: "models", summary: "list the model zoo's profiles (use the names with --hp/--be)", run: runModels})
}

func runModels(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "models", modelsHelp)
	if err := parse(fs, args); err != nil {
		return err
	}
	t := tablewriter.NewTable(e.stdout, tablewriter.WithRenderer(renderer.NewBlueprint()), tablewriter.WithHeaderAutoFormat(tw.Off))
	t.Header([]string{"gpu", "model", "batch", "phase", "kernels", "solo ms", "source", "where"})
	for _, en := range profiles.List() {
		p, err := profiles.Lookup(en.GPU, en.Model, en.Batch, en.Phase)
		if err != nil {
			return err
		}
		where := "built in"
		if en.Stored {
			where = "store"
		}
		if err := t.Append([]string{en.GPU, en.Model, fmt.Sprint(en.Batch), en.Phase, fmt.Sprint(len(p.Kernels)),
			fmt.Sprintf("%.3f", float64(p.Total().Microseconds())/1000), p.Source, where}); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "profile store: %s (set %s to move it)\n", profileStoreText(), profiles.StoreEnv)
	return nil
}

func profileStoreText() string {
	if d := profiles.StoreDir(); d != "" {
		return d
	}
	return "none"
}
