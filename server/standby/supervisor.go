package standby

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Supervisor. The zero value of each field is its
// default.
type Options struct {
	// Start starts worker processes (Exec, or in-process daemons in tests).
	Start StartFunc
	// Logger receives the supervisor's lines (default slog.Default()).
	Logger *slog.Logger
	// ReadyTimeout bounds a worker's start-up, kernel compiles included
	// (default 10 minutes: a fresh GPU machine compiles for about 95 s).
	ReadyTimeout time.Duration
	// BodyLimit is the largest request body the supervisor takes (413
	// above; default 64 MiB). It keeps each body whole while it streams it
	// to the worker, so that the request can be sent again.
	BodyLimit int64
	// RequestTimeout bounds one request through the supervisor, the wait
	// for a worker and resends included (default 60 s).
	RequestTimeout time.Duration
	// MaxInflight bounds the requests the supervisor forwards at once (503
	// with Retry-After beyond it, before the body is read; default 1024).
	MaxInflight int
	// StartRetries is how many times in a row a worker may fail to start
	// before the supervisor gives up (liveness then fails; default 3).
	StartRetries int
	// StallAfter: a serving worker that holds requests and answers none
	// for this long is stalled, and its requests go to the standby too
	// (stall.go; default 100 ms).
	StallAfter time.Duration
}

// Supervisor forwards the HTTP API to its serving worker and keeps a warm
// standby to take over (package doc). Create it with New, start it with
// Start, stop it with Close.
type Supervisor struct {
	opt Options
	log *slog.Logger

	mu       sync.Mutex
	active   *Worker
	standby  *Worker
	changed  chan struct{} // closed and replaced whenever active changes
	gen      int
	starting bool  // a worker is being started
	gaveUp   error // workers failed to start StartRetries times in a row
	closed   bool
	outageAt time.Time // the last failover, until the new worker answers

	jobs   jobTable
	slots  chan struct{}
	wg     sync.WaitGroup // background work: watchers, starts, takeovers
	ctx    context.Context
	cancel context.CancelFunc

	failovers atomic.Uint64
	resent    atomic.Uint64
	hedged    atomic.Uint64 // sends to the standby while the serving worker stalled
	overflow  atomic.Uint64 // requests the serving worker refused (503), sent to the standby
	burst     atomic.Uint64 // refusals during a takeover, sent again
	// takeoverAt is the last stall or failover (unix ns; 0: none yet).
	takeoverAt atomic.Int64
	stalls     atomic.Uint64
	lastGap    atomic.Int64 // ns from the last failover to the next answer
}

