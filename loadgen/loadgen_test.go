package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"atoll/bench"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func uniform(n int, gap time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i) * gap
	}
	return out
}

func cfgFor(sched []time.Duration) Config {
	return Config{Model: "tiny", Schedule: sched, Span: sched[len(sched)-1] + time.Millisecond, MaxInFlight: 64, LateThreshold: time.Second}
}

// A serial server slower than the arrival rate builds a queue, and latency
// measured from the scheduled time shows it: request i cannot finish
// before (i+1) service times, so its latency is at least that minus its
// scheduled time.
func TestSlowServerShowsQueueing(t *testing.T) {
	const service, gap, n = 20 * time.Millisecond, 10 * time.Millisecond, 25
	f := &fakeOIP{serial: true, delay: func(int) time.Duration { return service }}
	c := f.start(t, ClientOptions{MaxInFlight: 64})
	res, err := Run(context.Background(), c, cfgFor(uniform(n, gap)))
	if err != nil {
		t.Fatal(err)
	}
	var done []time.Duration
	for i, r := range res.Records {
		if r.Kind != KindOK {
			t.Fatalf("request %d: %s", i, r.Kind)
		}
		if r.Latency() != r.Done-r.Scheduled {
			t.Errorf("request %d: latency is not completion − scheduled", i)
		}
		done = append(done, r.Done)
	}
	// The server takes requests in any order, but its k-th completion
	// cannot come before k+1 service times.
	slices.Sort(done)
	for k, d := range done {
		if d < time.Duration(k+1)*service {
			t.Errorf("completion %d at %v, before %v of serial service", k, d, time.Duration(k+1)*service)
		}
	}
	rep := Summarize(res)
	// The last request waits for all the others: about n*service − (n−1)*gap.
	wantMax := float64(n*int(service)-(n-1)*int(gap)) / 1e3
	if rep.Total.Latency.Max < wantMax {
		t.Errorf("max latency %.0fµs, want ≥ %.0fµs of queueing", rep.Total.Latency.Max, wantMax)
	}
	if rep.Total.Latency.P50 < 5*float64(service/time.Microsecond) {
		t.Errorf("p50 %.0fµs hides the queue (service %v)", rep.Total.Latency.P50, service)
	}
	if got := f.peak.Load(); got < 2 {
		t.Errorf("peak in-flight at the server %d: the generator waited for answers (closed loop)", got)
	}
}

// Latency counts the generator's lag: a request sent late is measured from
// when it should have gone, and a late send makes the run invalid.
func TestLateSendCountsAgainstSystemAndInvalidates(t *testing.T) {
	ms := time.Millisecond
	res := &Result{Config: Config{Model: "tiny", Span: 100 * ms, MaxInFlight: 4, LateThreshold: 2 * ms, Classes: []Class{{Name: "all", Weight: 1}}},
		Records: []Record{
			{Scheduled: 10 * ms, Sent: 10 * ms, Done: 15 * ms, Kind: KindOK, Measured: true},
			{Scheduled: 20 * ms, Sent: 50 * ms, Done: 55 * ms, Kind: KindOK, Measured: true},
		}}
	rep := Summarize(res)
	if rep.Total.Latency.Max != 35000 {
		t.Errorf("max latency %vµs, want 35000 (from the scheduled time)", rep.Total.Latency.Max)
	}
	if rep.LateSends != 1 || rep.Valid || rep.MaxLagUs != 30000 {
		t.Errorf("late sends %d valid %v max lag %v, want 1 false 30000", rep.LateSends, rep.Valid, rep.MaxLagUs)
	}
}

