package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"atoll/server"
)

// TestJobsCommand drives a real engine on the simulator through the jobs
// CLI: submit, watch to the end, list, cancel errors, bad input.
func TestJobsCommand(t *testing.T) {
	eng, err := server.NewEngine(context.Background(), server.EngineConfig{
		Virtual: true, Seed: 1, Workers: 1,
		Models: []server.EngineModel{{Name: "mobilenetv2", Zoo: "mobilenetv2", Batch: 1}},
		Jobs:   []server.EngineJobModel{{Zoo: "vgg19", Batch: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.ShutdownTimeout = 5 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, cfg, eng, server.WithListener(ln), server.WithLogger(slog.New(slog.DiscardHandler)))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}()
	url := "http://" + ln.Addr().String()
	jobs := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := runJobs(context.Background(), &env{stdout: &out, stderr: &errb}, append(args, "--url", url))
		return out.String() + errb.String(), err
	}

	out, err := jobs("submit", "--model", "vgg19", "--batch", "1", "--iterations", "20")
	if err != nil || !strings.Contains(out, "job-1") || !strings.Contains(out, "vgg19") {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	out, err = jobs("show", "job-1", "--watch")
	if err != nil || !strings.Contains(out, "done") || !strings.Contains(out, "20/20") {
		t.Fatalf("show --watch: %v\n%s", err, out)
	}
	if out, err = jobs("list"); err != nil || !strings.Contains(out, "job-1") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if out, err = jobs("list", "--json"); err != nil || !strings.Contains(out, `"iterationsDone": 20`) {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	// Errors carry the daemon's message.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cancel", "job-1"}, "409"},
		{[]string{"show", "job-9"}, "404"},
		{[]string{"submit", "--model", "resnet152", "--iterations", "3"}, "resnet152"},
		{[]string{"submit", "--model", "vgg19"}, "--iterations > 0"},
		{[]string{"show"}, "one job ID"},
		{[]string{"frob"}, `unknown jobs verb "frob"`},
	} {
		if _, err := jobs(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("jobs %v: err = %v, want %q", c.args, err, c.want)
		}
	}
}

func TestJobsCommandNoDaemon(t *testing.T) {
	var out bytes.Buffer
	e := &env{stdout: &out, stderr: &out}
	err := runJobs(context.Background(), e, []string{"list", "--url", "http://127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "is 'atoll serve' running") {
		t.Fatalf("err = %v", err)
	}
	if err := runJobs(context.Background(), e, []string{"list", "--url", "ftp://x"}); err == nil || !strings.Contains(err.Error(), "not an http(s) address") {
		t.Fatalf("bad url: %v", err)
	}
}