// New makes a supervisor; nothing starts before Start.
func New(opt Options) *Supervisor {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.ReadyTimeout <= 0 {
		opt.ReadyTimeout = 10 * time.Minute
	}
	if opt.BodyLimit <= 0 {
		opt.BodyLimit = 64 << 20
	}
	if opt.RequestTimeout <= 0 {
		opt.RequestTimeout = 60 * time.Second
	}
	if opt.MaxInflight <= 0 {
		opt.MaxInflight = 1024
	}
	if opt.StartRetries <= 0 {
		opt.StartRetries = 3
	}
	if opt.StallAfter <= 0 {
		opt.StallAfter = 100 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Supervisor{
		opt: opt, log: opt.Logger, changed: make(chan struct{}),
		slots: make(chan struct{}, opt.MaxInflight), ctx: ctx, cancel: cancel,
		jobs: jobTable{byID: map[string]*jobRecord{}},
	}
}

// Start starts the first worker and returns once it serves (or failed to
// start); the standby starts behind it, once the first has filled the
// kernel cache.
func (s *Supervisor) Start(ctx context.Context) error {
	w, err := s.startWorker(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.promote(w)
	s.mu.Unlock()
	s.log.Info("standby: worker serving", "worker", w.Gen)
	s.startStandby()
	return nil
}

// startWorker starts the next worker and waits until it is ready; a worker
// that fails is killed.
func (s *Supervisor) startWorker(ctx context.Context) (*Worker, error) {
	s.mu.Lock()
	s.gen++
	gen := s.gen
	s.mu.Unlock()
	w, err := s.opt.Start(ctx, gen)
	if err != nil {
		return nil, err
	}
	if err := w.awaitReady(ctx, s.opt.ReadyTimeout); err != nil {
		w.Kill()
		return nil, err
	}
	return w, nil
}

// startStandby starts a standby in the background unless one runs or is
// starting. Once ready it waits, or serves at once if the serving worker
// has failed meanwhile.
func (s *Supervisor) startStandby() {
	s.mu.Lock()
	if s.closed || s.starting || s.standby != nil || s.gaveUp != nil {
		s.mu.Unlock()
		return
	}
	s.starting = true
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		var failures []error
		for {
			w, err := s.startWorker(s.ctx)
			s.mu.Lock()
			if err == nil && s.closed {
				s.mu.Unlock()
				w.Kill()
				return
			}
			if err == nil {
				s.starting = false
				if s.active == nil {
					s.promote(w)
					s.log.Warn("standby: a new worker serves (there was no standby when the last one failed)", "worker", w.Gen)
				} else {
					s.standby = w
					s.log.Info("standby: warm standby ready", "worker", w.Gen)
					s.wg.Add(1)
					go s.watchStandby(w)
				}
				s.mu.Unlock()
				return
			}
			failures = append(failures, err)
			if s.closed || len(failures) >= s.opt.StartRetries {
				if !s.closed {
					s.gaveUp = fmt.Errorf("standby: %d workers in a row failed to start: %w", len(failures), errors.Join(failures...))
					s.log.Error("standby: giving up starting workers; liveness now fails", "err", s.gaveUp)
				}
				s.starting = false
				s.notify()
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			s.log.Error("standby: a worker failed to start; starting another", "err", err)
		}
	}()
}

// promote makes w the serving worker and watches it. s.mu is held.
func (s *Supervisor) promote(w *Worker) {
	s.active = w
	s.notify()
	s.wg.Add(1)
	go s.watch(w)
}

// notify wakes the requests waiting for a serving worker (serving). s.mu is
// held.
func (s *Supervisor) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// watch checks the serving worker for a stall every 10 ms and its liveness
// every 100 ms, so that a failure is taken over even when no request finds
// it.
func (s *Supervisor) watch(w *Worker) {
	defer s.wg.Done()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-s.ctx.Done():
			return
		case <-w.Exited:
		case now := <-tick.C:
			// The takeover starts before the stall shows: a request hedged
			// to the standby and refused must find it (again).
			if w.checkStall(now, s.opt.StallAfter, func() { s.takeoverAt.Store(now.UnixNano()) }) {
				s.stalls.Add(1)
				s.log.Warn("standby: the serving worker holds requests and answered none; they go to the standby too until it answers or fails", "worker", w.Gen, "after", s.opt.StallAfter)
			}
			if n%10 != 0 {
				continue
			}
		}
		s.mu.Lock()
		serving := s.active == w
		s.mu.Unlock()
		if !serving {
			return
		}
		if why := s.failed(s.ctx, w); why != "" {
			s.failover(w, why)
			return
		}
	}
}

// watchStandby replaces the standby w if its process exits while it waits
// (its device, or the machine, failed under it), so that a failover never
// promotes a dead worker.
func (s *Supervisor) watchStandby(w *Worker) {
	defer s.wg.Done()
	select {
	case <-s.ctx.Done():
		return
	case <-w.Exited:
	}
	s.mu.Lock()
	waiting := s.standby == w
	if waiting {
		s.standby = nil
	}
	s.mu.Unlock()
	if waiting {
		s.log.Error("standby: the warm standby exited; starting another", "worker", w.Gen)
		s.startStandby()
	}
}

// failed says why w can no longer serve ("" while it can): it exited, its
// liveness fails (its device failed), or it cannot be reached.
func (s *Supervisor) failed(ctx context.Context, w *Worker) string {
	if w.exited() {
		return "its process exited"
	}
	code, body, err := w.get(ctx, "/v2/health/live", 2*time.Second)
	switch {
	case ctx.Err() != nil:
		return ""
	case err != nil && w.exited():
		return "its process exited"
	case err != nil:
		return "it does not answer: " + err.Error()
	case code != http.StatusOK:
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		return "it is no longer live: " + e.Error
	}
	return ""
}

