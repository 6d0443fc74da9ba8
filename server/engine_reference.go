package server

import (
	"fmt"
)

func (e *engineImpl) refWorker() {
	defer e.workers.Done()
	for r := range e.refQ {
		if r.abandoned.Load() {
			r.err = errAbandoned
		} else {
			r.out, r.err = engReference(r.call)
		}
		close(r.done)
	}
}

// errAbandoned: a request's CPU outputs were not computed because the
// request had returned without them.
var errAbandoned = fmt.Errorf("%w: the request was given up before its outputs were computed", ErrInternal)

// engReference computes a request's outputs on the CPU (simulator). It is
// the only place request inputs become float64 on the raw fast path:
// the prepared executor decodes the bundle's bytes (Data.Values) itself.
func engReference(c *engCall) (out []float64, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: CPU reference of %s panicked: %v", ErrInternal, c.m.info.Name, p)
		}
	}()
	out, err = c.m.ref.Output(c.inputs)
	if err != nil {
		return nil, fmt.Errorf("%w: CPU reference of %s: %w", ErrInternal, c.m.info.Name, err)
	}
	return out, nil
}

func (e *engineImpl) stopWorkers() {
	e.stopRef.Do(func() {
		e.refMu.Lock()
		e.refDone = true
		if e.refQ != nil {
			close(e.refQ)
		}
		e.refMu.Unlock()
	})
	e.workers.Wait()
}
