package cuda

import (
	"testing"
	"time"
)

// Completion times asked in record order never run backwards within a
// stream, even when a rebase steers the clock back between two readings;
// other streams keep their own times, an event answers the same time when
// asked again, and one asked after a later event keeps its reading.
func TestGiveKeepsStreamOrder(t *testing.T) {
	d := &Device{streams: make([]streamRec, 3)}
	a0, a1, a2 := &eventRec{stream: 1, seq: 1}, &eventRec{stream: 1, seq: 2}, &eventRec{stream: 1, seq: 3}
	b1 := &eventRec{stream: 2, seq: 4}
	if got := d.give(a1, 1000); got != 1000 {
		t.Fatalf("first event: %v", got)
	}
	if got := d.give(a2, 900); got != 1000 { // read after a step back of 150: true 1050
		t.Errorf("later event of the same stream timed %v, before its predecessor's 1000", got)
	}
	if got := d.give(b1, 800); got != 800 {
		t.Errorf("another stream's event moved to %v", got)
	}
	if !a2.given || a2.givenAt != 1000 {
		t.Errorf("the answer is not kept: %+v", a2)
	}
	if got := d.give(a0, 400); got != 400 {
		t.Errorf("an earlier event asked last was moved to %v", got)
	}
}

// A rebase corrects the event clock toward the host's by up to maxSteer
// when its anchor was tight, by up to looseSteer when the spin took
// longer (a busy host or GPU), and never past the offset itself.
func TestSteerStep(t *testing.T) {
	us := time.Microsecond
	for _, c := range []struct{ off, span, want time.Duration }{
		{30 * us, 5 * us, 30 * us},
		{-30 * us, 5 * us, -30 * us},
		{900 * us, 5 * us, maxSteer},
		{-900 * us, 20 * us, -maxSteer},
		{900 * us, 150 * us, looseSteer},
		{-900 * us, 150 * us, -looseSteer},
		{10 * us, 150 * us, 10 * us},
	} {
		if got := steerStep(c.off, c.span); got != c.want {
			t.Errorf("steerStep(%v, %v) = %v, want %v", c.off, c.span, got, c.want)
		}
	}
	if looseSteer <= 0 || looseSteer >= maxSteer || tightAnchor >= hostAnchor {
		t.Errorf("looseSteer %v, maxSteer %v, tightAnchor %v, hostAnchor %v: want 0 < loose < max and tight < anchor", looseSteer, maxSteer, tightAnchor, hostAnchor)
	}
}
