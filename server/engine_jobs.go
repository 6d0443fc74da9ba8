package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"atoll/sched"
)

// runBE serves a BE-class request as one iteration of the model's BE
// client.
func (e *engineImpl) runBE(ctx context.Context, m *engModel, call *engCall) (sched.OnlineResult, error) {
	type end struct {
		err error
	}
	var start time.Time
	var res sched.OnlineResult
	done := make(chan end, 1)
	r := sched.BERun{Iterations: 1,
		OnIteration: func(_ int, it sched.IterationRecord) {
			res.Start, res.End, res.Service = it.Start, it.End, it.End-it.Start
		},
		OnEnd: func(_ int, err error) { done <- end{err} },
	}
	var began time.Time
	r.OnStart = func() error { began = time.Now(); return nil }
	if m.beInst != nil {
		r.OnStart = func() error { began = time.Now(); return m.beInst.SetInputs(call.inputs) }
		r.OnIteration = func(_ int, it sched.IterationRecord) {
			res.Start, res.End, res.Service = it.Start, it.End, it.End-it.Start
			call.out, call.err = m.beInst.Output()
		}
	}
	start = time.Now()
	id, err := e.loop().StartBE(m.be, r)
	if err != nil {
		return res, e.mapErr(err)
	}
	select {
	case d := <-done:
		if d.err == nil {
			d.err = call.err
		}
		res.Err = d.err
		// Queue: waiting behind earlier BE requests of the model (wall
		// clock, to the run's start); Service: the iteration on the
		// device clock.
		if !began.IsZero() {
			res.Queue = max(0, began.Sub(start))
		}
		return res, nil
	case <-ctx.Done():
		_ = e.loop().StopBE(m.be, id)
		return res, ctx.Err()
	case <-e.abort:
		return res, fmt.Errorf("%w: the engine closed before the request finished", ErrShuttingDown)
	}
}

// SubmitJob implements Engine.
func (e *engineImpl) SubmitJob(spec JobSpec) (JobStatus, error) {
	if !e.Ready() {
		return JobStatus{}, e.unavailable()
	}
	var jm *engJobModel
	var known []string
	matches := 0
	for _, j := range e.jobsM {
		known = append(known, fmt.Sprintf("%s (batch %d)", j.zoo, j.batch))
		if j.zoo == spec.Model && (spec.Batch == 0 || spec.Batch == j.batch) {
			jm = j
			matches++
		}
	}
	if len(known) == 0 {
		known = []string{"none configured"}
	}
	switch {
	case jm == nil && spec.Batch == 0:
		return JobStatus{}, fmt.Errorf("%w: no job model %q; configured: %s", ErrBadInput, spec.Model, strings.Join(known, ", "))
	case jm == nil:
		return JobStatus{}, fmt.Errorf("%w: no job model %q at batch %d; configured: %s (leave the batch out for the configured one)", ErrBadInput, spec.Model, spec.Batch, strings.Join(known, ", "))
	case matches > 1:
		return JobStatus{}, fmt.Errorf("%w: job model %q is configured at several batches; give one: %s", ErrBadInput, spec.Model, strings.Join(known, ", "))
	}
	if spec.Iterations <= 0 || spec.Iterations > 1<<30 {
		return JobStatus{}, fmt.Errorf("%w: iterations %d; give 1 to %d", ErrBadInput, spec.Iterations, 1<<30)
	}
	spec.Batch = jm.batch
	e.jmu.Lock()
	active := 0
	for _, j := range e.jmu.jobs {
		if j.st.Ended.IsZero() {
			active++
		}
	}
	e.jmu.Unlock()
	if active >= e.maxActive {
		return JobStatus{}, fmt.Errorf("%w: %d jobs are queued or running (max_active_jobs %d); retry when one ends, or cancel one", ErrTooManyJobs, active, e.maxActive)
	}
	j := &engJob{client: jm.be, ended: make(chan struct{})}
	j.st = JobStatus{ID: fmt.Sprintf("job-%d", e.jobSeq.Add(1)), Spec: spec, State: JobQueued, Created: time.Now()}
	st := j.st
	// Listed only once the run exists, so CancelJob always has its id
	// (the callbacks update j itself under jmu, listed or not).
	j.on = e.loop() // before the run starts: its OnEnd may resume from it
	id, err := j.on.StartBE(jm.be, e.jobRun(j, spec.Iterations))
	if err != nil {
		return JobStatus{}, e.mapErr(err)
	}
	e.jmu.Lock()
	j.runID = id
	e.jmu.jobs = append(e.jmu.jobs, j)
	e.jmu.byID[j.st.ID] = j
	e.pruneJobsLocked()
	e.jmu.Unlock()
	return st, nil
}

