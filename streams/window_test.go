package streams_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/gpu/sim"
	"atoll/sched"
	"atoll/sched/schedtest"
	"atoll/streams"
)

// watch runs p and checks, after every Schedule, that no BE client has
// more than streams.BEWindow launches in flight; it records the most seen.
type watch struct {
	sched.Policy
	t    *testing.T
	most int
}

func (w *watch) Schedule(st *sched.State, now time.Duration) {
	w.Policy.Schedule(st, now)
	for _, b := range st.BE() {
		if n := b.InFlight(); n > streams.BEWindow {
			w.t.Fatalf("%v: BE client %v has %d launches in flight (window %d)", now, b.ID(), n, streams.BEWindow)
		} else {
			w.most = max(w.most, n)
		}
	}
}

// A BE iteration longer than the window is launched BEWindow at a time,
// refilled as launches complete: the window fills and binds, the iterations
// still complete, and HP is served beside it.
func TestBEWindowBoundsLaunchesInFlight(t *testing.T) {
	var b strings.Builder
	for i := range 3 * streams.BEWindow {
		fmt.Fprintf(&b, "k%d dur=5us grid=264 block=256 class=memory\n", i)
	}
	be, err := schedtest.ParseProfile("be", b.String())
	if err != nil {
		t.Fatal(err)
	}
	hp, err := schedtest.ParseProfile("hp", "a dur=50us grid=132 block=256\nb dur=30us grid=132 block=256\n")
	if err != nil {
		t.Fatal(err)
	}
	const dur = 20 * time.Millisecond
	var arr []time.Duration
	for a := 500 * time.Microsecond; a < dur; a += time.Millisecond {
		arr = append(arr, a)
	}
	w := sched.Workload{
		HP: []sched.HPWorkload{{Name: "hp", Profile: hp, Arrivals: arr}},
		BE: []sched.BEWorkload{{Name: "be", Profile: be}},
	}
	for _, p := range []sched.Policy{streams.Priority(), streams.Streams(), streams.Timeslice()} {
		t.Run(p.Name(), func(t *testing.T) {
			dev, err := sim.New(sim.Config{Spec: gpu.H100SXM, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			pw := &watch{Policy: p, t: t}
			tr, err := sched.Run(context.Background(), dev, w, sched.Options{Policy: pw, Duration: dur})
			if err != nil {
				t.Fatal(err)
			}
			if pw.most != streams.BEWindow {
				t.Errorf("at most %d BE launches in flight; the window (%d) never filled", pw.most, streams.BEWindow)
			}
			if tr.Stats.Iterations < 2 {
				t.Errorf("%d BE iterations completed", tr.Stats.Iterations)
			}
			if len(tr.Requests) != len(arr) {
				t.Errorf("%d of %d HP requests measured", len(tr.Requests), len(arr))
			}
		})
	}
}
