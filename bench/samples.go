package bench

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// EncodeSamples packs latencies into a compact string for a report: the
// values in whole nanoseconds, sorted, as uvarint deltas, deflated and
// base64-encoded (about 1.5 bytes a sample for 5,000 requests). Order is
// not kept: percentiles and the bootstrap need none.
func EncodeSamples(ds []time.Duration) string {
	if len(ds) == 0 {
		return ""
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var raw []byte
	prev := int64(0)
	for _, d := range s {
		v := max(int64(d), 0) / 100 // 0.1 µs resolution
		raw = binary.AppendUvarint(raw, uint64(v-prev))
		prev = v
	}
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestCompression)
	w.Write(raw)
	w.Close()
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// DecodeSamples unpacks EncodeSamples's string into sorted latencies in
// microseconds.
func DecodeSamples(s string) ([]float64, error) {
	if s == "" {
		return nil, nil
	}
	z, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: samples: %v", ErrReport, err)
	}
	raw, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(z)), 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%w: samples: %v", ErrReport, err)
	}
	var out []float64
	prev := uint64(0)
	for len(raw) > 0 {
		d, n := binary.Uvarint(raw)
		if n <= 0 {
			return nil, fmt.Errorf("%w: samples: bad varint at byte %d", ErrReport, len(raw))
		}
		raw = raw[n:]
		prev += d
		out = append(out, float64(prev)/10)
	}
	return out, nil
}

// Quantile is the p-quantile (0..1) of sorted xs, linearly interpolated
// between samples (the convention of Summarize).
func Quantile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if n == 1 {
		return sorted[0]
	}
	pos := p * float64(n-1)
	i := int(pos)
	if i >= n-1 {
		return sorted[n-1]
	}
	f := pos - float64(i)
	return sorted[i] + f*(sorted[i+1]-sorted[i])
}

// CI is a two-sided confidence interval.
type CI struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

// Contains reports whether v lies in the interval.
func (c CI) Contains(v float64) bool { return c.Lo <= v && v <= c.Hi }

// Overlaps reports whether the intervals share a point.
func (c CI) Overlaps(o CI) bool { return c.Lo <= o.Hi && o.Lo <= c.Hi }

// BootstrapIters is the number of resamples of every bootstrap CI.
const BootstrapIters = 1000

// resampleQuantile draws len(xs) samples with replacement and returns
// their p-quantile. It counts into a histogram of xs's sorted positions
// instead of sorting the draw.
func resampleQuantile(rng *rand.Rand, sorted []float64, p float64, counts []int) float64 {
	n := len(sorted)
	clear(counts)
	for range n {
		counts[rng.IntN(n)]++
	}
	pos := p * float64(n-1)
	lo := int(pos)
	f := pos - float64(lo)
	seen := 0
	var a float64
	for i, c := range counts {
		if c == 0 {
			continue
		}
		if seen <= lo && lo < seen+c {
			a = sorted[i]
			if lo+1 < seen+c || f == 0 {
				return a
			}
			for j := i + 1; j < n; j++ {
				if counts[j] > 0 {
					return a + f*(sorted[j]-a)
				}
			}
			return a
		}
		seen += c
	}
	return sorted[n-1]
}

// BootstrapQuantile is the 95 % percentile-bootstrap CI of the p-quantile
// of sorted (seeded: the same input gives the same interval).
func BootstrapQuantile(sorted []float64, p float64, seed uint64) CI {
	if len(sorted) < 2 {
		return CI{math.NaN(), math.NaN()}
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	counts := make([]int, len(sorted))
	qs := make([]float64, BootstrapIters)
	for i := range qs {
		qs[i] = resampleQuantile(rng, sorted, p, counts)
	}
	slices.Sort(qs)
	return CI{Quantile(qs, 0.025), Quantile(qs, 0.975)}
}

// BootstrapOverhead is the 95 % CI of p-quantile(shared)/p-quantile(base)
// − 1, both samples resampled independently.
func BootstrapOverhead(shared, base []float64, p float64, seed uint64) CI {
	if len(shared) < 2 || len(base) < 2 {
		return CI{math.NaN(), math.NaN()}
	}
	rng := rand.New(rand.NewPCG(seed, 0x0ead))
	ca, cb := make([]int, len(shared)), make([]int, len(base))
	os := make([]float64, BootstrapIters)
	for i := range os {
		os[i] = resampleQuantile(rng, shared, p, ca)/resampleQuantile(rng, base, p, cb) - 1
	}
	slices.Sort(os)
	return CI{Quantile(os, 0.025), Quantile(os, 0.975)}
}
