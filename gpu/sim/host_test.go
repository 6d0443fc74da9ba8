package sim

import (
	"context"
	"testing"
	"time"

	"atoll/gpu"
)

// TestWaitSeesWhatHappenedDuringHostTime: an event that completes while
// the host is busy in a launch call (HostLaunchCost) has not been seen by
// the caller yet, so the next Wait returns at once, as the real GPU's Wait
// does for an event already complete, instead of sleeping to its deadline
// (which held a BE client with two launches in flight to 13 % of its work).
func TestWaitSeesWhatHappenedDuringHostTime(t *testing.T) {
	r := newRig(t, Config{HostLaunchCost: 50 * us})
	d := r.d
	a, b := r.stream(0), r.stream(0)
	ev, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	r.launch(a, plain("short", 1, 32, 10*us)) // done at 4 + 10 µs, during the host's 50 µs
	if err := d.Record(ev, a); err != nil {
		t.Fatal(err)
	}
	r.launch(b, plain("other", 1, 32, 10*us)) // the host is busy until 100 µs
	before := d.Now()
	if err := d.Wait(context.Background(), before+time.Second); err != nil {
		t.Fatal(err)
	}
	if done, _ := d.Query(ev); !done || d.Now() != before {
		t.Errorf("Wait returned at %v (called at %v), event done %v: want at once, the event having completed during the launch", d.Now(), before, done)
	}
	// Seen once: the next Wait sleeps until something new happens.
	if err := d.Wait(context.Background(), d.Now()+time.Second); err != nil {
		t.Fatal(err)
	}
	if d.Now() == before {
		t.Errorf("the second Wait returned at once again")
	}
}

// TestNoticeLatency: the host sees a completion NoticeLatency after it —
// Query and Time answer "not yet" until then and Wait returns then — while
// Time gives the completion itself; a kernel launched on seeing it starts
// NoticeLatency + LaunchLatency after the one before ended.
func TestNoticeLatency(t *testing.T) {
	const notice = 20 * us
	r := newRig(t, Config{NoticeLatency: notice})
	d := r.d
	s := r.stream(0)
	ev, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	r.launch(s, plain("first", 1, 32, 10*us)) // runs 4–14 µs
	if err := d.Record(ev, s); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(context.Background(), 16*us); err != nil { // past the end, before the notice
		t.Fatal(err)
	}
	if done, _ := d.Query(ev); done || d.Now() != 16*us {
		t.Fatalf("at %v Query says done %v; want not yet seen until %v", d.Now(), done, 14*us+notice)
	}
	if _, err := d.Time(ev); err == nil {
		t.Errorf("Time answered before the host could see the completion")
	}
	if err := d.Wait(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	if done, _ := d.Query(ev); !done || d.Now() != 14*us+notice {
		t.Fatalf("Wait returned at %v, event seen %v; want at %v", d.Now(), done, 14*us+notice)
	}
	if at, err := d.Time(ev); err != nil || at != 14*us {
		t.Errorf("Time = %v, %v; want the completion, 14µs", at, err)
	}
	// An event recorded on an idle stream is seen NoticeLatency later too.
	idle := r.stream(0)
	ev2, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	at := d.Now()
	if err := d.Record(ev2, idle); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	if done, _ := d.Query(ev2); !done || d.Now() != at+notice {
		t.Errorf("idle-stream record seen at %v (done %v); want %v", d.Now(), done, at+notice)
	}
}

// TestNoticeLatencyTurnaround: one launch in flight, each launched when
// the host sees the previous one complete, as a BE client with a window of
// one: every kernel starts NoticeLatency + LaunchLatency after the one
// before ended, and without NoticeLatency LaunchLatency after.
func TestNoticeLatencyTurnaround(t *testing.T) {
	for _, notice := range []time.Duration{0, 27 * us} {
		r := newRig(t, Config{NoticeLatency: notice})
		d := r.d
		s := r.stream(0)
		ev, err := d.NewEvent()
		if err != nil {
			t.Fatal(err)
		}
		const n, body = 10, 10 * us
		for i := 0; i < n; i++ {
			r.launch(s, plain("k", 1, 32, body))
			if err := d.Record(ev, s); err != nil {
				t.Fatal(err)
			}
			for done := false; !done; {
				if err := d.Wait(context.Background(), time.Second); err != nil {
					t.Fatal(err)
				}
				if done, err = d.Query(ev); err != nil {
					t.Fatal(err)
				}
			}
		}
		end, err := d.Time(ev)
		if err != nil {
			t.Fatal(err)
		}
		lat := d.cfg.LaunchLatency
		if want := n*(lat+body) + (n-1)*notice; end != want {
			t.Errorf("notice %v: last kernel ended at %v; want %v (%d × (launch latency %v + %v) + %d notices)", notice, end, want, n, lat, body, n-1)
		}
	}
}

// TestHostCostByKind: a launch takes the host HostLaunchCost for a
// kernel, HostMatmulCost for a vendor product and HostConvCost for a
// convolution; the two vendor costs default to HostLaunchCost.
func TestHostCostByKind(t *testing.T) {
	mm := gpu.Matmul{M: 1, N: 64, K: 64, In: gpu.BF16, Out: gpu.BF16}
	cv := gpu.Conv{N: 1, H: 8, W: 8, C: 8, OutC: 8, R: 3, S: 3, Stride: 1, Pad: 1, In: gpu.BF16}
	for _, c := range []struct {
		cfg                  Config
		kernel, matmul, conv time.Duration
	}{
		{Config{HostLaunchCost: 8 * us, HostMatmulCost: 11 * us, HostConvCost: 17 * us, BLAS: true}, 8 * us, 11 * us, 17 * us},
		{Config{HostLaunchCost: 5 * us, BLAS: true}, 5 * us, 5 * us, 5 * us},
	} {
		r := newRig(t, c.cfg)
		d, s := r.d, r.stream(0)
		fm, err := d.Matmul(mm)
		if err != nil {
			t.Fatal(err)
		}
		fc, err := d.Conv(cv)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []struct {
			f    gpu.Func
			want time.Duration
		}{{0, c.kernel}, {fm, c.matmul}, {fc, c.conv}, {0, c.kernel}} {
			l := plain("k", 1, 32, us)
			l.Func = k.f
			before := d.Now()
			r.launch(s, l)
			if got := d.Now() - before; got != k.want {
				t.Errorf("%+v: launch of %q took the host %v, want %v", c.cfg, d.FuncName(max(k.f, r.f)), got, k.want)
			}
		}
	}
}

// TestHostQueryCost: a Query takes the host HostQueryCost (the device runs
// on meanwhile) and answers for the moment it was called.
func TestHostQueryCost(t *testing.T) {
	r := newRig(t, Config{HostQueryCost: 3 * us})
	d, s := r.d, r.stream(0)
	ev, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	r.launch(s, plain("k", 1, 32, 10*us)) // runs from 4 to 14 µs
	if err := d.Record(ev, s); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		before := d.Now()
		done, err := d.Query(ev)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Now() - before; got != 3*us {
			t.Fatalf("query %d took the host %v, want 3µs", i, got)
		}
		if done {
			if before < 14*us {
				t.Errorf("query at %v saw a kernel that ends at 14µs", before)
			}
			break
		}
		if i > 10 {
			t.Fatalf("the event never completed (now %v)", d.Now())
		}
	}
}

