package sched_test

import (
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"atoll/policies"
	"atoll/profiles"
	"atoll/sched"
)

// lazy never launches anything: Run must notice it is stuck.
type lazy struct{}

func (lazy) Name() string                         { return "lazy" }
func (lazy) Streams() sched.StreamPlan            { return sched.PriorityPlan }
func (lazy) Start(*sched.State) error             { return nil }
func (lazy) Schedule(*sched.State, time.Duration) {}

func TestRunStuck(t *testing.T) {
	w := smallWorkload(t, time.Millisecond, 3*time.Millisecond)
	_, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: lazy{}, Duration: 3 * time.Millisecond})
	if !errors.Is(err, sched.ErrStuck) {
		t.Fatalf("got %v, want ErrStuck", err)
	}
	if !strings.Contains(err.Error(), "hp0: 3 requests") {
		t.Errorf("error %q does not describe the stuck state", err)
	}
}

func TestRunCancelled(t *testing.T) {
	w := smallWorkload(t, time.Millisecond, 3*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	pol, _ := policies.ByName("atoll")
	_, err := sched.Run(ctx, newSim(t), w, sched.Options{Policy: pol, Duration: 3 * time.Millisecond})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestRunBadInput(t *testing.T) {
	pol, _ := policies.ByName("priority")
	good := smallWorkload(t, time.Millisecond, 3*time.Millisecond)
	unsorted := smallWorkload(t, time.Millisecond, 3*time.Millisecond)
	unsorted.HP[0].Arrivals = []time.Duration{2 * time.Millisecond, time.Millisecond}
	empty := smallWorkload(t, time.Millisecond, 3*time.Millisecond)
	empty.BE[0].Profile = &profiles.Profile{Model: "empty"}
	zeroDur := smallWorkload(t, time.Millisecond, 3*time.Millisecond)
	zp := *zeroDur.HP[0].Profile
	zp.Kernels = append([]profiles.Kernel(nil), zp.Kernels...)
	zp.Kernels[1].DurationUs = 0
	zeroDur.HP[0].Profile = &zp
	for _, c := range []struct {
		name string
		w    sched.Workload
		opt  sched.Options
		want string
	}{
		{"no policy", good, sched.Options{Duration: time.Millisecond}, "no policy"},
		{"no duration", good, sched.Options{Policy: pol}, "duration"},
		{"warm-up past the end", good, sched.Options{Policy: pol, Duration: time.Millisecond, Warmup: 2 * time.Millisecond}, "warm-up"},
		{"unsorted arrivals", unsorted, sched.Options{Policy: pol, Duration: time.Millisecond}, "ascending"},
		{"empty profile", empty, sched.Options{Policy: pol, Duration: time.Millisecond}, "no kernels"},
		{"zero duration kernel", zeroDur, sched.Options{Policy: pol, Duration: time.Millisecond}, "durationUs"},
		{"no clients", sched.Workload{}, sched.Options{Policy: pol, Duration: time.Millisecond}, "no clients"},
	} {
		_, err := sched.Run(context.Background(), newSim(t), c.w, c.opt)
		if !errors.Is(err, sched.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want ErrConfig mentioning %q", c.name, err, c.want)
		}
	}
	if _, err := sched.Run(context.Background(), nil, good, sched.Options{Policy: pol, Duration: time.Millisecond}); !errors.Is(err, sched.ErrConfig) {
		t.Errorf("nil device: got %v, want ErrConfig", err)
	}
}

// TestRunDeterministic: the simulator is deterministic, so two runs give the
// same trace.
func TestRunDeterministic(t *testing.T) {
	w := smallWorkload(t, 900*time.Microsecond, 10*time.Millisecond)
	var lat [2][]time.Duration
	var work [2]time.Duration
	for i := range 2 {
		pol, _ := policies.ByName("atoll")
		tr, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: pol, Duration: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range tr.Requests {
			lat[i] = append(lat[i], r.Latency())
		}
		work[i] = tr.BEWork
	}
	if work[0] != work[1] || len(lat[0]) != len(lat[1]) {
		t.Fatalf("runs differ: work %v vs %v, %d vs %d requests", work[0], work[1], len(lat[0]), len(lat[1]))
	}
	for i := range lat[0] {
		if lat[0][i] != lat[1][i] {
			t.Fatalf("request %d: %v vs %v", i, lat[0][i], lat[1][i])
		}
	}
}

// TestRunDecisionLog: OnDecision sees every launch; the trace counts them.
func TestRunDecisionLog(t *testing.T) {
	w := smallWorkload(t, time.Millisecond, 5*time.Millisecond)
	pol, _ := policies.ByName("reef")
	launches, padded := 0, 0
	tr, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: pol, Duration: 5 * time.Millisecond,
		OnDecision: func(d sched.Decision) {
			if d.Kind == sched.DecLaunch {
				launches++
				if d.Launch.Pad.Blocks > 0 {
					padded++
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if launches != tr.Launches || padded != tr.PaddedLaunches || launches == 0 {
		t.Errorf("log saw %d launches (%d padded), trace says %d (%d)", launches, padded, tr.Launches, tr.PaddedLaunches)
	}
}

// TestRunGroupRoutesToLeastBusy: the clients of an HPWorkload.Group serve
// one stream of arrivals, each arrival going to the member with the fewest
// requests unfinished (the first on a tie): a request arriving while
// another runs goes to the idle member, so the two run at once; one
// arriving once both are idle goes to the first. A group whose members run
// different profiles is refused.
func TestRunGroupRoutesToLeastBusy(t *testing.T) {
	w := smallWorkload(t, time.Millisecond, 3*time.Millisecond) // HP request ≈ 400 µs of kernels
	hp := w.HP[0]
	hp.Group = "hp"
	hp.Arrivals = []time.Duration{0, 50 * time.Microsecond, 100 * time.Microsecond, 2 * time.Millisecond}
	w.HP = []sched.HPWorkload{hp, {Name: "hp", Profile: hp.Profile, Group: "hp"}}
	w.BE = nil
	pol, _ := policies.ByName("priority")
	tr, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: pol, Duration: 3 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Requests) != 4 {
		t.Fatalf("%d requests completed, want 4", len(tr.Requests))
	}
	client := map[int]int{}
	for _, r := range tr.Requests {
		client[r.ID] = r.Client.Index
	}
	// 0: both idle → first; 1: the first busy → second; 2: one each → first; 3: both idle → first.
	if want := map[int]int{0: 0, 1: 1, 2: 0, 3: 0}; !maps.Equal(client, want) {
		t.Errorf("request → client %v, want %v", client, want)
	}

	other := *hp.Profile
	other.Kernels = other.Kernels[:3]
	w.HP[1].Profile = &other
	if _, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: pol, Duration: 3 * time.Millisecond}); !errors.Is(err, sched.ErrConfig) || !strings.Contains(err.Error(), "different profiles") {
		t.Errorf("a group of two profiles: %v, want ErrConfig", err)
	}
}

// A group of more than MaxGroup clients is refused.
func TestRunGroupTooLarge(t *testing.T) {
	w := smallWorkload(t, time.Millisecond, 3*time.Millisecond)
	hp := w.HP[0]
	hp.Group = "hp"
	w.HP = nil
	for range sched.MaxGroup + 1 {
		w.HP = append(w.HP, hp)
	}
	pol, _ := policies.ByName("priority")
	if _, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: pol, Duration: 3 * time.Millisecond}); !errors.Is(err, sched.ErrConfig) || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a group of %d: %v, want ErrConfig", sched.MaxGroup+1, err)
	}
}

