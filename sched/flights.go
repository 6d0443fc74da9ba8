package sched

// flightTable holds the launches in flight by ID. IDs are handed out in
// increasing order and most complete soon after they launch, so the table
// is a window of the ID space, [base, base+len(fs)), with completed slots
// nil: a lookup is an index, not a hash (the core looks up a launch on
// every completion and at most decisions).
type flightTable struct {
	base LaunchID  // ID of fs[0]
	fs   []*flight // fs[i]: launch base+i, nil once completed
	n    int       // launches in flight
}

// get returns launch id's record, or nil when it is not in flight.
func (t *flightTable) get(id LaunchID) *flight {
	i := id - t.base
	if i < 0 || i >= LaunchID(len(t.fs)) {
		return nil
	}
	return t.fs[i]
}

// put adds launch id, which must be greater than every ID put before.
func (t *flightTable) put(id LaunchID, f *flight) {
	if len(t.fs) == 0 {
		t.base = id
	}
	for t.base+LaunchID(len(t.fs)) < id {
		t.fs = append(t.fs, nil)
	}
	t.fs = append(t.fs, f)
	t.n++
}

// del removes launch id (in flight) and moves the window's start past
// the completed launches there (append copies only the window when it
// grows the slice).
func (t *flightTable) del(id LaunchID) {
	t.fs[id-t.base] = nil
	t.n--
	skip := 0
	for skip < len(t.fs) && t.fs[skip] == nil {
		skip++
	}
	t.fs = t.fs[skip:]
	t.base += LaunchID(skip)
}

// ids lists the launches in flight in launch order.
func (t *flightTable) ids() []LaunchID {
	out := make([]LaunchID, 0, t.n)
	for i, f := range t.fs {
		if f != nil {
			out = append(out, t.base+LaunchID(i))
		}
	}
	return out
}