// A real run with a 1ns threshold is late on every send (sending takes
// time); with a generous one it is valid.
func TestLateDetectionInRun(t *testing.T) {
	f := &fakeOIP{}
	c := f.start(t, ClientOptions{})
	cfg := cfgFor(uniform(20, 2*time.Millisecond))
	cfg.LateThreshold = time.Nanosecond
	res, err := Run(context.Background(), c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep := Summarize(res)
	if rep.LateSends == 0 || rep.Valid {
		t.Errorf("1ns threshold: late %d valid %v", rep.LateSends, rep.Valid)
	}
	var b strings.Builder
	if err := Table(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "INVALID RUN") {
		t.Errorf("table does not say the run is invalid:\n%s", b.String())
	}
	cfg.LateThreshold = time.Second
	res, err = Run(context.Background(), c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep := Summarize(res); !rep.Valid || rep.Total.OK != 20 {
		t.Errorf("1s threshold: valid %v ok %d invalid %v", rep.Valid, rep.Total.OK, rep.Invalid)
	}
	// 41 requests, mostly one at a time: connections are reused (without
	// keep-alive every request opens one).
	if n := f.conns.Load(); n > 20 {
		t.Errorf("%d connections for 41 requests: not reused", n)
	}
}

// naive recomputes a class's counts the obvious way.
type naiveClass struct {
	sched, ok, within, dropped int
	errs                       map[string]int
}

func naive(recs []Record, class int, slo time.Duration) naiveClass {
	n := naiveClass{errs: map[string]int{}}
	for _, r := range recs {
		if !r.Measured || r.Kind == "" || (class >= 0 && r.Class != class) {
			continue
		}
		n.sched++
		if r.Kind == KindOK {
			n.ok++
			if slo > 0 && r.Done-r.Scheduled <= slo {
				n.within++
			}
		} else if r.Kind == KindDropped {
			n.dropped++
		} else {
			n.errs[r.Kind]++
		}
	}
	return n
}

func TestSLOAndGoodputMatchNaive(t *testing.T) {
	kinds := []string{KindOK, KindOK, KindOK, KindOK, KindDropped, KindTimeout, KindTransport, KindHTTP(503), KindHTTP(400), KindBadResponse, ""}
	for seed := uint64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		span := time.Duration(1+rng.IntN(10)) * time.Second
		cfg := Config{Model: "m", Span: span, Warmup: time.Duration(rng.Int64N(int64(span))), SLO: time.Duration(rng.Int64N(int64(50 * time.Millisecond))), MaxInFlight: 8, LateThreshold: time.Millisecond,
			Classes: []Class{{Name: "hp", Priority: 1, Weight: 0.7}, {Name: "be", Priority: 2, Weight: 0.3}}}
		if seed%5 == 0 {
			cfg.SLO = 0
		}
		var recs []Record
		for i := 0; i < rng.IntN(400); i++ {
			s := time.Duration(rng.Int64N(int64(span)))
			lat := time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond))
			recs = append(recs, Record{Class: rng.IntN(2), Scheduled: s, Sent: s, Done: s + lat, Kind: kinds[rng.IntN(len(kinds))], Measured: s >= cfg.Warmup})
		}
		rep := Summarize(&Result{Config: cfg, Records: recs})
		window := (span - cfg.Warmup).Seconds()
		check := func(cr ClassReport, class int) {
			n := naive(recs, class, cfg.SLO)
			if cr.Scheduled != n.sched || cr.OK != n.ok || cr.Dropped != n.dropped || cr.WithinSLO != n.within || cr.Latency.Count != n.ok {
				t.Fatalf("seed %d class %d: counts %+v, naive %+v", seed, class, cr, n)
			}
			for k, v := range n.errs {
				if cr.Errors[k] != v {
					t.Fatalf("seed %d: errors %v, naive %v", seed, cr.Errors, n.errs)
				}
			}
			if len(cr.Errors) != len(n.errs) {
				t.Fatalf("seed %d: errors %v, naive %v", seed, cr.Errors, n.errs)
			}
			if g := naiveGap(recs, class); math.Abs(cr.MaxGapUs-g) > 1e-9 {
				t.Fatalf("seed %d class %d: longest gap %vµs, naive %vµs", seed, class, cr.MaxGapUs, g)
			}
			if math.Abs(cr.Throughput-float64(n.ok)/window) > 1e-9 {
				t.Fatalf("seed %d: throughput %v, naive %v", seed, cr.Throughput, float64(n.ok)/window)
			}
			if cfg.SLO == 0 {
				if cr.SLOAttainment != nil || cr.Goodput != nil {
					t.Fatalf("seed %d: SLO metrics without an SLO", seed)
				}
				return
			}
			if math.Abs(*cr.Goodput-float64(n.within)/window) > 1e-9 {
				t.Fatalf("seed %d: goodput %v, naive %v", seed, *cr.Goodput, float64(n.within)/window)
			}
			if n.sched == 0 {
				if cr.SLOAttainment != nil {
					t.Fatalf("seed %d: attainment of no requests", seed)
				}
				return
			}
			if math.Abs(*cr.SLOAttainment-float64(n.within)/float64(n.sched)) > 1e-12 {
				t.Fatalf("seed %d: attainment %v, naive %v", seed, *cr.SLOAttainment, float64(n.within)/float64(n.sched))
			}
		}
		check(rep.Total, -1)
		for _, cr := range rep.Classes {
			idx := map[string]int{"hp": 0, "be": 1}[cr.Class]
			check(cr, idx)
		}
	}
}