// TestWakeLatency: a Wait that reaches its deadline returns WakeLatency
// after it (the host's wait loop sees the time at the end of a round); a
// completion seen before then ends the Wait at the completion.
func TestWakeLatency(t *testing.T) {
	const wake = 8 * us
	ctx := context.Background()
	r := newRig(t, Config{WakeLatency: wake})
	d := r.d
	if err := d.Wait(ctx, 100*us); err != nil {
		t.Fatal(err)
	}
	if got, want := d.Now(), 100*us+wake; got != want {
		t.Errorf("idle Wait to 100 µs returned at %v, want %v", got, want)
	}
	s := r.stream(0)
	ev, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	start := d.Now()
	r.launch(s, plain("k", 1, 32, 20*us)) // ends at start + 4 µs latency + 20 µs
	if err := d.Record(ev, s); err != nil {
		t.Fatal(err)
	}
	end := start + gpu.H100SXM.LaunchLatency + 20*us
	if err := d.Wait(ctx, end-2*us); err != nil {
		t.Fatal(err)
	}
	if got := d.Now(); got != end {
		t.Errorf("Wait to 2 µs before a completion returned at %v, want the completion at %v (within its %v lateness)", got, end, wake)
	}
	if err := d.Wait(ctx, d.Now()+50*us); err != nil {
		t.Fatal(err)
	}
	if got, want := d.Now(), end+50*us+wake; got != want {
		t.Errorf("Wait past the completion returned at %v, want %v", got, want)
	}
}

// TestHostCompletionCost: the query that first finds an event recorded by
// Record complete takes HostCompletionCost more than a query; later
// queries of it, queries that find it pending, and a graph's events cost a
// query only.
func TestHostCompletionCost(t *testing.T) {
	r := newRig(t, Config{HostQueryCost: 1 * us, HostCompletionCost: 3 * us})
	d, s := r.d, r.stream(0)
	poll := func(ev gpu.Event) (time.Duration, bool) {
		t.Helper()
		before := d.Now()
		done, err := d.Query(ev)
		if err != nil {
			t.Fatal(err)
		}
		return d.Now() - before, done
	}
	ev, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	r.launch(s, plain("k", 1, 32, 10*us))
	if err := d.Record(ev, s); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		took, done := poll(ev)
		if want := map[bool]time.Duration{false: 1 * us, true: 4 * us}[done]; took != want {
			t.Fatalf("query %d (complete: %v) took the host %v, want %v", i, done, took, want)
		}
		if done {
			break
		}
		if i > 20 {
			t.Fatalf("the event never completed (now %v)", d.Now())
		}
	}
	if took, done := poll(ev); !done || took != 1*us {
		t.Errorf("a second query of the completed event: %v, complete %v; want 1µs", took, done)
	}
	gev, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	gl := plain("g", 1, 32, 10*us)
	gl.Func = r.f
	g, err := d.NewGraph(s, []gpu.GraphStep{{Launch: &gl, Event: gev}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.LaunchGraph(g, s); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		took, done := poll(gev)
		if took != 1*us {
			t.Fatalf("query %d of a graph's event (complete: %v) took the host %v, want 1µs", i, done, took)
		}
		if done {
			break
		}
		if i > 40 {
			t.Fatalf("the graph's event never completed (now %v)", d.Now())
		}
	}
}