// TestRunHPBusySplit checks the trace's HP busy time against the union of
// the requests' [arrival, end] intervals inside the measured window, and
// that the BE work finished beside busy HP is a part of all BE work: both
// with HP nearly idle and with HP busy most of the time.
func TestRunHPBusySplit(t *testing.T) {
	for _, period := range []time.Duration{3 * time.Millisecond, 700 * time.Microsecond} {
		w := smallWorkload(t, period, 60*time.Millisecond)
		pol, _ := policies.ByName("atoll")
		warm, dur := 5*time.Millisecond, 60*time.Millisecond
		tr, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: pol, Warmup: warm, Duration: dur})
		if err != nil {
			t.Fatal(err)
		}
		// The requests of one client run in order: their intervals merge
		// where one arrives before the previous ends.
		var busy, end time.Duration
		start := time.Duration(-1)
		flush := func() {
			if start >= 0 {
				busy += max(0, min(end, dur)-max(start, warm))
			}
		}
		for _, q := range tr.Requests {
			a := q.Arrival - tr.Start
			e := q.End - tr.Start
			if start >= 0 && a <= end {
				end = max(end, e)
				continue
			}
			flush()
			start, end = a, e
		}
		flush()
		// HPBusy is the core's view: a request's arrival the host feeds
		// before it has seen the previous request's completion (the
		// device's time of which is earlier) bridges the gap between the
		// two, which the records' union keeps; a few such gaps of the
		// host's notice latency separate the two figures.
		if d := tr.HPBusy - busy; d < -50*time.Microsecond || d > 50*time.Microsecond {
			t.Errorf("period %v: HPBusy %v, the requests' union in the window %v", period, tr.HPBusy, busy)
		}
		if tr.BEWorkHPBusy < 0 || tr.BEWorkHPBusy > tr.BEWork || tr.BEWork == 0 {
			t.Errorf("period %v: BE work beside busy HP %v of %v", period, tr.BEWorkHPBusy, tr.BEWork)
		}
		if share := float64(tr.HPBusy) / float64(tr.Window()); period < time.Millisecond && share < 0.4 || period > time.Millisecond && share > 0.4 {
			t.Errorf("period %v: HP busy %.0f %% of the window", period, 100*share)
		}
	}
}

