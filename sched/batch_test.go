package sched_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"atoll/internal/pcg"
	"atoll/policies"
	"atoll/profiles"
	"atoll/sched"
)

// batchedHP is an HP model of two kernels per pass: 100 µs each for one
// request, 150 µs for two, 200 µs for four.
func batchedHP(t testing.TB) (*profiles.Profile, []*profiles.Profile) {
	t.Helper()
	pass := func(batch int, dur string) *profiles.Profile {
		p := mustProfile(t, "hp", "a dur="+dur+" grid=132 block=256\nb dur="+dur+" grid=132 block=256")
		p.Batch = batch
		return p
	}
	return pass(1, "100us"), []*profiles.Profile{pass(2, "150us"), pass(4, "200us")}
}

func runBatched(t *testing.T, policy string, arrivals []time.Duration, dur time.Duration, batched bool) *sched.Trace {
	t.Helper()
	one, more := batchedHP(t)
	w := sched.Workload{HP: []sched.HPWorkload{{Name: "hp", Profile: one, Arrivals: arrivals}}}
	if batched {
		w.HP[0].Batched = more
	}
	pol, err := policies.ByName(policy)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: pol, Duration: dur})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Requests) != len(arrivals) {
		t.Fatalf("%d requests finished, want %d", len(tr.Requests), len(arrivals))
	}
	slices.SortFunc(tr.Requests, func(a, b sched.RequestRecord) int { return cmp.Compare(a.ID, b.ID) })
	return tr
}

// Requests that queue behind a pass are served by the next pass together:
// the largest batch that does not exceed them.
func TestBatchedPassServesWaitingRequests(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	// 0 runs alone (0–200 µs); 1–5 wait: 4 of them go in one pass of four
	// (200–600 µs), the fifth alone after it (600–800 µs).
	arr := []time.Duration{0, us(10), us(20), us(30), us(40), us(50)}
	tr := runBatched(t, "priority", arr, 2*time.Millisecond, true)
	wantBatch := []int{1, 4, 4, 4, 4, 1}
	wantEnd := []time.Duration{us(200), us(600), us(600), us(600), us(600), us(800)}
	for i, r := range tr.Requests {
		end := r.End - tr.Start
		if r.Batch != wantBatch[i] || end < wantEnd[i] || end > wantEnd[i]+us(30) {
			t.Errorf("request %d: batch %d, end %v; want batch %d, end %v (+30 µs)", r.ID, r.Batch, end, wantBatch[i], wantEnd[i])
		}
		if got := r.Solo + r.Causes.Sum(); got != r.Latency() {
			t.Errorf("request %d: solo %v + causes %v = %v, latency %v", r.ID, r.Solo, r.Causes.Sum(), got, r.Latency())
		}
	}
	if tr.Requests[1].Solo != us(400) {
		t.Errorf("a request of a pass of four: solo %v, want the pass's 400 µs", tr.Requests[1].Solo)
	}
	// Without batched profiles the same arrivals are served one by one.
	tr = runBatched(t, "priority", arr, 2*time.Millisecond, false)
	if last := tr.Requests[5]; last.Batch != 1 || last.End-tr.Start < us(1200) {
		t.Errorf("unbatched: last request batch %d, end %v; want 1, ≥ 1.2 ms", last.Batch, last.End-tr.Start)
	}
}