// jobRun is the BE run of job j's next iterations (all of them at first;
// what is left when it resumes).
func (e *engineImpl) jobRun(j *engJob, iterations int) sched.BERun {
	return sched.BERun{Iterations: iterations,
		OnStart: func() error {
			e.jmu.Lock()
			if !j.st.Ended.IsZero() { // cancelled while it was resumed
				e.jmu.Unlock()
				return nil
			}
			j.st.State = JobRunning
			if j.st.Started.IsZero() {
				j.st.Started = time.Now()
			}
			e.jmu.Unlock()
			return nil
		},
		OnIteration: func(done int, _ sched.IterationRecord) {
			e.jmu.Lock()
			if !j.st.Ended.IsZero() {
				e.jmu.Unlock()
				return
			}
			j.st.Done = j.base + done
			if el := time.Since(j.st.Started).Seconds(); el > 0 {
				j.st.Throughput = float64(j.st.Done) / el
			}
			e.jmu.Unlock()
		},
		OnEnd: func(done int, err error) {
			e.jmu.Lock()
			defer e.jmu.Unlock()
			if !j.st.Ended.IsZero() { // cancelled while it was resumed
				return
			}
			j.st.Done = j.base + done
			if errors.Is(err, sched.ErrDevice) && j.st.Spec.Resume && j.st.Resumed < MaxJobResumes && !e.noWait {
				j.base, j.st.State, j.resuming = j.st.Done, JobQueued, true
				j.st.Resumed++
				go e.resumeJob(j, j.on)
				return
			}
			j.st.Ended = time.Now()
			switch {
			case err == nil:
				j.st.State = JobDone
			case errors.Is(err, sched.ErrCancelled), errors.Is(err, sched.ErrStopped):
				j.st.State = JobCancelled
				if errors.Is(err, sched.ErrStopped) {
					j.st.Error = "the engine shut down"
				}
			default:
				j.st.State, j.st.Error = JobFailed, err.Error()
			}
			j.closeEnded()
		},
	}
}

// resumeJob starts job j's remaining iterations once the engine has
// reopened the device after failed stopped; if it does not (the engine
// closes or gives up), or the new loop refuses the run, the job ends
// failed.
func (e *engineImpl) resumeJob(j *engJob, failed *sched.Online) {
	// end fails the job unless a cancel ended it meanwhile.
	end := func(why string) {
		e.jmu.Lock()
		defer e.jmu.Unlock()
		if !j.resuming {
			return
		}
		j.resuming = false
		j.st.State, j.st.Error, j.st.Ended = JobFailed, why, time.Now()
		j.closeEnded()
	}
	if !e.awaitRestart(context.Background(), failed) {
		end("the device failed and the engine did not reopen it")
		return
	}
	e.jmu.Lock()
	if !j.resuming { // cancelled while the device reopened
		e.jmu.Unlock()
		return
	}
	left := j.st.Spec.Iterations - j.base
	on := e.loop()
	j.on = on
	e.jmu.Unlock()
	// Not under jmu: the run's callbacks take it.
	id, err := on.StartBE(j.client, e.jobRun(j, left))
	if err != nil {
		end(fmt.Sprintf("resuming after a device failure: %v", err))
		return
	}
	e.jmu.Lock()
	cancelled := !j.resuming
	j.resuming, j.runID = false, id
	e.jmu.Unlock()
	if cancelled { // a cancel came while the run started: stop it
		_ = on.StopBE(j.client, id)
	}
}

// pruneJobsLocked drops the oldest ended jobs beyond maxJobs.
func (e *engineImpl) pruneJobsLocked() {
	extra := len(e.jmu.jobs) - e.maxJobs
	if extra <= 0 {
		return
	}
	e.jmu.jobs = slices.DeleteFunc(e.jmu.jobs, func(j *engJob) bool {
		if extra > 0 && !j.st.Ended.IsZero() {
			extra--
			delete(e.jmu.byID, j.st.ID)
			return true
		}
		return false
	})
}

// Jobs implements Engine.
func (e *engineImpl) Jobs() []JobStatus {
	e.jmu.Lock()
	defer e.jmu.Unlock()
	out := make([]JobStatus, len(e.jmu.jobs))
	for i, j := range e.jmu.jobs {
		out[i] = j.st
	}
	return out
}

// Job implements Engine.
func (e *engineImpl) Job(id string) (JobStatus, bool) {
	e.jmu.Lock()
	defer e.jmu.Unlock()
	j, ok := e.jmu.byID[id]
	if !ok {
		return JobStatus{}, false
	}
	return j.st, true
}

// CancelJob implements Engine: it stops the job and waits (up to 5 s) for
// its launches in flight to drain, so the status returned is normally
// final ("cancelled").
func (e *engineImpl) CancelJob(id string) (JobStatus, error) {
	e.jmu.Lock()
	j, ok := e.jmu.byID[id]
	if !ok {
		e.jmu.Unlock()
		return JobStatus{}, fmt.Errorf("%w: %q", ErrUnknownJob, id)
	}
	st, runID := j.st, j.runID
	if j.resuming {
		// Waiting for the device to reopen: no run to stop.
		j.resuming = false
		j.st.State, j.st.Ended = JobCancelled, time.Now()
		st = j.st
		e.jmu.Unlock()
		j.closeEnded()
		return st, nil
	}
	e.jmu.Unlock()
	if st.State != JobQueued && st.State != JobRunning {
		return st, fmt.Errorf("%w: job %s is %s", ErrJobConflict, id, st.State)
	}
	if err := e.loop().StopBE(j.client, runID); err != nil {
		return st, e.mapErr(err)
	}
	select {
	case <-j.ended:
	case <-time.After(5 * time.Second):
	}
	st, _ = e.Job(id)
	return st, nil
}