// failover replaces the failed serving worker w by the standby (when one is
// ready; otherwise requests wait for the next worker), then takes over w's
// jobs, kills w and starts a new standby. A failover of a worker that no
// longer serves does nothing.
func (s *Supervisor) failover(w *Worker, why string) {
	s.mu.Lock()
	if s.active != w || s.closed {
		s.mu.Unlock()
		return
	}
	next := s.standby
	s.standby = nil
	s.active = nil
	if next != nil {
		s.promote(next)
	} else {
		s.notify()
	}
	s.outageAt = time.Now()
	s.takeoverAt.Store(s.outageAt.UnixNano())
	s.failovers.Add(1)
	s.mu.Unlock()
	if next != nil {
		s.log.Error("standby: the serving worker failed; the standby serves", "failed", w.Gen, "why", why, "serving", next.Gen)
	} else {
		s.log.Error("standby: the serving worker failed and no standby is ready; requests wait for the next worker", "failed", w.Gen, "why", why)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.jobs.takeOver(s.ctx, w, why, s.serving, s.log)
		w.Kill()
		select {
		case <-w.Exited:
		case <-time.After(30 * time.Second):
			s.log.Error("standby: the failed worker did not exit 30 s after SIGKILL", "worker", w.Gen)
		}
		s.startStandby()
	}()
}

// serving waits for the serving worker (during a failover without a ready
// standby there is none for a while).
func (s *Supervisor) serving(ctx context.Context) (*Worker, error) {
	for {
		s.mu.Lock()
		a, ch, closed, gaveUp := s.active, s.changed, s.closed, s.gaveUp
		s.mu.Unlock()
		switch {
		case closed:
			return nil, errClosed
		case a != nil:
			return a, nil
		case gaveUp != nil:
			return nil, gaveUp
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("no worker serves yet (the last one failed and its replacement is starting): %w", ctx.Err())
		}
	}
}

var errClosed = errors.New("standby: the daemon is shutting down")

// answered notes that w answered a request: the first answer after a
// failover ends the outage the failover began.
func (s *Supervisor) answered(w *Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == w && !s.outageAt.IsZero() {
		gap := time.Since(s.outageAt)
		s.lastGap.Store(int64(gap))
		s.outageAt = time.Time{}
		s.log.Info("standby: serving again after the failover", "worker", w.Gen, "gap", gap)
	}
}

// Close stops the workers (SIGTERM, then SIGKILL after timeout) and waits
// for the supervisor's background work.
func (s *Supervisor) Close(timeout time.Duration) {
	s.mu.Lock()
	s.closed = true
	ws := []*Worker{s.active, s.standby}
	s.notify()
	s.mu.Unlock()
	s.cancel()
	for _, w := range ws {
		if w != nil {
			w.Stop()
		}
	}
	for _, w := range ws {
		if w == nil {
			continue
		}
		select {
		case <-w.Exited:
		case <-time.After(timeout):
			s.log.Error("standby: a worker outlived the shutdown timeout; killing it", "worker", w.Gen)
			w.Kill()
			select {
			case <-w.Exited:
			case <-time.After(10 * time.Second):
				s.log.Error("standby: a worker is still there 10 s after SIGKILL", "worker", w.Gen)
			}
		}
	}
	s.wg.Wait()
	// A worker started while closing was killed by its starter.
}

// ServeHTTP implements http.Handler: health and metrics here, jobs through
// the job table, everything else forwarded to the serving worker (and sent
// again to the next one when the first failed under it).
func (s *Supervisor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/v2/health/live" && r.Method == http.MethodGet:
		s.live(w)
		return
	case p == "/v2/health/ready" && r.Method == http.MethodGet:
		s.ready(w, r)
		return
	case p == "/v2/jobs" || strings.HasPrefix(p, "/v2/jobs/"):
		s.jobsAPI(w, r)
		return
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("the daemon is handling %d requests at once, its limit; retry shortly", s.opt.MaxInflight))
		return
	}
	body, err := newReqBody(w, r, s.opt.BodyLimit)
	switch {
	case errors.Is(err, errTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d bytes, the daemon's body_limit", s.opt.BodyLimit))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return
	}
	defer body.release()
	ctx, cancel := context.WithTimeout(r.Context(), s.opt.RequestTimeout)
	defer cancel()
	if p == "/metrics" {
		s.metrics(ctx, w, r)
		return
	}
	resp, wk, err := s.forward(ctx, r, body, idempotent(r))
	if err != nil {
		s.unreachable(w, err)
		return
	}
	defer resp.Body.Close()
	relay(w, resp)
	s.answered(wk)
}