// Property: under random arrivals, with every policy, every request is
// served once by a pass of a batch size the client has, the requests of
// one pass share its start and end, passes of the client do not overlap,
// no request starts before it arrives, and each pass is the largest batch
// that the requests waiting when it started allow.
func TestBatchedPassesProperty(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	largest := func(waiting int) int {
		b := 0
		for _, s := range []int{1, 2, 4} {
			if s <= waiting {
				b = s
			}
		}
		return b
	}
	for _, policy := range []string{"priority", "reef", "orion", "atoll"} {
		for seed := range uint64(5) {
			rng := pcg.New(seed, 7)
			var arr []time.Duration
			for a := time.Duration(0); a < 8*time.Millisecond; a += us(1 + int(rng.Uint64()%250)) {
				arr = append(arr, a)
			}
			tr := runBatched(t, policy, arr, 20*time.Millisecond, true)
			type pass struct {
				start, end time.Duration
				n, batch   int
			}
			var passes []pass
			byEnd := map[time.Duration]int{}
			for _, r := range tr.Requests {
				if r.Start < r.Arrival {
					t.Fatalf("%s seed %d: request %d starts %v before it arrives %v", policy, seed, r.ID, r.Start, r.Arrival)
				}
				i, ok := byEnd[r.End]
				if !ok {
					i = len(passes)
					byEnd[r.End] = i
					passes = append(passes, pass{start: r.Start, end: r.End, batch: r.Batch})
				}
				p := &passes[i]
				p.n++
				if p.start != r.Start || p.batch != r.Batch {
					t.Fatalf("%s seed %d: request %d (start %v, batch %d) ends with a pass that started %v with batch %d", policy, seed, r.ID, r.Start, r.Batch, p.start, p.batch)
				}
			}
			slices.SortFunc(passes, func(a, b pass) int { return cmp.Compare(a.start, b.start) })
			batches := 0
			for i, p := range passes {
				if p.n != p.batch || largest(p.batch) != p.batch {
					t.Fatalf("%s seed %d: pass at %v served %d requests as batch %d", policy, seed, p.start, p.n, p.batch)
				}
				if i > 0 && p.start < passes[i-1].end {
					t.Fatalf("%s seed %d: pass at %v overlaps the one ending %v", policy, seed, p.start, passes[i-1].end)
				}
				// Waiting when it started: arrived, not served by an
				// earlier pass. The start is observed a little after the
				// pass is formed; arrivals within 20 µs of it may fall
				// either side.
				lo, hi := 0, 0
				for _, r := range tr.Requests {
					if r.End >= p.end {
						if r.Arrival < p.start-us(20) {
							lo++
						}
						if r.Arrival <= p.start {
							hi++
						}
					}
				}
				if p.batch < largest(lo) || p.batch > largest(hi) {
					t.Fatalf("%s seed %d: pass at %v has batch %d; %d to %d requests waited", policy, seed, p.start, p.batch, lo, hi)
				}
				if p.batch > 1 {
					batches++
				}
			}
			if batches == 0 {
				t.Errorf("%s seed %d: no pass served more than one request (%d requests)", policy, seed, len(arr))
			}
		}
	}
}

func TestBatchedProfilesRefused(t *testing.T) {
	one, more := batchedHP(t)
	other := *more[0]
	other.Model = "other"
	pol, _ := policies.ByName("priority")
	for _, c := range []struct {
		name    string
		batched []*profiles.Profile
		want    string
	}{
		{"another model", []*profiles.Profile{&other}, "the client serves"},
		{"descending", []*profiles.Profile{more[1], more[0]}, "ascending"},
		{"the request's batch", []*profiles.Profile{one}, "ascending"},
		{"too many", slices.Repeat([]*profiles.Profile{more[0]}, sched.MaxBatched+1), "at most"},
	} {
		w := sched.Workload{HP: []sched.HPWorkload{{Name: "hp", Profile: one, Batched: c.batched, Arrivals: []time.Duration{0}}}}
		_, err := sched.Run(context.Background(), newSim(t), w, sched.Options{Policy: pol, Duration: time.Millisecond})
		if !errors.Is(err, sched.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want ErrConfig mentioning %q", c.name, err, c.want)
		}
	}
}

func TestBatchSizes(t *testing.T) {
	for n, want := range map[int][]int{0: nil, 1: nil, 2: {2}, 3: {2, 3}, 8: {2, 4, 8}, 12: {2, 4, 8, 12}} {
		if got := sched.BatchSizes(n); !slices.Equal(got, want) {
			t.Errorf("BatchSizes(%d) = %v, want %v", n, got, want)
		}
	}
}
