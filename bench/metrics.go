package bench

import (
	"math"
	"time"

	"github.com/montanaflynn/stats"
)

// Latency summarises a latency distribution in microseconds. Percentiles
// interpolate linearly between samples (montanaflynn/stats).
type Latency struct {
	Count int     `json:"count"`
	Mean  float64 `json:"meanUs"`
	P50   float64 `json:"p50Us"`
	P95   float64 `json:"p95Us"`
	P99   float64 `json:"p99Us"`
	P999  float64 `json:"p999Us"`
	Max   float64 `json:"maxUs"`
}

// Summarize computes the summary of ds. An empty input gives a zero
// summary with Count 0.
func Summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	us := make(stats.Float64Data, len(ds))
	for i, d := range ds {
		us[i] = float64(d) / float64(time.Microsecond)
	}
	pct := func(p float64) float64 {
		v, err := us.Percentile(p)
		if err != nil {
			return math.NaN()
		}
		return v
	}
	mean, _ := us.Mean()
	mx, _ := us.Max()
	return Latency{
		Count: len(ds),
		Mean:  mean,
		P50:   pct(50),
		P95:   pct(95),
		P99:   pct(99),
		P999:  pct(99.9),
		Max:   mx,
	}
}

// Overhead is a/b - 1, the design brief's "p99 overhead" when a is the
// shared p99 and b the dedicated p99 of the same arrival sequence. It is NaN
// when b is not positive.
func Overhead(a, b float64) float64 {
	if !(b > 0) {
		return math.NaN()
	}
	return a/b - 1
}

// Normalized is shared / alone, NaN when alone is not positive.
func Normalized(shared, alone float64) float64 {
	if !(alone > 0) {
		return math.NaN()
	}
	return shared / alone
}

// CDFPercents are the percentiles a report keeps of each latency
// distribution, enough to draw its CDF with the tail visible.
var CDFPercents = func() []float64 {
	var ps []float64
	for p := 1.0; p <= 99; p++ {
		ps = append(ps, p)
	}
	return append(ps, 99.5, 99.9, 100)
}()

// CDF is the latency (µs) at each of CDFPercents; nil for no samples.
func CDF(ds []time.Duration) []float64 {
	if len(ds) == 0 {
		return nil
	}
	us := make(stats.Float64Data, len(ds))
	for i, d := range ds {
		us[i] = float64(d) / float64(time.Microsecond)
	}
	out := make([]float64, len(CDFPercents))
	for i, p := range CDFPercents {
		out[i], _ = us.Percentile(p)
	}
	return out
}
