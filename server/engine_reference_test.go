package server

import (
	"errors"
	"testing"
)

// TestRefWorkerSkipsAbandoned: CPU output work whose request has already
// returned (its client gone) is not computed — a worker closes it with
// errAbandoned — while live work is; so clients that give up cannot pile
// CPU work past max_queue (a closing daemon once waited out 15 s of it).
func TestRefWorkerSkipsAbandoned(t *testing.T) {
	e := &engineImpl{refQ: make(chan *engRef, 2)}
	gone := &engRef{call: &engCall{}, done: make(chan struct{})} // no model: computing it would fail differently
	gone.abandoned.Store(true)
	live := &engRef{call: &engCall{m: &engModel{}}, done: make(chan struct{})}
	e.refQ <- gone
	e.refQ <- live
	close(e.refQ)
	e.workers.Add(1)
	e.refWorker()
	<-gone.done
	<-live.done
	if !errors.Is(gone.err, errAbandoned) || gone.out != nil {
		t.Errorf("abandoned work: err %v, out %d values; want errAbandoned and nothing computed", gone.err, len(gone.out))
	}
	if errors.Is(live.err, errAbandoned) {
		t.Errorf("live work was skipped: %v", live.err)
	}
}
