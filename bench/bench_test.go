package bench

import (
	"bytes"
	"errors"
	"math"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestArrivalsDeterministicAndRate(t *testing.T) {
	for _, p := range []string{Poisson, Uniform, Bursty} {
		a, err := Arrivals(p, 500, 20*time.Second, 7, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Arrivals(p, 500, 20*time.Second, 7, 0)
		if len(a) != len(b) {
			t.Fatalf("%s: same seed gave %d and %d arrivals", p, len(a), len(b))
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s: arrival %d differs: %v vs %v", p, i, a[i], b[i])
			}
		}
		if !sort.SliceIsSorted(a, func(i, j int) bool { return a[i] < a[j] }) {
			t.Fatalf("%s: arrivals not sorted", p)
		}
		if a[len(a)-1] >= 20*time.Second {
			t.Fatalf("%s: arrival past span: %v", p, a[len(a)-1])
		}
		// 10000 expected; the log-normal process with sigma 1 is the noisiest.
		if r := Rate(a, 20*time.Second); math.Abs(r-500)/500 > 0.05 {
			t.Errorf("%s: rate %.1f, want 500 ± 5%%", p, r)
		}
		c, _ := Arrivals(p, 500, 20*time.Second, 8, 0)
		if p != Uniform && len(c) == len(a) && c[10] == a[10] {
			t.Errorf("%s: a different seed gave the same sequence", p)
		}
	}
}

func TestPoissonGapsAreExponential(t *testing.T) {
	a, _ := Arrivals(Poisson, 1000, 50*time.Second, 1, 0)
	// For an exponential distribution the coefficient of variation is 1.
	var gaps []float64
	for i := 1; i < len(a); i++ {
		gaps = append(gaps, float64(a[i]-a[i-1]))
	}
	var m, v float64
	for _, g := range gaps {
		m += g
	}
	m /= float64(len(gaps))
	for _, g := range gaps {
		v += (g - m) * (g - m)
	}
	cv := math.Sqrt(v/float64(len(gaps))) / m
	if math.Abs(cv-1) > 0.05 {
		t.Errorf("coefficient of variation %.3f, want ≈1", cv)
	}
}

func TestArrivalsBadInput(t *testing.T) {
	cases := []struct {
		p    string
		rate float64
		span time.Duration
		sig  float64
		want string
	}{
		{"poisson", 0, time.Second, 0, "rate must be"},
		{"poisson", math.Inf(1), time.Second, 0, "rate must be"},
		{"poisson", math.NaN(), time.Second, 0, "rate must be"},
		{"poisson", 10, 0, 0, "span"},
		{"zipf", 10, time.Second, 0, `unknown process "zipf"`},
		{"trace", 10, time.Second, 0, "read from a file"},
		{"lognormal", 10, time.Second, -1, "sigma"},
	}
	for _, c := range cases {
		_, err := Arrivals(c.p, c.rate, c.span, 1, c.sig)
		if err == nil || !errors.Is(err, ErrArrivals) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Arrivals(%q, %v, %v): err = %v, want %q", c.p, c.rate, c.span, err, c.want)
		}
	}
}

func TestReadTrace(t *testing.T) {
	// Microseconds with three decimals (what a matrix writes) come back
	// to the nanosecond.
	got, err := ReadTrace(strings.NewReader("# arrivals\n0\n250\n1.5ms\n\n2ms\n2750.278\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 250 * time.Microsecond, 1500 * time.Microsecond, 2 * time.Millisecond, 2750278 * time.Nanosecond}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	bad := map[string]string{
		"":                 "no arrival times",
		"10\nfoo\n":        "line 2",
		"10\n5\n":          "line 2: time 5µs is before",
		"-3\n":             "negative",
		"1\n2\nNaN\n":      "line 3",
		"# only comment\n": "no arrival times",
	}
	for in, want := range bad {
		_, err := ReadTrace(strings.NewReader(in))
		if err == nil || !errors.Is(err, ErrArrivals) || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadTrace(%q) = %v, want error containing %q", in, err, want)
		}
	}
}

// naivePercentile is Hyndman & Fan type 7 (linear interpolation between
// closest ranks, NumPy's default), the method montanaflynn/stats documents,
// written out independently.
func naivePercentile(xs []float64, p float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	h := p / 100 * float64(len(s)-1)
	lo := math.Floor(h)
	if int(lo)+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[int(lo)] + (h-lo)*(s[int(lo)+1]-s[int(lo)])
}

func TestSummarize(t *testing.T) {
	if (Summarize(nil) != Latency{}) {
		t.Fatal("empty input should give a zero summary")
	}
	var ds []time.Duration
	var us []float64
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i*i) * time.Microsecond
		ds = append(ds, d)
		us = append(us, float64(i*i))
	}
	s := Summarize(ds)
	if s.Count != 1000 || s.Max != 1e6 {
		t.Fatalf("count/max wrong: %+v", s)
	}
	for _, c := range []struct {
		got, p float64
	}{{s.P50, 50}, {s.P95, 95}, {s.P99, 99}, {s.P999, 99.9}} {
		if want := naivePercentile(us, c.p); math.Abs(c.got-want) > 1e-6*want {
			t.Errorf("p%v = %v, naive %v", c.p, c.got, want)
		}
	}
}

