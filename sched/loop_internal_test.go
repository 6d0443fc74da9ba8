package sched

import (
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
)

// hpDue sees a timeline arrival whose time has come and, under Online, a
// submission that woke the loop; BE refills stop for either.
func TestHPDue(t *testing.T) {
	dev, err := sim.New(sim.Config{Spec: gpu.H100SXM})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	l := &loop{d: &driver{dev: dev}}
	if l.hpDue() {
		t.Error("an empty timeline has an HP arrival due")
	}
	l.timeline = []Event{{Kind: EvReady, Time: 0}, {Kind: EvArrive, Time: time.Hour}}
	if l.hpDue() {
		t.Error("a BE start counts as an HP arrival")
	}
	l.next = 1
	if l.hpDue() {
		t.Error("an arrival an hour ahead is due")
	}
	l.timeline[1].Time = dev.Now()
	if !l.hpDue() {
		t.Error("an arrival due now is not due")
	}
	o := &Online{notify: make(chan struct{}, 1)}
	l = &loop{d: &driver{dev: dev}, o: o}
	if l.hpDue() {
		t.Error("Online with nothing submitted has an HP request due")
	}
	o.wake()
	if !l.hpDue() {
		t.Error("a submission that woke the loop is not due")
	}
}

// Online serves for ever: its driver keeps no spans of BE's empty stream
// (newLoop sets keepSpans only for Run).
func TestBEEmptySpansOnlyForRun(t *testing.T) {
	dev, err := sim.New(sim.Config{Spec: gpu.H100SXM})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, online := range []bool{false, true} {
		d := &driver{dev: dev, core: &Core{}, trace: &Trace{BEEmpty: make([][]Span, 1)}, beEmptyFrom: []time.Duration{-1}}
		var o *Online
		if online {
			o = &Online{}
		}
		newLoop(d, o)
		d.beEmpty(0, time.Microsecond, 3*time.Microsecond)
		if got, want := len(d.trace.BEEmpty[0]), map[bool]int{false: 1, true: 0}[online]; got != want {
			t.Errorf("online %v: %d spans kept, want %d", online, got, want)
		}
	}
}
