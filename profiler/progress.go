package profiler

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Bar shows Measure's progress (MeasureOptions.Progress = bar.Update). On
// a terminal it redraws one line per stage in place ("\r"); elsewhere (a
// log, a pipe, CI) it never writes control characters and prints a plain
// line when a stage starts, at most every Every while it runs, and when
// it ends. A Bar belongs to one goroutine.
type Bar struct {
	w     io.Writer
	tty   bool
	Every time.Duration // plain mode: least time between lines (default 5 s)
	now   func() time.Time
	start time.Time
	stage string
	last  time.Time // plain mode: when the last line was printed
	open  bool      // tty mode: a bar line is being redrawn
}

// NewBar returns a bar writing to w; tty says whether w is a terminal.
func NewBar(w io.Writer, tty bool) *Bar {
	return &Bar{w: w, tty: tty, Every: 5 * time.Second, now: time.Now}
}

const barWidth = 30

// Update shows p.
func (b *Bar) Update(p Progress) {
	now := b.now()
	if b.start.IsZero() {
		b.start = now
	}
	newStage := p.Stage != b.stage
	if newStage && b.open {
		fmt.Fprintln(b.w)
		b.open = false
	}
	b.stage = p.Stage
	frac := 0.0
	if p.Total > 0 {
		frac = min(max(float64(p.Done)/float64(p.Total), 0), 1)
	}
	elapsed := now.Sub(b.start).Round(100 * time.Millisecond)
	if b.tty {
		fill := int(frac * barWidth)
		fmt.Fprintf(b.w, "\r%-8s [%s%s] %d/%d %v\x1b[K", p.Stage, strings.Repeat("#", fill), strings.Repeat(".", barWidth-fill), p.Done, p.Total, elapsed)
		b.open = true
		return
	}
	if newStage || p.Done >= p.Total || now.Sub(b.last) >= b.Every {
		fmt.Fprintf(b.w, "profile: %s %d/%d (%.0f%%) after %v\n", p.Stage, p.Done, p.Total, 100*frac, elapsed)
		b.last = now
	}
}

// Done ends the bar's line on a terminal.
func (b *Bar) Done() {
	if b.open {
		fmt.Fprintln(b.w)
		b.open = false
	}
}
