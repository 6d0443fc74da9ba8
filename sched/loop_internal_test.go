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
