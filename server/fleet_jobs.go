package server

import (
	"time"
)

// A fleet's jobs survive the GPU they run on: when that GPU's device fails
// (the job ends failed while its engine is down or has reopened), the
// iterations left go to another ready GPU, under the job's first id.

// fleetJob is a job the fleet placed: where it runs now, and how much it
// did before.
type fleetJob struct {
	engine   int
	id       string   // on the engine
	spec     JobSpec  // as submitted
	offset   int      // iterations done on GPUs it left
	restarts uint64   // the engine's Restarts when placed there
	history  []string // fleet ids of the engine jobs it left
	moves    int
	created  time.Time
	ended    bool // done, cancelled or failed for good: nothing to watch
	gone     bool // its engine no longer lists it (pruned): forget it
}

// moveCheck is how often the fleet looks for jobs to move.
const moveCheck = 50 * time.Millisecond

// watchJobs moves jobs off failed GPUs until the fleet closes.
func (f *Fleet) watchJobs() {
	defer f.watched.Done()
	t := time.NewTicker(moveCheck)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
		f.jobs.Lock()
		var live []string
		order := f.jobs.order[:0]
		for _, id := range f.jobs.order {
			j := f.jobs.byID[id]
			if j.gone {
				delete(f.jobs.byID, id)
				continue
			}
			order = append(order, id)
			if !j.ended {
				live = append(live, id)
			}
		}
		f.jobs.order = order
		f.jobs.Unlock()
		for _, id := range live {
			f.jobs.Lock()
			j := f.jobs.byID[id]
			f.jobs.Unlock()
			if j != nil {
				f.jobStatus(id, j)
			}
		}
	}
}

// jobStatus is a fleet job's status across its moves; a job its GPU's
// failure ended is moved first, when another GPU is ready.
func (f *Fleet) jobStatus(id string, j *fleetJob) JobStatus {
	f.jobs.Lock()
	defer f.jobs.Unlock()
	e := f.engines[j.engine]
	st, found := e.Job(j.id)
	if !found {
		j.gone = true
	}
	if st.State == JobFailed && (!e.Ready() || e.Stats().Restarts > j.restarts) {
		if left := j.spec.Iterations - j.offset - st.Done; left > 0 {
			f.moveLocked(j, st, left)
			st, _ = f.engines[j.engine].Job(j.id)
		}
	}
	switch st.State {
	case JobDone, JobCancelled:
		j.ended = true
	case JobFailed:
		// Failed for good unless a GPU may still take it: a device
		// failure with no other GPU ready is retried on the next check.
		j.ended = f.engines[j.engine].Ready() && f.engines[j.engine].Stats().Restarts == j.restarts
	}
	st.ID, st.Spec, st.Done = id, j.spec, j.offset+st.Done
	if j.created.IsZero() {
		j.created = st.Created
	}
	st.Created = j.created
	return st
}

// moveLocked submits the iterations left of j (whose engine job ended as
// st) on the ready GPU with fewest active jobs; j is unchanged when no GPU
// takes it.
func (f *Fleet) moveLocked(j *fleetJob, st JobStatus, left int) {
	best, bestActive := -1, 0
	for i, e := range f.engines {
		if i == j.engine || !e.Ready() {
			continue
		}
		active := 0
		for _, x := range e.Jobs() {
			if x.Ended.IsZero() {
				active++
			}
		}
		if best < 0 || active < bestActive {
			best, bestActive = i, active
		}
	}
	if best < 0 {
		return
	}
	spec := j.spec
	spec.Iterations = left
	restarts := f.engines[best].Stats().Restarts
	nst, err := f.engines[best].SubmitJob(spec)
	if err != nil {
		return
	}
	j.history = append(j.history, f.fleetJobID(j.engine, j.id))
	j.offset += st.Done
	j.engine, j.id, j.restarts = best, nst.ID, restarts
	j.moves++
}
