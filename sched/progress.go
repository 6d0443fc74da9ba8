package sched

import (
	"sync"
	"time"
)

// BEProgress is a BE run as the loop publishes it: Online.StartBE returns
// it, the loop updates it, and any goroutine may read it. The scheduler
// never calls into its owner to report progress; the owner reads.
type BEProgress struct {
	id    uint64
	ended chan struct{}
	mu    sync.Mutex
	st    BEStatus
}

// BEStatus is a BE run's state at one moment.
type BEStatus struct {
	// Started: the run's first iteration began (its client was idle and
	// Setup succeeded); StartedAt is the wall-clock time it did.
	Started   bool
	StartedAt time.Time
	// Done counts the iterations completed; Last is the latest one's
	// record (device-clock times).
	Done int
	Last IterationRecord
	// Ended: the run is over and nothing of it is in flight; EndedAt is
	// the wall-clock time it ended. Err is then nil when every iteration
	// ran, and otherwise wraps ErrCancelled (StopBE), ErrStopped
	// (shutdown), ErrStuck, ErrDevice or Setup's error.
	Ended   bool
	EndedAt time.Time
	Err     error
}

func newBEProgress(id uint64) *BEProgress {
	return &BEProgress{id: id, ended: make(chan struct{})}
}

// ID is the run's id, for Online.StopBE.
func (p *BEProgress) ID() uint64 { return p.id }

// Status is the run's state now.
func (p *BEProgress) Status() BEStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st
}

// Ended is closed when the run has ended (Status().Ended).
func (p *BEProgress) Ended() <-chan struct{} { return p.ended }

func (p *BEProgress) start() {
	p.mu.Lock()
	p.st.Started, p.st.StartedAt = true, time.Now()
	p.mu.Unlock()
}

func (p *BEProgress) iterated(done int, it IterationRecord) {
	p.mu.Lock()
	p.st.Done, p.st.Last = done, it
	p.mu.Unlock()
}

// end records the run's end once; later calls change nothing.
func (p *BEProgress) end(done int, err error) {
	p.mu.Lock()
	if p.st.Ended {
		p.mu.Unlock()
		return
	}
	p.st.Done, p.st.Ended, p.st.EndedAt, p.st.Err = done, true, time.Now(), err
	p.mu.Unlock()
	close(p.ended)
}
