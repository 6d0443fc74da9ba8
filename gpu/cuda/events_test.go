package cuda

import "testing"

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
