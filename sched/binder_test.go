package sched_test

import (
	"context"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/policies"
	"atoll/sched"
)

// recordingBinder checks, for every request the driver makes, that the
// preemption state the kernel will need is there — on a real GPU the
// binder packs it into the kernel's arguments, so a missing field is a
// kernel reading garbage.
type recordingBinder struct {
	*sched.ProfileBinder
	t     *testing.T
	forms map[gpu.Form]int
}

func (b *recordingBinder) ProgressBytes() int { return 32 }

func (b *recordingBinder) Bind(r sched.BindRequest) (*gpu.Launch, error) {
	b.forms[r.Form]++
	switch r.Form {
	case gpu.Reset:
		if !r.Ctl.Flag.Valid() || r.Ctl.Counter == 0 {
			b.t.Errorf("reset launch of %s k%d without a flag or a flag-relay block: %+v", r.Client, r.Kernel, r.Ctl)
		}
	case gpu.Resumable:
		if !r.Ctl.Flag.Valid() || r.Ctl.Counter == 0 || !r.Ctl.Done.Valid() {
			b.t.Errorf("resumable launch of %s k%d with incomplete control %+v", r.Client, r.Kernel, r.Ctl)
		}
	case gpu.Padded:
		if r.Pad == nil || r.Pad.Blocks <= 0 || r.Pad.Ctl.Counter == 0 || !r.Pad.Ctl.Done.Valid() || r.Pad.Client.Class != sched.BE {
			b.t.Errorf("padded launch of %s k%d with bad pad %+v", r.Client, r.Kernel, r.Pad)
		}
	}
	return b.ProfileBinder.Bind(r)
}

func TestBinderReceivesPreemptionState(t *testing.T) {
	for _, name := range []string{"reef", "atoll"} {
		t.Run(name, func(t *testing.T) {
			dev := newSim(t)
			w := smallWorkload(t, 2*time.Millisecond, 20*time.Millisecond)
			pb, err := sched.NewProfileBinder(dev, w)
			if err != nil {
				t.Fatal(err)
			}
			rb := &recordingBinder{ProfileBinder: pb, t: t, forms: map[gpu.Form]int{}}
			p, err := policies.ByName(name)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := sched.Run(context.Background(), dev, w, sched.Options{Policy: p, Duration: 20 * time.Millisecond, Binder: rb})
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Requests) == 0 {
				t.Fatal("no request completed")
			}
			want := gpu.Reset
			if name == "atoll" {
				want = gpu.Resumable
			}
			if rb.forms[want] == 0 || rb.forms[gpu.Padded] == 0 {
				t.Errorf("%s made no %s or padded launches: %v", name, want, rb.forms)
			}
		})
	}
}
