package server_test

// The engine's limits: queue bound, predicted deadline and queue delay,
// active jobs.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"atoll/server"
)

func TestEngineQueueFull(t *testing.T) {
	leakCheck(t)
	// Paced: each request holds its slot for its simulated service time.
	e := newTestEngine(t, func(c *server.EngineConfig) {
		c.Virtual = false
		c.Models[0].MaxQueue = 1
	})
	req, _ := request(t, tinyResNet(t), modelInfo(t, e, "tiny"), 1)
	n := burst(t, e, req, 32, 0, func(err error) string {
		if errors.Is(err, server.ErrQueueFull) {
			return "full"
		}
		return ""
	})
	if n["full"] == 0 || n["ok"] == 0 {
		t.Errorf("32 concurrent requests with a queue of 1: %d served, %d refused; want both", n["ok"], n["full"])
	}
}

// burst sends n copies of req at once (each with timeout, if positive)
// and counts the outcomes: "ok", or what kind names the error ("" fails
// the test as unexpected).
func burst(t *testing.T, e server.Engine, req *server.InferRequest, n int, timeout time.Duration, kind func(error) string) map[string]int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	out := map[string]int{}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if timeout > 0 {
				ctx, cancel = context.WithTimeout(ctx, timeout)
			}
			defer cancel()
			r := *req
			_, err := e.Infer(ctx, &r)
			k := "ok"
			if err != nil {
				if k = kind(err); k == "" {
					t.Errorf("unexpected: %v", err)
				}
			}
			mu.Lock()
			out[k]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// TestEngineRefusesWhatCannotMeetItsDeadline: once a request's service
// time is known, a request whose predicted completion (the queue ahead ×
// that time) falls after its deadline is refused at once with
// ErrQueueFull, and the ones that are admitted finish in time.
func TestEngineRefusesWhatCannotMeetItsDeadline(t *testing.T) {
	leakCheck(t)
	e := newTestEngine(t, func(c *server.EngineConfig) {
		c.Virtual = false
		c.Models[0].MaxQueue = 64
	})
	req, _ := request(t, tinyResNet(t), modelInfo(t, e, "tiny"), 1)
	// The slowest of three: a busy CI machine must not make the deadline
	// below what the queue ahead can meet.
	var one time.Duration
	for range 3 {
		start := time.Now()
		r0 := *req
		if _, err := e.Infer(context.Background(), &r0); err != nil {
			t.Fatal(err)
		}
		one = max(one, time.Since(start))
	}
	n := burst(t, e, req, 64, 12*one, func(err error) string {
		switch {
		case errors.Is(err, server.ErrQueueFull) && strings.Contains(err.Error(), "deadline"):
			return "predicted"
		case errors.Is(err, context.DeadlineExceeded):
			return "late"
		}
		return ""
	})
	ok, predicted, late := n["ok"], n["predicted"], n["late"]
	t.Logf("one request %v; of 64 at once: %d served, %d refused up front, %d timed out", one, ok, predicted, late)
	if predicted == 0 || ok == 0 || late >= predicted {
		t.Errorf("want some served and the overload refused up front rather than timed out: %d served, %d refused, %d timed out", ok, predicted, late)
	}
}

// TestEngineMaxActiveJobs: jobs beyond max_active_jobs are refused with
// ErrTooManyJobs (429 over HTTP) until one ends.
func TestEngineMaxActiveJobs(t *testing.T) {
	leakCheck(t)
	e := newTestEngine(t, func(c *server.EngineConfig) { c.Virtual = false; c.MaxActiveJobs = 2 })
	var ids []string
	for range 2 {
		st, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, st.ID)
	}
	_, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 1})
	if !errors.Is(err, server.ErrTooManyJobs) || !strings.Contains(err.Error(), "max_active_jobs 2") {
		t.Fatalf("third job: %v, want ErrTooManyJobs naming the limit", err)
	}
	if _, err := e.CancelJob(ids[0]); err != nil {
		t.Fatal(err)
	}
	waitJob(t, e, ids[0], func(s server.JobStatus) bool { return !s.Ended.IsZero() })
	st, err := e.SubmitJob(server.JobSpec{Model: "resnet50-train", Iterations: 1})
	if err != nil {
		t.Fatalf("after a job ended: %v", err)
	}
	for _, id := range []string{ids[1], st.ID} {
		e.CancelJob(id)
	}
}

// TestEngineMaxQueueDelay: without a deadline on the request (HTTP sends
// none), max_queue_delay refuses the overload up front; the requests it
// admits queue no longer than about that.
func TestEngineMaxQueueDelay(t *testing.T) {
	leakCheck(t)
	const maxDelay = 50 * time.Millisecond
	e := newTestEngine(t, func(c *server.EngineConfig) {
		c.Virtual = false
		c.Models[0].MaxQueue = 64
		c.MaxQueueDelay = maxDelay
	})
	req, _ := request(t, tinyResNet(t), modelInfo(t, e, "tiny"), 1)
	r0 := *req
	if _, err := e.Infer(context.Background(), &r0); err != nil { // measures the service time
		t.Fatal(err)
	}
	n := burst(t, e, req, 64, 0, func(err error) string {
		if errors.Is(err, server.ErrQueueFull) && strings.Contains(err.Error(), "over max_queue_delay 50ms") {
			return "refused"
		}
		return ""
	})
	ok, refused := n["ok"], n["refused"]
	t.Logf("of 64 at once, no deadline: %d served, %d refused up front", ok, refused)
	if refused == 0 || ok == 0 {
		t.Errorf("want some served and the rest refused for max_queue_delay: %d served, %d refused", ok, refused)
	}
}
