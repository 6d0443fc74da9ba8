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
	var res sched.OnlineResult
	r := sched.BERun{Iterations: 1}
	if m.beInst != nil {
		r.Setup = func() error { return m.beInst.SetInputs(call.inputs) }
		r.Collect = func(sched.IterationRecord) { call.out, call.err = m.beInst.Output() }
	}
	start := time.Now()
	run, err := e.loop().StartBE(m.be, r)
	if err != nil {
		return res, e.mapErr(err)
	}
	select {
	case <-run.Ended():
		st := run.Status()
		// Queue: waiting behind earlier BE requests of the model (wall
		// clock, to the run's start); Service: the iteration on the
		// device clock.
		res.Start, res.End, res.Service = st.Last.Start, st.Last.End, st.Last.End-st.Last.Start
		if st.Started {
			res.Queue = max(0, st.StartedAt.Sub(start))
		}
		res.Err = st.Err
		if res.Err == nil {
			res.Err = call.err
		}
		return res, nil
	case <-ctx.Done():
		_ = e.loop().StopBE(m.be, run.ID())
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
	on := e.loop()
	run, err := on.StartBE(jm.be, sched.BERun{Iterations: spec.Iterations})
	if err != nil {
		return JobStatus{}, e.mapErr(err)
	}
	// Listed only once the run exists, so CancelJob always has its id.
	e.jmu.Lock()
	j.on, j.run = on, run
	e.jmu.jobs = append(e.jmu.jobs, j)
	e.jmu.byID[j.st.ID] = j
	e.pruneJobsLocked()
	e.jmu.Unlock()
	go e.watchJob(j, run)
	return st, nil
}

// status is job j's state now (under jmu): what the engine decided —
// ended, or queued while it waits to resume — or else what its run
// publishes.
func (j *engJob) status() JobStatus {
	st := j.st
	if !st.Ended.IsZero() || j.resuming || j.run == nil {
		return st
	}
	rs := j.run.Status()
	st.Done = j.base + rs.Done
	if rs.Started {
		st.State = JobRunning
		if st.Started.IsZero() {
			st.Started = rs.StartedAt
		}
		if el := time.Since(st.Started).Seconds(); el > 0 {
			st.Throughput = float64(st.Done) / el
		}
	}
	return st
}

// watchJob waits for job j's run to end and settles the job: done,
// cancelled, failed, or — after a device failure, for a job that asked
// to resume — queued again until the engine has reopened the device.
func (e *engineImpl) watchJob(j *engJob, run *sched.BEProgress) {
	<-run.Ended()
	rs := run.Status()
	e.jmu.Lock()
	defer e.jmu.Unlock()
	if j.run != run || !j.st.Ended.IsZero() { // cancelled while it was resumed
		return
	}
	j.st = j.status()
	if errors.Is(rs.Err, sched.ErrDevice) && j.st.Spec.Resume && j.st.Resumed < MaxJobResumes && !e.noWait {
		j.base, j.st.State, j.resuming = j.st.Done, JobQueued, true
		j.st.Resumed++
		go e.resumeJob(j, j.on)
		return
	}
	j.st.Ended = rs.EndedAt
	switch err := rs.Err; {
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
	run, err := on.StartBE(j.client, sched.BERun{Iterations: left})
	if err != nil {
		end(fmt.Sprintf("resuming after a device failure: %v", err))
		return
	}
	e.jmu.Lock()
	cancelled := !j.resuming
	j.resuming, j.run = false, run
	e.jmu.Unlock()
	go e.watchJob(j, run)
	if cancelled { // a cancel came while the run started: stop it
		_ = on.StopBE(j.client, run.ID())
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
		out[i] = j.status()
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
	return j.status(), true
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
	st, run := j.status(), j.run
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
	if err := e.loop().StopBE(j.client, run.ID()); err != nil {
		return st, e.mapErr(err)
	}
	select {
	case <-j.ended:
	case <-time.After(5 * time.Second):
	}
	st, _ = e.Job(id)
	return st, nil
}