func TestOverheadAndNormalized(t *testing.T) {
	if v := Overhead(110, 100); math.Abs(v-0.1) > 1e-12 {
		t.Errorf("Overhead = %v", v)
	}
	if !math.IsNaN(Overhead(1, 0)) || !math.IsNaN(Normalized(1, 0)) {
		t.Error("division by zero must be NaN, not a number")
	}
}

func sampleReport() *Report {
	r := &Report{
		Policy: "atoll", Backend: "sim", Device: "sim:H100-SXM", Command: "atoll bench",
		Workload:     WorkloadInfo{HPModel: "resnet50", HPBatch: 1, BEModel: "resnet50-train", BEBatch: 32, Arrival: Poisson, Load: 0.5, Seed: 1, DurationSec: 10},
		HP:           Latency{Count: 100, P50: 1000, P99: 1500},
		Dedicated:    Latency{Count: 100, P50: 1000, P99: 1200},
		HPCompleted:  100,
		BEWorkPerSec: 0.4, BEAlonePerS: 0.95,
	}
	r.Finish()
	return r
}

func TestReportRoundTripAndDerived(t *testing.T) {
	r := sampleReport()
	if r.P99Overhead == nil || math.Abs(*r.P99Overhead-0.25) > 1e-9 {
		t.Fatalf("overhead = %v", r.P99Overhead)
	}
	if r.System == nil || math.Abs(*r.System-(1+0.4/0.95)) > 1e-9 {
		t.Fatalf("system = %v", r.System)
	}
	var buf bytes.Buffer
	if err := WriteReport(&buf, r); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if *back.P99Overhead != *r.P99Overhead || back.Workload != r.Workload {
		t.Fatalf("round trip changed the report: %+v", back)
	}
}

func TestReportNoBE(t *testing.T) {
	r := &Report{Policy: "dedicated", HP: Latency{Count: 3, P99: 5}, Dedicated: Latency{Count: 3, P99: 5}, HPCompleted: 3}
	r.Finish()
	if r.BENormalized != nil {
		t.Errorf("BE normalized throughput must be absent without a BE job, got %v", *r.BENormalized)
	}
	if r.System == nil || *r.System != 1 {
		t.Errorf("system = %v, want 1", r.System)
	}
}

func TestReadReportErrors(t *testing.T) {
	bad := map[string]string{
		"{": "line 1",
		"{\n\"apiVersion\": \"atoll/bench/v1\",\n\"policy\": 3\n}": "line 3: field policy",
		`{"apiVersion":"v0","policy":"x"}`:                         `apiVersion "v0"`,
		`{"apiVersion":"atoll/bench/v1"}`:                          "policy is empty",
		`{"apiVersion":"atoll/bench/v1","policy":"x","bogus":1}`:   "unknown field",
	}
	for in, want := range bad {
		_, err := ReadReport(strings.NewReader(in))
		if err == nil || !errors.Is(err, ErrReport) || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadReport(%q) = %v, want error containing %q", in, err, want)
		}
	}
}

func TestComparableAndTable(t *testing.T) {
	a, b := sampleReport(), sampleReport()
	b.Policy = "priority"
	if err := Comparable([]*Report{a, b}); err != nil {
		t.Fatal(err)
	}
	b.Workload.Seed = 2
	if err := Comparable([]*Report{a, b}); err == nil || !strings.Contains(err.Error(), "different workloads") {
		t.Fatalf("different seeds must not compare: %v", err)
	}
	var buf bytes.Buffer
	if err := Table(&buf, []*Report{a}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"policy", "atoll", "1.500", "+25.0%", "+300", "0.42", "1.42"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestCDFAndPlot(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 500; i++ {
		ds = append(ds, time.Duration(i)*time.Microsecond)
	}
	cdf := CDF(ds)
	if len(cdf) != len(CDFPercents) {
		t.Fatalf("CDF has %d points, want %d", len(cdf), len(CDFPercents))
	}
	for i := 1; i < len(cdf); i++ {
		if cdf[i] < cdf[i-1] {
			t.Fatalf("CDF not monotone at %d: %v < %v", i, cdf[i], cdf[i-1])
		}
	}
	if cdf[len(cdf)-1] != 500 {
		t.Fatalf("p100 = %v, want the max 500", cdf[len(cdf)-1])
	}
	r := sampleReport()
	r.HPCDF, r.DedicatedCDF = cdf, cdf
	var buf bytes.Buffer
	if err := PlotCDF(&buf, []*Report{r}, "svg"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "<svg") || !strings.Contains(buf.String(), "atoll") {
		t.Fatalf("not an SVG naming the policy: %.200s", buf.String())
	}
	if err := PlotCDF(&buf, []*Report{r}, "gif"); err == nil || !strings.Contains(err.Error(), `unknown plot format "gif"`) {
		t.Fatalf("gif: %v", err)
	}
	if err := PlotCDF(&buf, nil, "svg"); err == nil {
		t.Fatal("plotting nothing must fail")
	}
}
