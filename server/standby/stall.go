package standby

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// Stalls. On the GPU a kernel fault is not reported at once: on an H200
// 0.4–1.3 s passed from a worker's last HP completion before a BE kernel's
// trap to its first CUDA error, with nothing completed meanwhile
// (docs/daemon.md). A serving worker that holds requests
// and answers none for StallAfter is stalled: until it answers again (a
// false alarm) or fails (the failover), the requests it holds are also sent
// to the standby, and new ones go to the standby only; each request takes
// the first good answer. Inference is idempotent, so a request that runs on
// both costs GPU time, not correctness.

// progress is what a worker did lately.
type progress struct {
	mu       sync.Mutex
	inflight int       // requests sent and not answered
	last     time.Time // its last answer, or when it got work after none
	stalled  chan struct{}
	isStall  bool // stalled is closed
}

// begin notes a request sent to w.
func (w *Worker) begin() {
	p := &w.prog
	p.mu.Lock()
	if p.inflight == 0 {
		p.last = time.Now()
	}
	p.inflight++
	p.mu.Unlock()
}

// end notes the answer to a request sent to w (answered: w gave one; it
// counts as progress).
func (w *Worker) end(answered bool) (recovered bool) {
	p := &w.prog
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight--
	if answered {
		p.last = time.Now()
		if p.isStall {
			p.isStall, p.stalled = false, nil
			return true
		}
	}
	return false
}

// stallCh is closed when w is declared stalled.
func (w *Worker) stallCh() <-chan struct{} {
	p := &w.prog
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
	return p.stalled
}

// stalledNow reports whether w is stalled.
func (w *Worker) stalledNow() bool {
	p := &w.prog
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.isStall
}

// checkStall declares w stalled when it holds requests and answered none
// for after; it reports whether it did so now. declared runs first, before
// any request waiting on the stall can see it.
func (w *Worker) checkStall(now time.Time, after time.Duration, declared func()) bool {
	p := &w.prog
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isStall || p.inflight == 0 || now.Sub(p.last) < after {
		return false
	}
	declared()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
	close(p.stalled)
	p.isStall = true
	return true
}

// readyStandby is the warm standby, nil when there is none.
func (s *Supervisor) readyStandby() *Worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.standby
}

// answer is one send's outcome.
type answer struct {
	resp *http.Response
	err  error
	wk   *Worker
}

func (a answer) good() bool { return a.err == nil && a.resp.StatusCode < 500 }

// refused reports whether a worker refused the request (503).
func (a answer) refused() bool {
	return a.err == nil && a.resp.StatusCode == http.StatusServiceUnavailable
}

// sendHedged sends r to wk, the serving worker, unless it is stalled and a
// standby is ready (then to the standby). When wk stalls while it holds the
// request, the request also goes to the standby, and the first good answer
// wins (the other send is cancelled). It returns the answer to use: a good
// one if any send gave one, else wk's.
func (s *Supervisor) sendHedged(ctx context.Context, wk *Worker, r *http.Request, body *reqBody) answer {
	if wk.stalledNow() {
		if sb := s.readyStandby(); sb != nil {
			s.hedged.Add(1)
			return s.sendTo(ctx, sb, r, body)
		}
	}
	// The serving worker's send ends with the client's request, unless the
	// standby answered first: then it runs on (stop1).
	ctx1, cancel1 := context.WithCancel(context.WithoutCancel(ctx))
	stop1 := context.AfterFunc(ctx, cancel1)
	answers := make(chan answer, 2)
	go func() { answers <- s.sendTo(ctx1, wk, r, body) }()
	var first answer
	select {
	case first = <-answers:
		return s.keep(first, cancel1, nil)
	case <-wk.stallCh():
	case <-ctx.Done():
		cancel1()
		return <-answers
	}
	sb := s.readyStandby()
	if sb == nil {
		return s.keep(<-answers, cancel1, nil)
	}
	s.hedged.Add(1)
	ctx2, cancel2 := context.WithCancel(ctx)
	go func() { answers <- s.sendTo(ctx2, sb, r, body) }()
	first = <-answers
	if first.good() {
		if first.wk == wk {
			return s.keep(first, cancel1, func() { cancel2(); discard(<-answers) })
		}
		// The stalled worker's send runs on: its answer, discarded, is
		// the progress that ends the stall if it was a false alarm.
		stop1()
		return s.keep(first, cancel2, func() { discard(<-answers); cancel1() })
	}
	if first.wk == sb {
		// The standby refused or failed it: forward decides (a
		// takeover's burst is sent again), and the stalled worker's
		// send runs on, as above.
		stop1()
		return s.keep(first, cancel2, func() { discard(<-answers); cancel1() })
	}
	// first is the serving worker's, and bad: the standby's decides,
	// unless it is bad too (then the serving worker's: a failover).
	second := <-answers
	if second.good() {
		discard(first)
		return s.keep(second, cancel2, cancel1)
	}
	discard(second)
	return s.keep(first, cancel1, cancel2)
}

// keep returns a, arranging that its context (cancel) ends once its body
// is closed, and runs other (the losing send's clean-up) in the
// background.
func (s *Supervisor) keep(a answer, cancel context.CancelFunc, other func()) answer {
	if other != nil {
		go other()
	}
	if a.resp == nil {
		cancel()
		return a
	}
	a.resp.Body = &cancelOnClose{ReadCloser: a.resp.Body, cancel: cancel}
	return a
}

// sendTo sends one copy of r to wk, counting it in wk's progress.
func (s *Supervisor) sendTo(ctx context.Context, wk *Worker, r *http.Request, body *reqBody) answer {
	wk.begin()
	resp, err := s.send(ctx, wk, r, body)
	if wk.end(err == nil && resp.StatusCode < 500) {
		s.log.Info("standby: the stalled worker answers again", "worker", wk.Gen)
	}
	return answer{resp: resp, err: err, wk: wk}
}

// discard closes an answer that is not used.
func discard(a answer) {
	if a.resp != nil {
		a.resp.Body.Close()
	}
}

// cancelOnClose ends a send's context once its answer's body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
