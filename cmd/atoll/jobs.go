package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"atoll/server"
)

const jobsHelp = `
Usage: atoll jobs <submit|list|show|cancel> [flags] [ID]

Manages best-effort (BE) jobs on a running 'atoll serve': a job runs N
iterations of a model (a training step, or closed-loop batch inference)
on what the latency-critical requests leave of the GPU. The daemon must
allow the model with --job (or the config's jobs: section).

  atoll jobs submit --model resnet50-train --iterations 1000   # at the configured batch
  atoll jobs submit --model resnet50-train --iterations 1000 --resume   # outlives a device failure
  atoll jobs list
  atoll jobs show job-1 --watch      # progress until the job ends
  atoll jobs cancel job-1
`

func init() {
	register(command{name: "jobs", summary: "submit, list, inspect and cancel BE jobs on a running daemon", run: runJobs})
}

func runJobs(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "jobs", jobsHelp)
	base := fs.String("url", "http://127.0.0.1:8000", "the daemon's address")
	model := fs.String("model", "", "submit: the model the job runs (a zoo name the daemon allows)")
	batch := fs.Int("batch", 0, "submit: batch size (one the daemon allows for the model; 0: the one it is configured with)")
	resume := fs.Bool("resume", false, "submit: when the device fails under the job, run its remaining iterations once the daemon serves again (a reopened device, or --standby's next worker) instead of ending failed")
	iters := fs.Int("iterations", 0, "submit: iterations to run (> 0)")
	watch := fs.Bool("watch", false, "show: print progress until the job ends")
	asJSON := fs.Bool("json", false, "print the daemon's JSON instead of a table")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if err := parse(fs, args); err != nil {
			return err
		}
		fs.Usage()
		return errUsage
	}
	verb := args[0]
	// Flags may come after the job ID ("show job-1 --watch"): parse, take
	// the positional argument, parse the rest again.
	var pos []string
	for rest := args[1:]; ; {
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	c, err := newJobsClient(*base)
	if err != nil {
		return err
	}
	switch verb {
	case "submit":
		if *model == "" || *iters <= 0 {
			return fmt.Errorf("submit needs --model and --iterations > 0")
		}
		var st server.JobStatus
		if err := c.do(ctx, http.MethodPost, "/v2/jobs", server.JobSpec{Model: *model, Batch: *batch, Iterations: *iters, Resume: *resume}, &st); err != nil {
			return err
		}
		return printJobs(e, *asJSON, st)
	case "list":
		var resp struct {
			Jobs []server.JobStatus `json:"jobs"`
		}
		if err := c.do(ctx, http.MethodGet, "/v2/jobs", nil, &resp); err != nil {
			return err
		}
		return printJobs(e, *asJSON, resp.Jobs...)
	case "show", "cancel":
		if len(pos) != 1 {
			return fmt.Errorf("%s needs one job ID (see 'atoll jobs list')", verb)
		}
		path := "/v2/jobs/" + url.PathEscape(pos[0])
		method := http.MethodGet
		if verb == "cancel" {
			method = http.MethodDelete
		}
		for {
			var st server.JobStatus
			if err := c.do(ctx, method, path, nil, &st); err != nil {
				return err
			}
			if err := printJobs(e, *asJSON, st); err != nil {
				return err
			}
			if verb == "cancel" || !*watch || jobEnded(st.State) {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	return fmt.Errorf("unknown jobs verb %q (want submit, list, show or cancel)", verb)
}

func jobEnded(state string) bool {
	return state == server.JobDone || state == server.JobCancelled || state == server.JobFailed
}

type jobsClient struct {
	base string
	hc   *http.Client
}

func newJobsClient(base string) (*jobsClient, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--url %q is not an http(s) address like http://127.0.0.1:8000", base)
	}
	return &jobsClient{base: strings.TrimRight(base, "/"), hc: &http.Client{Timeout: 30 * time.Second}}, nil
}

// do sends one request; a non-2xx answer becomes an error carrying the
// daemon's own message.
func (c *jobsClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("is 'atoll serve' running at %s? %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var oe struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &oe) == nil && oe.Error != "" {
			return fmt.Errorf("%s %s: %s (HTTP %d)", method, path, oe.Error, resp.StatusCode)
		}
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(data))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not a job: %w", method, path, err)
	}
	return nil
}

func printJobs(e *env, asJSON bool, jobs ...server.JobStatus) error {
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if len(jobs) == 1 {
			return enc.Encode(jobs[0])
		}
		return enc.Encode(jobs)
	}
	t := tablewriter.NewTable(e.stdout, tablewriter.WithRenderer(renderer.NewBlueprint()), tablewriter.WithHeaderAutoFormat(tw.Off))
	t.Header([]string{"id", "model", "batch", "state", "done", "iterations/s", "error"})
	for _, j := range jobs {
		state := j.State
		if j.Resumed > 0 {
			state += fmt.Sprintf(" (resumed %d×)", j.Resumed)
		}
		if err := t.Append([]string{j.ID, j.Spec.Model, fmt.Sprint(j.Spec.Batch), state,
			fmt.Sprintf("%d/%d", j.Done, j.Spec.Iterations), fmt.Sprintf("%.1f", j.Throughput), j.Error}); err != nil {
			return err
		}
	}
	return t.Render()
}