// idempotent reports whether r may be sent again to another worker:
// reads, and inference (a model's outputs do not depend on which worker
// computed them).
func idempotent(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead ||
		r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v2/models/") && strings.HasSuffix(r.URL.Path, "/infer")
}

// maxSends bounds how often one request is sent: to the serving worker and
// to two successors that failed under it in turn.
const maxSends = 3

// forward sends r (with body) to the serving worker and returns the answer
// to relay and the worker that gave it. A refusal (503) by the serving
// worker goes to the idle standby; a request the serving worker failed
// under — no answer, or a 5xx from a worker no longer live — goes to the
// next worker after the failover: always when the failed worker answered (a
// 5xx is a refusal), without an answer only when resend says the request
// may run twice. Resendable requests also go to the standby while the
// serving worker stalls (stall.go), and are sent again when refused within
// a takeover (again).
func (s *Supervisor) forward(ctx context.Context, r *http.Request, body *reqBody, resend bool) (*http.Response, *Worker, error) {
	var lastErr error
	for sends := 0; sends < maxSends; {
		wk, err := s.serving(ctx)
		if err != nil {
			return nil, nil, err
		}
		var a answer
		if resend {
			a = s.sendHedged(ctx, wk, r, body)
			if a.refused() && a.wk == wk {
				// The serving worker refused it (a full queue, its
				// predicted delay): the standby, idle, takes it. A
				// fault makes these too, before the stall or failure
				// shows: a worker holding requests it cannot finish
				// predicts long queues.
				if sb := s.readyStandby(); sb != nil {
					discard(a)
					s.overflow.Add(1)
					a = s.sendTo(ctx, sb, r, body)
				}
			}
		} else {
			a = s.sendTo(ctx, wk, r, body)
		}
		if a.good() {
			return a.resp, a.wk, nil
		}
		again, why := s.again(ctx, wk, resend && a.refused())
		if !again {
			switch {
			case ctx.Err() != nil:
				discard(a)
				return nil, nil, ctx.Err()
			case a.err != nil:
				return nil, nil, fmt.Errorf("worker %d: %w", a.wk.Gen, a.err)
			}
			return a.resp, a.wk, nil // a worker's own 5xx (overload, a bug): relayed
		}
		discard(a)
		if why == "" {
			continue // a takeover's refusal, sent again
		}
		if !resend && a.err != nil {
			// No answer: the worker may have acted on it before it failed.
			return nil, nil, fmt.Errorf("the serving worker failed under the request (%s); it was not sent again, as it may have taken effect: check, then retry", why)
		}
		sends++
		lastErr = fmt.Errorf("worker %d failed: %s", wk.Gen, why)
	}
	return nil, nil, fmt.Errorf("%d workers in a row failed under the request: %w", maxSends, lastErr)
}

// takeoverWindow is how long after a stall or failover a refusal counts as
// the takeover's burst (again).
const takeoverWindow = 2 * time.Second

// inTakeover reports whether a stall or failover happened within the
// takeover window.
func (s *Supervisor) inTakeover() bool {
	t := s.takeoverAt.Load()
	return t != 0 && time.Since(time.Unix(0, t)) < takeoverWindow
}

// again decides, for HTTP and gRPC alike, whether a request that got no
// good answer is sent again. When the serving worker wk failed, the
// failover runs and the request goes to the next worker (why says how wk
// failed; the resend is counted). A refusal (refused: 503 or Unavailable,
// of a request that may be resent) within a takeover is sent again after
// 10 ms: the worker taking over got every request the failing one held at
// once and refused some (a full queue, or a queue delay predicted from
// requests the fault slowed); it drains meanwhile. Anything else, or the
// request's deadline, is the client's answer.
func (s *Supervisor) again(ctx context.Context, wk *Worker, refused bool) (again bool, why string) {
	if ctx.Err() != nil {
		return false, ""
	}
	if why = s.failed(ctx, wk); why != "" {
		s.failover(wk, why)
		s.resent.Add(1)
		return true, why
	}
	if !refused || !s.inTakeover() {
		return false, ""
	}
	s.burst.Add(1)
	select {
	case <-time.After(10 * time.Millisecond):
		return true, ""
	case <-ctx.Done():
		return false, ""
	}
}

