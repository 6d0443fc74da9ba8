package standby

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"atoll/sched"
	"atoll/server"
)

// The jobs API through the supervisor. A job runs on one worker under that
// worker's id; the supervisor gives it its own id, which it keeps when the
// job resumes on the next worker after a failover.

// jobRecord is one job submitted through the supervisor.
type jobRecord struct {
	id      string
	spec    server.JobSpec // as submitted
	created time.Time
	started time.Time
	on      *Worker // the worker running it; nil once it ended here
	onID    string  // its id there
	// before counts the iterations done on earlier workers, resumed the
	// runs resumed after a failover.
	before, resumed int
	last            server.JobStatus // last status seen, in the supervisor's terms
}

// jobTable holds the records, in submission order.
type jobTable struct {
	mu   sync.Mutex
	seq  int
	byID map[string]*jobRecord
	all  []*jobRecord
}

// view turns a worker's status of rec's job into the supervisor's: its
// id, the spec as submitted, iterations and resumes counted over workers.
// t.mu is held.
func (rec *jobRecord) view(st server.JobStatus) server.JobStatus {
	st.ID = rec.id
	st.Spec = rec.spec
	st.Done += rec.before
	st.Resumed += rec.resumed
	st.Created = rec.created
	if !rec.started.IsZero() {
		st.Started = rec.started
	} else if !st.Started.IsZero() {
		rec.started = st.Started
	}
	rec.last = st
	if settled(st) {
		rec.on = nil
	}
	return st
}

// settled reports whether a job's status on its worker is final whatever
// becomes of the worker: done, cancelled, or failed for another reason than
// the device (a device failure is the worker's, and the takeover decides).
func settled(st server.JobStatus) bool {
	switch st.State {
	case server.JobDone, server.JobCancelled:
		return true
	case server.JobFailed:
		return !deviceFailure(st)
	}
	return false
}

// deviceFailure reports whether a failed job's error is its device's.
func deviceFailure(st server.JobStatus) bool {
	return strings.Contains(st.Error, sched.ErrDevice.Error())
}

// jobsAPI serves /v2/jobs and /v2/jobs/{id}.
func (s *Supervisor) jobsAPI(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.opt.RequestTimeout)
	defer cancel()
	id, one := strings.CutPrefix(r.URL.Path, "/v2/jobs/")
	switch {
	case r.URL.Path == "/v2/jobs" && r.Method == http.MethodPost:
		s.submitJob(ctx, w, r)
	case r.URL.Path == "/v2/jobs" && r.Method == http.MethodGet:
		s.listJobs(ctx, w, r)
	case one && id != "" && !strings.Contains(id, "/") && r.Method == http.MethodGet:
		s.getJob(ctx, w, r, id)
	case one && id != "" && !strings.Contains(id, "/") && r.Method == http.MethodDelete:
		s.cancelJob(ctx, w, r, id)
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s %s; the jobs API is POST and GET /v2/jobs, GET and DELETE /v2/jobs/{id} (docs/api.md)", r.Method, r.URL.Path))
	}
}

// readJSON decodes a worker's JSON answer.
func readJSON(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v)
}

func (s *Supervisor) submitJob(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "a job spec is a small JSON object; this body is over 1 MiB or unreadable: "+err.Error())
		return
	}
	// Resuming after a failover is the supervisor's: the worker gets the
	// spec without resume (its own reopen never comes). A body that is no
	// job spec goes as it is, for the worker's error.
	var spec server.JobSpec
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if dec.Decode(&spec) == nil && !dec.More() && spec.Resume {
		spec.Resume = false
		body, _ = json.Marshal(spec)
		spec.Resume = true
	}
	// A submission is not sent again after a failure under it (it may
	// have been accepted): the client is told to check and retry.
	resp, wk, err := s.forward(ctx, r, &reqBody{buf: body, size: len(body)}, false)
	if err != nil {
		s.unreachable(w, err)
		return
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		relay(w, resp)
		return
	}
	var st server.JobStatus
	if err := readJSON(resp, &st); err != nil {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("worker %d accepted the job but its answer is unreadable: %v", wk.Gen, err))
		return
	}
	s.jobs.mu.Lock()
	s.jobs.seq++
	st.Spec.Resume = spec.Resume
	rec := &jobRecord{id: "job-" + strconv.Itoa(s.jobs.seq), spec: st.Spec, created: st.Created, on: wk, onID: st.ID}
	s.jobs.byID[rec.id] = rec
	s.jobs.all = append(s.jobs.all, rec)
	out := rec.view(st)
	s.jobs.mu.Unlock()
	writeJSON(w, resp.StatusCode, out)
}