// BE's stream beside busy HP: dedicated never launches BE, so BE is dry
// for all of HP's busy time; atoll with BE confined to its partition keeps
// BE queued nearly throughout.
func TestRunBEDryBesideBusyHP(t *testing.T) {
	w := smallWorkload(t, 700*time.Microsecond, 60*time.Millisecond)
	dry := map[string]float64{}
	for _, name := range []string{"dedicated", "atoll:admission=confined"} {
		pol, err := policies.ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: pol, Warmup: 5 * time.Millisecond, Duration: 60 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		bd := tr.BEDryHPBusy()
		if tr.HPBusy <= 0 || bd < 0 || bd > tr.HPBusy+time.Microsecond {
			t.Fatalf("%s: BE dry %v of HP busy %v", name, bd, tr.HPBusy)
		}
		dry[name] = float64(bd) / float64(tr.HPBusy)
	}
	if math.Abs(dry["dedicated"]-1) > 1e-3 || dry["atoll:admission=confined"] > 0.2 {
		t.Errorf("BE's stream empty while HP busy: dedicated %.4f (want 1), confined atoll %.2f (want ≤ 0.2)", dry["dedicated"], dry["atoll:admission=confined"])
	}
}

// BEDryHPBusy by hand: HP busy is the union of the requests' intervals in
// the window, BE dry where every client's stream is empty.
// us, req and sp write the traces of the by-hand tests below in µs.
func us(v int) time.Duration { return time.Duration(v) * time.Microsecond }

func req(a, e int) sched.RequestRecord { return sched.RequestRecord{Arrival: us(a), End: us(e)} }

func sp(f, to int) sched.Span { return sched.Span{From: us(f), To: us(to)} }

func TestTraceBEDryHPBusy(t *testing.T) {
	tr := sched.Trace{Start: us(1000), Warmup: us(10), Duration: us(100),
		Requests: []sched.RequestRecord{req(1005, 1020), req(1015, 1030), req(1050, 1060)}}
	// HP busy in the window [1010, 1100): [1010, 1030) and [1050, 1060).
	tr.BEEmpty = [][]sched.Span{{sp(1000, 1012), sp(1025, 1055), sp(1058, 1200)}, {sp(1000, 1100)}}
	if got, want := tr.BEDryHPBusy(), us(2+5+5+2); got != want {
		t.Errorf("two clients, the second always empty: %v, want %v", got, want)
	}
	tr.BEEmpty[1] = []sched.Span{sp(1000, 1026)}
	if got, want := tr.BEDryHPBusy(), us(2+1); got != want {
		t.Errorf("both empty only until 1026: %v, want %v", got, want)
	}
	tr.BEEmpty = nil
	if got := tr.BEDryHPBusy(); got != 0 {
		t.Errorf("no BE clients: %v, want 0", got)
	}
}

// BEDryGaps by hand: the empty spans that begin in the window while HP is
// busy, whole, every client's.
func TestTraceBEDryGaps(t *testing.T) {
	tr := sched.Trace{Start: us(1000), Warmup: us(10), Duration: us(100),
		Requests: []sched.RequestRecord{req(1005, 1020), req(1015, 1030), req(1050, 1060)}}
	// HP busy [1005, 1030) and [1050, 1060); the window [1010, 1100).
	tr.BEEmpty = [][]sched.Span{
		{sp(1006, 1012), sp(1012, 1014), sp(1025, 1055), sp(1040, 1045), sp(1058, 1200)},
		{sp(1020, 1021), sp(1100, 1110)},
	}
	// 1006: before the window; 1012, 1025, 1058 and 1020 in HP busy time;
	// 1040: HP idle; 1100: past the window.
	got := tr.BEDryGaps()
	want := []time.Duration{us(2), us(30), us(142), us(1)}
	if !slices.Equal(got, want) {
		t.Errorf("gaps %v, want %v", got, want)
	}
	// Requests are recorded as they complete: with several HP clients
	// not in arrival order. The same busy time, the same gaps.
	tr.Requests = []sched.RequestRecord{req(1050, 1060), req(1015, 1030), req(1005, 1020)}
	if got := tr.BEDryGaps(); !slices.Equal(got, want) {
		t.Errorf("requests out of arrival order: gaps %v, want %v", got, want)
	}
	tr.BEEmpty = nil
	if g := tr.BEDryGaps(); len(g) != 0 {
		t.Errorf("no BE clients: %v", g)
	}
}