// hopHeaders are the hop-by-hop headers a proxy does not forward.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// send sends one copy of r to wk.
func (s *Supervisor) send(ctx context.Context, wk *Worker, r *http.Request, body *reqBody) (*http.Response, error) {
	rd, n, err := body.reader(ctx)
	if err != nil {
		return nil, err
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, wk.URL+r.URL.RequestURI(), rd)
	if err != nil {
		rd.Close()
		return nil, err
	}
	out.Header = r.Header.Clone()
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.ContentLength = n
	if n == 0 {
		out.Body = nil
	}
	return wk.Client.Do(out)
}

// relay writes a worker's answer to the client.
func relay(w http.ResponseWriter, resp *http.Response) {
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// unreachable answers a request no worker could take.
func (s *Supervisor) unreachable(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errClosed):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, err.Error())
	case errors.Is(err, context.Canceled):
		// The client left.
	default:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, err.Error())
	}
}

// live answers liveness: live unless workers stopped starting.
func (s *Supervisor) live(w http.ResponseWriter) {
	s.mu.Lock()
	gaveUp := s.gaveUp
	s.mu.Unlock()
	if gaveUp != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"live": false, "error": gaveUp.Error() + "; restart the daemon"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"live": true})
}

// ready relays the serving worker's readiness; with no serving worker (the
// first starting, or a failover waiting for the next) it is not ready.
func (s *Supervisor) ready(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	wk := s.active
	s.mu.Unlock()
	if wk == nil {
		writeError(w, http.StatusServiceUnavailable, "no worker serves yet (starting, or replacing one that failed); retry later")
		return
	}
	code, body, err := wk.get(r.Context(), "/v2/health/ready", 2*time.Second)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("the serving worker does not answer (%v); retry later", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// metrics relays the serving worker's /metrics (the text format) and adds
// the supervisor's series.
func (s *Supervisor) metrics(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	r = r.Clone(ctx)
	r.Header.Del("Accept") // the text format, to which the series below append
	r.Header.Del("Accept-Encoding")
	resp, _, err := s.forward(ctx, r, nil, true)
	if err != nil {
		s.unreachable(w, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		relay(w, resp)
		return
	}
	s.mu.Lock()
	ready := s.standby != nil
	gen := 0
	if s.active != nil {
		gen = s.active.Gen
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, resp.Body)
	for _, m := range []struct {
		name, kind, help string
		v                float64
	}{
		{"failovers_total", "counter", "Serving workers replaced after their device failed or their process exited.", float64(s.failovers.Load())},
		{"resent_requests_total", "counter", "Requests sent again to the next worker after the one serving them failed.", float64(s.resent.Load())},
		{"stalls_total", "counter", "Times the serving worker held requests and answered none for the stall bound.", float64(s.stalls.Load())},
		{"hedged_requests_total", "counter", "Requests sent to the standby while the serving worker stalled.", float64(s.hedged.Load())},
		{"overflow_requests_total", "counter", "Requests the serving worker refused with 503, sent to the standby.", float64(s.overflow.Load())},
		{"takeover_retries_total", "counter", "Refusals (503) within 2 s of a stall or failover, sent again as the worker taking over drains.", float64(s.burst.Load())},
		{"ready", "gauge", "Whether a warm standby is ready to take over.", map[bool]float64{false: 0, true: 1}[ready]},
		{"serving_worker", "gauge", "The serving worker's number (1 for the first, one more per worker started).", float64(gen)},
		{"last_gap_seconds", "gauge", "From the last failover to the next answer the new worker gave.", time.Duration(s.lastGap.Load()).Seconds()},
	} {
		fmt.Fprintf(w, "# HELP atoll_standby_%s %s\n# TYPE atoll_standby_%s %s\natoll_standby_%s %g\n", m.name, m.help, m.name, m.kind, m.name, m.v)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
