package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"atoll/internal/pcg"
)

func TestSamplesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var ds []time.Duration
	for range 5000 {
		ds = append(ds, time.Duration(500_000+rng.ExpFloat64()*2e6))
	}
	s := EncodeSamples(ds)
	if len(s) > 5000*4 {
		t.Errorf("5000 samples take %d bytes", len(s))
	}
	got, err := DecodeSamples(s)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(ds)
	slices.Sort(want)
	if len(got) != len(want) {
		t.Fatalf("%d samples back, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-float64(want[i])/1e3) > 0.1 {
			t.Fatalf("sample %d: %v µs, want %v", i, got[i], float64(want[i])/1e3)
		}
	}
	if _, err := DecodeSamples("not base64!"); err == nil {
		t.Error("garbage decoded")
	}
}

// TestResampleQuantileMatchesNaive: the counting resample (single
// samples) equals sorting the same draw.
func TestResampleQuantileMatchesNaive(t *testing.T) {
	for trial := range 200 {
		rng := rand.New(rand.NewPCG(uint64(trial), 7))
		n := 1 + rng.IntN(50)
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(rng.IntN(20))
		}
		slices.Sort(xs)
		p := rng.Float64()
		seed := uint64(trial)
		got := newBlockSampler(xs, 1).quantile(pcg.New(seed, 1), p)
		r2 := rand.New(rand.NewPCG(seed, 1))
		draw := make([]float64, n)
		for i := range draw {
			draw[i] = xs[r2.IntN(n)]
		}
		slices.Sort(draw)
		if want := Quantile(draw, p); math.Abs(got-want) > 1e-9 {
			t.Fatalf("trial %d n=%d p=%.3f: %v, naive %v", trial, n, p, got, want)
		}
	}
}

// TestBootstrapCoverage: the CI of the p99 of a known distribution covers
// the true p99 in most of 40 seeded samples, and the overhead CI of two
// samples of one distribution covers 0 in most.
func TestBootstrapCoverage(t *testing.T) {
	truth := -math.Log(0.01) // p99 of Exp(1)
	cover, cover0 := 0, 0
	for s := range 40 {
		rng := rand.New(rand.NewPCG(uint64(s), 3))
		a, b := make([]float64, 5000), make([]float64, 5000)
		for i := range a {
			a[i], b[i] = rng.ExpFloat64(), rng.ExpFloat64()
		}
		slices.Sort(a)
		slices.Sort(b)
		if BootstrapQuantile(a, 0.99, uint64(s)).Contains(truth) {
			cover++
		}
		if BootstrapOverhead(a, b, 0.99, uint64(s)).Contains(0) {
			cover0++
		}
	}
	if cover < 33 || cover0 < 33 {
		t.Errorf("95%% CIs covered the truth %d/40 and 0 %d/40 times", cover, cover0)
	}
}

// TestDecodePythonSeries: tools/gpu/torch_cell.py's encode_samples of
// [1000.25, 1.5, 250000.7, 3.0] µs decodes here, in that order.
func TestDecodePythonSeries(t *testing.T) {
	got, ordered, err := DecodeSeries("o:WzKHsXUO44ZpG5kmAjEA")
	if err != nil || !ordered {
		t.Fatal(err, ordered)
	}
	want := []float64{1000.2, 1.5, 250000.7, 3.0}
	for i := range want {
		if len(got) != len(want) || math.Abs(got[i]-want[i]) > 0.051 {
			t.Fatalf("%v, want %v", got, want)
		}
	}
}

// TestDecodePythonSamples: the sorted encoding torch_cell.py wrote before
// (the committed PyTorch results) of [1.5, 1000.25, 3.0, 250000.7] µs.
func TestDecodePythonSamples(t *testing.T) {
	got, err := DecodeSamples("4+f/4jv173RGAA==")
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1.5, 3.0, 1000.2, 250000.7}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 0.051 {
			t.Fatalf("%v, want %v", got, want)
		}
	}
}

func TestSeriesRoundTrip(t *testing.T) {
	ds := []time.Duration{3 * time.Millisecond, 1 * time.Millisecond, 2500 * time.Microsecond, 0, 7 * time.Millisecond}
	s := EncodeSeries(ds)
	got, ordered, err := DecodeSeries(s)
	if err != nil || !ordered {
		t.Fatalf("%v ordered=%v", err, ordered)
	}
	for i := range ds {
		if math.Abs(got[i]-float64(ds[i])/1e3) > 0.1 {
			t.Fatalf("%v, want %v", got, ds)
		}
	}
	sorted, err := DecodeSamples(s)
	if err != nil || !slices.IsSorted(sorted) || len(sorted) != len(ds) {
		t.Fatalf("DecodeSamples of a series: %v %v", sorted, err)
	}
	if _, ordered, _ := DecodeSeries(EncodeSamples(ds)); ordered {
		t.Error("sorted samples decoded as ordered")
	}
}

// TestBlockBootstrapCoversCorrelatedSeries: for an autocorrelated series
// (an AR(1) process, like latencies in one queue) the i.i.d. bootstrap's
// CI of the p99 is too narrow — two independent runs' overhead CI excludes
// 0 far more often than 5 % — and the block bootstrap's is not.
func TestBlockBootstrapCoversCorrelatedSeries(t *testing.T) {
	ar := func(seed uint64, n int) []float64 {
		rng := rand.New(rand.NewPCG(seed, 9))
		xs := make([]float64, n)
		x := 0.0
		for i := range xs {
			x = 0.97*x + rng.NormFloat64()
			xs[i] = math.Exp(x / 4)
		}
		return xs
	}
	iid, block := 0, 0
	const trials = 30
	for s := range trials {
		a, b := ar(uint64(2*s), 3000), ar(uint64(2*s+1), 3000)
		if BlockLength(a) < 20 {
			t.Fatalf("AR(0.97) block length %d", BlockLength(a))
		}
		sa, sb := slices.Clone(a), slices.Clone(b)
		slices.Sort(sa)
		slices.Sort(sb)
		if !BootstrapOverhead(sa, sb, 0.99, uint64(s)).Contains(0) {
			iid++
		}
		if !BlockBootstrapOverhead(a, b, 0.99, uint64(s)).Contains(0) {
			block++
		}
	}
	t.Logf("overhead CI excluded 0: i.i.d. %d/%d, block %d/%d", iid, trials, block, trials)
	if block > trials/6 {
		t.Errorf("block bootstrap excluded 0 in %d of %d same-process pairs", block, trials)
	}
	if iid <= block {
		t.Errorf("i.i.d. bootstrap (%d) no worse than block (%d): the test shows nothing", iid, block)
	}
}