// workerJobs lists wk's jobs by its ids, as GET /v2/jobs on it answers.
func workerJobs(ctx context.Context, wk *Worker, timeout time.Duration) (map[string]server.JobStatus, error) {
	code, body, err := wk.get(ctx, "/v2/jobs", timeout)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("worker %d answered GET /v2/jobs with %d: %s", wk.Gen, code, bytes.TrimSpace(body))
	}
	var list struct {
		Jobs []server.JobStatus `json:"jobs"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	m := make(map[string]server.JobStatus, len(list.Jobs))
	for _, st := range list.Jobs {
		m[st.ID] = st
	}
	return m, nil
}

func (s *Supervisor) listJobs(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	wk, err := s.serving(ctx)
	if err != nil {
		s.unreachable(w, err)
		return
	}
	cur, err := workerJobs(ctx, wk, s.opt.RequestTimeout)
	if err != nil {
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	s.jobs.mu.Lock()
	out := make([]server.JobStatus, 0, len(s.jobs.all))
	for _, rec := range s.jobs.all {
		if st, ok := cur[rec.onID]; ok && rec.on == wk {
			rec.view(st)
		}
		out = append(out, rec.last)
	}
	s.jobs.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string][]server.JobStatus{"jobs": out})
}

// jobAt is a job's record and, read under the lock, where it runs and its
// last status.
type jobAt struct {
	rec  *jobRecord
	on   *Worker
	onID string
	last server.JobStatus
}

// lookup finds a job by the supervisor's id, answering 404 when there is
// none.
func (s *Supervisor) lookup(w http.ResponseWriter, id string) (jobAt, bool) {
	s.jobs.mu.Lock()
	defer s.jobs.mu.Unlock()
	rec, ok := s.jobs.byID[id]
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("%v %q; GET /v2/jobs lists the jobs", server.ErrUnknownJob, id))
		return jobAt{}, false
	}
	return jobAt{rec: rec, on: rec.on, onID: rec.onID, last: rec.last}, true
}

func (s *Supervisor) getJob(ctx context.Context, w http.ResponseWriter, r *http.Request, id string) {
	j, ok := s.lookup(w, id)
	if !ok {
		return
	}
	rec, on, onID, last := j.rec, j.on, j.onID, j.last
	if on == nil || on.exited() {
		writeJSON(w, http.StatusOK, last)
		return
	}
	code, body, err := on.get(ctx, "/v2/jobs/"+onID, s.opt.RequestTimeout)
	var st server.JobStatus
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &st) != nil {
		writeJSON(w, http.StatusOK, last) // its worker is failing: the takeover will settle it
		return
	}
	s.jobs.mu.Lock()
	if rec.on == on && rec.onID == onID {
		last = rec.view(st)
	} else {
		last = rec.last
	}
	s.jobs.mu.Unlock()
	writeJSON(w, http.StatusOK, last)
}

func (s *Supervisor) cancelJob(ctx context.Context, w http.ResponseWriter, r *http.Request, id string) {
	j, ok := s.lookup(w, id)
	if !ok {
		return
	}
	rec, on, onID, last := j.rec, j.on, j.onID, j.last
	if on == nil {
		writeError(w, http.StatusConflict, fmt.Sprintf("%v: job %s has ended (%s)", server.ErrJobConflict, id, last.State))
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, on.URL+"/v2/jobs/"+onID, nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	resp, err := on.Client.Do(req)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("job %s's worker is failing over (%v); retry shortly", id, err))
		return
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		relay(w, resp)
		return
	}
	var st server.JobStatus
	if err := readJSON(resp, &st); err != nil {
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	s.jobs.mu.Lock()
	out := rec.view(st)
	s.jobs.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// takeOver settles the jobs of the failed worker dead: each gets its last
// status from dead (whose HTTP API outlives its device); a job that asked
// to resume and has resumes left runs its remaining iterations on the next
// serving worker (serving waits for it), the others end failed with the
// worker's error.
func (t *jobTable) takeOver(ctx context.Context, dead *Worker, why string, serving func(context.Context) (*Worker, error), log *slog.Logger) {
	final, err := workerJobs(ctx, dead, 2*time.Second)
	if err != nil {
		log.Warn("standby: the failed worker's job statuses are lost; its jobs' last known ones stand", "worker", dead.Gen, "err", err)
	}
	t.mu.Lock()
	var resume []*jobRecord
	for _, rec := range t.all {
		if rec.on != dead {
			continue
		}
		if st, ok := final[rec.onID]; ok {
			rec.view(st)
		}
		switch {
		case settled(rec.last):
		case rec.spec.Resume && rec.resumed < server.MaxJobResumes && rec.last.Done < rec.spec.Iterations:
			resume = append(resume, rec)
			continue
		default:
			rec.last.State = server.JobFailed
			if rec.last.Error == "" {
				rec.last.Error = "its worker failed: " + why
			}
			if rec.last.Ended.IsZero() {
				rec.last.Ended = time.Now()
			}
		}
		rec.on = nil
	}
	t.mu.Unlock()
	for _, rec := range resume {
		if err := t.resume(ctx, rec, serving); err != nil {
			t.mu.Lock()
			rec.on = nil
			rec.last.State = server.JobFailed
			rec.last.Error = fmt.Sprintf("its worker failed (%s) and resuming it on the next one failed: %v", why, err)
			rec.last.Ended = time.Now()
			t.mu.Unlock()
			log.Error("standby: a job could not resume on the next worker", "job", rec.id, "err", err)
			continue
		}
		log.Info("standby: job resumes on the next worker", "job", rec.id, "iterations_done", rec.before, "resumed", rec.resumed)
	}
}

// resume submits rec's remaining iterations to the serving worker.
func (t *jobTable) resume(ctx context.Context, rec *jobRecord, serving func(context.Context) (*Worker, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	wk, err := serving(ctx)
	if err != nil {
		return err
	}
	t.mu.Lock()
	done := rec.last.Done
	spec := rec.spec
	t.mu.Unlock()
	spec.Iterations -= done
	spec.Resume = false
	body, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wk.URL+"/v2/jobs", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := wk.Client.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return fmt.Errorf("worker %d answered %d: %s", wk.Gen, resp.StatusCode, bytes.TrimSpace(msg))
	}
	var st server.JobStatus
	if err := readJSON(resp, &st); err != nil {
		return err
	}
	if st.ID == "" {
		return errors.New("the worker's answer has no job id")
	}
	t.mu.Lock()
	rec.on, rec.onID = wk, st.ID
	rec.before = done
	rec.resumed++
	rec.view(st)
	t.mu.Unlock()
	return nil
}