func TestErrorClassification(t *testing.T) {
	faults := []string{"", "400", "503", "500", "close", "garbage", "shortbinary", "hang"}
	want := map[string]string{"400": KindHTTP(400), "503": KindHTTP(503), "500": KindHTTP(500), "close": KindTransport, "garbage": KindBadResponse, "shortbinary": KindBadResponse, "hang": KindTimeout}
	f := &fakeOIP{fault: func(id int) string { return faults[id%len(faults)] }}
	c := f.start(t, ClientOptions{Timeout: time.Second})
	const n = 40
	res, err := Run(context.Background(), c, cfgFor(uniform(n, 3*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	expect := map[string]int{}
	for i, r := range res.Records {
		k, ok := want[faults[i%len(faults)]]
		if !ok {
			k = KindOK
		}
		if r.Kind != k {
			t.Errorf("request %d (fault %q): kind %q, want %q", i, faults[i%len(faults)], r.Kind, k)
		}
		if k != KindOK {
			expect[k]++
		}
	}
	rep := Summarize(res)
	if len(rep.Total.Errors) != len(expect) {
		t.Errorf("errors %v, want %v", rep.Total.Errors, expect)
	}
	for k, v := range expect {
		if rep.Total.Errors[k] != v {
			t.Errorf("errors[%s] = %d, want %d", k, rep.Total.Errors[k], v)
		}
	}
	if rep.Total.OK != n/len(faults) {
		t.Errorf("ok %d, want %d", rep.Total.OK, n/len(faults))
	}
}

func TestMaxInFlightDropsInsteadOfWaiting(t *testing.T) {
	// The server holds each request 1 s; drops happen within the 10 ms of
	// scheduled sends, so anything near 1 s means the generator waited.
	f := &fakeOIP{delay: func(int) time.Duration { return time.Second }}
	c := f.start(t, ClientOptions{MaxInFlight: 2})
	cfg := cfgFor(uniform(10, time.Millisecond))
	cfg.MaxInFlight = 2
	res, err := Run(context.Background(), c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep := Summarize(res)
	if rep.Total.OK != 2 || rep.Total.Dropped != 8 || rep.Total.Sent != 2 {
		t.Errorf("ok %d dropped %d sent %d, want 2 8 2", rep.Total.OK, rep.Total.Dropped, rep.Total.Sent)
	}
	if p := f.peak.Load(); p > 2 {
		t.Errorf("server saw %d in flight, bound is 2", p)
	}
	if rep.Valid || !strings.Contains(strings.Join(rep.Invalid, " "), "dropped 8") {
		t.Errorf("drops not reported as invalidating: %v", rep.Invalid)
	}
	// The dropped requests were due while the first two were outstanding,
	// so the generator did not wait for them (open loop).
	if res.Records[9].Done > 600*time.Millisecond {
		t.Errorf("request 9 dropped at %v: the generator blocked on the bound", res.Records[9].Done)
	}
}

func TestTraceSchedule(t *testing.T) {
	times, err := bench.ReadTrace(strings.NewReader("# trace\n0\n5ms\n5ms\n12000\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeOIP{}
	c := f.start(t, ClientOptions{})
	cfg := cfgFor(times)
	cfg.Warmup = time.Millisecond
	res, err := Run(context.Background(), c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if f.served.Load() != 4 {
		t.Errorf("server got %d requests, want 4", f.served.Load())
	}
	for i, r := range res.Records {
		if r.Scheduled != times[i] || r.Sent < times[i] {
			t.Errorf("request %d scheduled %v sent %v, trace says %v", i, r.Scheduled, r.Sent, times[i])
		}
	}
	rep := Summarize(res)
	if rep.Total.Scheduled != 3 || rep.WarmupSkipped != 1 {
		t.Errorf("measured %d warm-up %d, want 3 and 1", rep.Total.Scheduled, rep.WarmupSkipped)
	}
}

func TestMixSendsPriorities(t *testing.T) {
	classes, err := ParseMix("hp=0.8,be=0.2", "")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeOIP{}
	c := f.start(t, ClientOptions{})
	cfg := cfgFor(uniform(200, 500*time.Microsecond))
	cfg.Classes = classes
	cfg.MaxInFlight = 1000
	res, err := Run(context.Background(), c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	nhp := 0
	for i, r := range res.Records {
		if r.Kind == KindDropped {
			continue // a slow test machine; drops are tested elsewhere
		}
		p, _ := f.prios.Load(i)
		if want := float64(classes[r.Class].Priority); p != want {
			t.Fatalf("request %d (%s) of class %s carried priority %v, want %v", i, r.Kind, classes[r.Class].Name, p, want)
		}
		if classes[r.Class].Name == "hp" {
			nhp++
		}
	}
	if nhp < 130 || nhp > 185 { // binomial(200, 0.8): mean 160, sd 5.7
		t.Errorf("%d of 200 requests were hp, want about 160", nhp)
	}
	rep := Summarize(res)
	if len(rep.Classes) != 2 || rep.Classes[0].Scheduled+rep.Classes[1].Scheduled != rep.Total.Scheduled {
		t.Errorf("class rows do not add up: %+v", rep.Classes)
	}

	// One class without a priority sends no priority parameter.
	res, err = Run(context.Background(), c, cfgFor(uniform(3, time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := f.prios.Load(0); !ok || p != nil {
		t.Errorf("no-priority request carried priority %v", p)
	}
	_ = res
}

func TestInterruptStopsAndCancels(t *testing.T) {
	f := &fakeOIP{fault: func(int) string { return "hang" }}
	c := f.start(t, ClientOptions{Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cancelled time.Time
	go func() { // cancel once the server holds two hung requests
		for f.inflight.Load() < 2 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		cancelled = time.Now()
		cancel()
	}()
	cfg := cfgFor(uniform(100, 20*time.Millisecond))
	res, err := Run(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(cancelled); d > time.Second {
		t.Errorf("Run returned %v after the cancel", d)
	}
	rep := Summarize(res)
	if !res.Interrupted || rep.Valid {
		t.Errorf("interrupted %v valid %v", res.Interrupted, rep.Valid)
	}
	if rep.Total.Errors[KindCancelled] == 0 || rep.Total.Scheduled >= 100 {
		t.Errorf("after interrupt: %+v", rep.Total)
	}
}

func TestBadInput(t *testing.T) {
	for _, u := range []string{"", "ftp://127.0.0.1", "http://", "127.0.0.1:8080", "http://127.0.0.1:8080/?x=1", "http://u:p@127.0.0.1", "http://[::1"} {
		if _, err := NewClient(u, ClientOptions{}); !errors.Is(err, ErrURL) {
			t.Errorf("NewClient(%q): %v, want ErrURL", u, err)
		}
	}
	if _, err := NewClient("http://127.0.0.1:1", ClientOptions{MaxInFlight: MaxInFlightCap + 1}); !errors.Is(err, ErrConfig) {
		t.Errorf("over-cap in-flight: %v", err)
	}
	for _, m := range []string{"", "a/b", "../x", " x", "x?y", strings.Repeat("a", 200)} {
		if err := CheckModel(m); !errors.Is(err, ErrModel) {
			t.Errorf("CheckModel(%q): %v", m, err)
		}
	}
	f := &fakeOIP{}
	c := f.start(t, ClientOptions{})
	_, err := Run(context.Background(), c, Config{Model: "nope", Schedule: uniform(2, time.Millisecond), Span: time.Second, MaxInFlight: 1})
	if !errors.Is(err, ErrUnknownModel) || !strings.Contains(err.Error(), `unknown model \"nope\"`) && !strings.Contains(err.Error(), "server says") {
		t.Errorf("unknown model: %v", err)
	}
	bad := []Config{
		{Model: "tiny", Span: time.Second, MaxInFlight: 1},
		{Model: "tiny", Schedule: uniform(2, time.Millisecond), Span: time.Second},
		{Model: "tiny", Schedule: uniform(2, time.Millisecond), Span: time.Second, MaxInFlight: 1, Warmup: time.Second},
		{Model: "tiny", Schedule: []time.Duration{5, 1}, Span: time.Second, MaxInFlight: 1},
		{Model: "tiny", Schedule: uniform(2, 2*time.Second), Span: time.Second, MaxInFlight: 1},
		{Model: "tiny", Schedule: uniform(2, time.Millisecond), Span: 2 * MaxDuration, MaxInFlight: 1},
		{Model: "tiny", Schedule: uniform(2, time.Millisecond), Span: time.Second, MaxInFlight: 1, Classes: []Class{{Name: "a", Weight: 0}}},
	}
	for i, cfg := range bad {
		if _, err := Run(context.Background(), c, cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("config %d: %v, want ErrConfig", i, err)
		}
	}
	for _, mix := range [][2]string{{"hp", ""}, {"hp=0", ""}, {"hp=-1", ""}, {"hp=0.5,hp=0.5", ""}, {"x=1", ""}, {"hp=1", "hp=0"}, {"hp=1", "hp"}} {
		if _, err := ParseMix(mix[0], mix[1]); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseMix(%q, %q): %v", mix[0], mix[1], err)
		}
	}
	if cs, err := ParseMix("x=3,hp=1", "x=4"); err != nil || cs[0].Priority != 4 || cs[0].Weight != 0.75 {
		t.Errorf("ParseMix with a custom class: %+v %v", cs, err)
	}

	// Nobody listening: a server error that says what to check.
	srv := httptest.NewServer(nil)
	dead := srv.URL
	srv.Close()
	dc, err := NewClient(dead, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if _, err := dc.Metadata(context.Background(), "tiny"); !errors.Is(err, ErrServer) || !strings.Contains(err.Error(), "atoll serve") {
		t.Errorf("dead server: %v", err)
	}
}

func TestNewBody(t *testing.T) {
	m := &Metadata{Name: "m", Inputs: []TensorMeta{
		{Name: "img", Datatype: "FP16", Shape: []int64{-1, 2, 2}},
		{Name: "ids", Datatype: "INT64", Shape: []int64{-1, 3}},
		{Name: "mask", Datatype: "BOOL", Shape: []int64{2}},
	}}
	b, err := NewBody(m, 4, 3, 9, DataJSON)
	if err != nil {
		t.Fatal(err)
	}
	var req struct {
		ID         string         `json:"id"`
		Parameters map[string]any `json:"parameters"`
		Inputs     []struct {
			Name     string          `json:"name"`
			Shape    []int64         `json:"shape"`
			Datatype string          `json:"datatype"`
			Data     json.RawMessage `json:"data"`
		} `json:"inputs"`
	}
	if err := json.Unmarshal(b.Bytes(42), &req); err != nil {
		t.Fatalf("%v: %s", err, b.Bytes(42))
	}
	if req.ID != "42" || req.Parameters["priority"] != 3.0 || len(req.Inputs) != 3 {
		t.Fatalf("body %s", b.Bytes(42))
	}
	var f []float64
	json.Unmarshal(req.Inputs[0].Data, &f)
	var ints []float64
	json.Unmarshal(req.Inputs[1].Data, &ints)
	var bools []bool
	json.Unmarshal(req.Inputs[2].Data, &bools)
	if len(f) != 16 || len(ints) != 12 || len(bools) != 2 {
		t.Errorf("lengths %d %d %d, want 16 12 2 (batch 4)", len(f), len(ints), len(bools))
	}
	for _, v := range ints {
		if v != math.Trunc(v) {
			t.Errorf("INT64 value %v", v)
		}
	}
	for _, v := range f {
		if v < -1 || v >= 1 {
			t.Errorf("FP16 value %v out of [-1, 1)", v)
		}
	}
	b2, _ := NewBody(m, 4, 3, 9, DataJSON)
	if string(b2.Bytes(1)) != string(b.Bytes(1)) {
		t.Error("same seed gave different bodies")
	}
	b3, _ := NewBody(m, 4, 0, 10, DataJSON)
	if string(b3.Bytes(1)) == string(b.Bytes(1)) || strings.Contains(string(b3.Bytes(1)), "priority") {
		t.Error("seed or priority ignored")
	}
	for _, bad := range []*Metadata{
		{Name: "m", Inputs: []TensorMeta{{Name: "s", Datatype: "BYTES", Shape: []int64{1}}}},
		{Name: "m", Inputs: []TensorMeta{{Name: "s", Datatype: "FP32", Shape: []int64{1 << 20, 1 << 20}}}},
	} {
		if _, err := NewBody(bad, 1, 0, 1, DataJSON); !errors.Is(err, ErrConfig) {
			t.Errorf("NewBody(%v): %v", bad.Inputs, err)
		}
	}
	if _, err := NewBody(m, 0, 0, 1, DataJSON); !errors.Is(err, ErrConfig) {
		t.Errorf("batch 0: %v", err)
	}
}

// The table has a row per class and a total, shows "-" for metrics without
// samples, and lists errors by kind; the JSON round-trips.
func TestTableAndJSON(t *testing.T) {
	ms := time.Millisecond
	res := &Result{URL: "http://127.0.0.1:8080", Config: Config{Model: "m", Span: time.Second, MaxInFlight: 4, SLO: 10 * ms, LateThreshold: 2 * ms,
		Classes: []Class{{Name: "hp", Priority: 1, Weight: 0.5}, {Name: "be", Priority: 2, Weight: 0.5}}},
		Records: []Record{
			{Class: 0, Scheduled: 0, Sent: 0, Done: 5 * ms, Kind: KindOK, Measured: true},
			{Class: 0, Scheduled: ms, Sent: ms, Done: 30 * ms, Kind: KindOK, Measured: true},
			{Class: 1, Scheduled: 2 * ms, Sent: 2 * ms, Done: 3 * ms, Kind: KindHTTP(503), Measured: true},
			{Class: 1, Scheduled: 3 * ms, Done: 3 * ms, Kind: KindDropped, Measured: true},
		}}
	rep := Summarize(res)
	var b strings.Builder
	if err := Table(&b, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"│    be │", "│    hp │", "│   all │", "http-503:1", "≤10ms", "50.00%", "INVALID RUN", "dropped 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// be has no successful request: its latency columns are "-".
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "│    be │") && !strings.Contains(line, "│      - │") {
			t.Errorf("be row shows latencies without samples: %s", line)
		}
	}
	var js strings.Builder
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal([]byte(js.String()), &back); err != nil {
		t.Fatal(err)
	}
	if back.Total.OK != 2 || back.Total.WithinSLO != 1 || *back.Total.SLOAttainment != 0.25 || len(back.Classes) != 2 || back.Valid {
		t.Errorf("JSON round trip: %+v", back.Total)
	}
}

// naiveGap is the longest time between two successful measured completions
// of class (-1: all) with no other between them, by comparing every pair.
func naiveGap(recs []Record, class int) float64 {
	var ok []time.Duration
	for _, r := range recs {
		if r.Measured && r.Kind == KindOK && (class < 0 || r.Class == class) {
			ok = append(ok, r.Done)
		}
	}
	longest := 0.0
	for _, a := range ok {
		for _, b := range ok {
			if b <= a {
				continue
			}
			between := false
			for _, c := range ok {
				between = between || c > a && c < b
			}
			if g := float64(b-a) / float64(time.Microsecond); !between && g > longest {
				longest = g
			}
		}
	}
	return longest
}
