package sim

import (
	"context"
	"testing"
	"time"
)

// TestWaitSeesWhatHappenedDuringHostTime: an event that completes while
// the host is busy in a launch call (HostLaunchCost) has not been seen by
// the caller yet, so the next Wait returns at once, as the real GPU's Wait
// does for an event already complete, instead of sleeping to its deadline
// (which held a BE client with two launches in flight to 13 % of its work).
func TestWaitSeesWhatHappenedDuringHostTime(t *testing.T) {
	r := newRig(t, Config{HostLaunchCost: 50 * us})
	d := r.d
	a, b := r.stream(0), r.stream(0)
	ev, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	r.launch(a, plain("short", 1, 32, 10*us)) // done at 4 + 10 µs, during the host's 50 µs
	if err := d.Record(ev, a); err != nil {
		t.Fatal(err)
	}
	r.launch(b, plain("other", 1, 32, 10*us)) // the host is busy until 100 µs
	before := d.Now()
	if err := d.Wait(context.Background(), before+time.Second); err != nil {
		t.Fatal(err)
	}
	if done, _ := d.Query(ev); !done || d.Now() != before {
		t.Errorf("Wait returned at %v (called at %v), event done %v: want at once, the event having completed during the launch", d.Now(), before, done)
	}
	// Seen once: the next Wait sleeps until something new happens.
	if err := d.Wait(context.Background(), d.Now()+time.Second); err != nil {
		t.Fatal(err)
	}
	if d.Now() == before {
		t.Errorf("the second Wait returned at once again")
	}
}
