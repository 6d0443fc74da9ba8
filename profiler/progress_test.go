package profiler

import (
	"strings"
	"testing"
	"time"
)

func TestBarPlain(t *testing.T) {
	var b strings.Builder
	bar := NewBar(&b, false)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bar.now = func() time.Time { return now }
	bar.Update(Progress{Stage: "runs", Done: 0, Total: 100})
	for i := 1; i <= 100; i++ {
		now = now.Add(200 * time.Millisecond) // 20 s in all: a line every 5 s
		bar.Update(Progress{Stage: "runs", Done: i, Total: 100})
	}
	bar.Update(Progress{Stage: "scaling", Done: 1, Total: 3})
	bar.Done()
	out := b.String()
	if strings.ContainsAny(out, "\r\x1b") {
		t.Errorf("control characters in plain output: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	// start, every 5 s (4), the end (100/100 coincides with the 20 s mark), the next stage.
	if len(lines) < 5 || len(lines) > 7 {
		t.Errorf("%d lines:\n%s", len(lines), out)
	}
	if !strings.Contains(out, "runs 100/100 (100%)") || !strings.Contains(lines[len(lines)-1], "scaling 1/3") {
		t.Errorf("output:\n%s", out)
	}
}

func TestBarTerminal(t *testing.T) {
	var b strings.Builder
	bar := NewBar(&b, true)
	for i := 0; i <= 4; i++ {
		bar.Update(Progress{Stage: "runs", Done: i, Total: 4})
	}
	bar.Update(Progress{Stage: "scaling", Done: 1, Total: 2})
	bar.Done()
	out := b.String()
	if n := strings.Count(out, "\n"); n != 2 {
		t.Errorf("%d newlines (want one per stage):\n%q", n, out)
	}
	if strings.Count(out, "\r") != 6 || !strings.Contains(out, "[##############################] 4/4") {
		t.Errorf("%q", out)
	}
}
