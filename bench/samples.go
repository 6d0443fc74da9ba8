package bench

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"atoll/internal/pcg"
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

// DecodeSamples unpacks EncodeSamples's or EncodeSeries's string into
// sorted latencies in microseconds.
func DecodeSamples(s string) ([]float64, error) {
	if s == "" {
		return nil, nil
	}
	if strings.HasPrefix(s, seriesPrefix) {
		xs, _, err := DecodeSeries(s)
		slices.Sort(xs)
		return xs, err
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

// BootstrapQuantile is the 95 % percentile-bootstrap CI of the p-quantile
// of samples whose order is unknown (sorted): single samples resampled
// (seeded: the same input gives the same interval).
func BootstrapQuantile(sorted []float64, p float64, seed uint64) CI {
	return quantileCI(sorted, 1, p, seed)
}

// BootstrapOverhead is the 95 % CI of p-quantile(shared)/p-quantile(base)
// − 1, both samples resampled independently, single samples.
func BootstrapOverhead(shared, base []float64, p float64, seed uint64) CI {
	return overheadCI(shared, 1, base, 1, p, seed)
}

// seriesPrefix marks samples kept in arrival order (EncodeSeries).
const seriesPrefix = "o:"

// EncodeSeries packs latencies in the order given (arrival order) as
// zigzag varint deltas of 0.1 µs units, deflated and base64-encoded with a
// marker, so that a block bootstrap can respect the correlation of
// neighbouring requests. DecodeSamples reads both encodings.
func EncodeSeries(ds []time.Duration) string {
	if len(ds) == 0 {
		return ""
	}
	var raw []byte
	prev := int64(0)
	for _, d := range ds {
		v := max(int64(d), 0) / 100
		raw = binary.AppendVarint(raw, v-prev)
		prev = v
	}
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestCompression)
	w.Write(raw)
	w.Close()
	return seriesPrefix + base64.StdEncoding.EncodeToString(b.Bytes())
}

// DecodeSeries unpacks samples in their stored order (µs); ordered is
// false for samples stored sorted (EncodeSamples), whose order is lost.
func DecodeSeries(s string) (xs []float64, ordered bool, err error) {
	if !strings.HasPrefix(s, seriesPrefix) {
		xs, err = DecodeSamples(s)
		return xs, false, err
	}
	z, err := base64.StdEncoding.DecodeString(s[len(seriesPrefix):])
	if err != nil {
		return nil, false, fmt.Errorf("%w: samples: %v", ErrReport, err)
	}
	raw, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(z)), 64<<20))
	if err != nil {
		return nil, false, fmt.Errorf("%w: samples: %v", ErrReport, err)
	}
	prev := int64(0)
	for len(raw) > 0 {
		d, n := binary.Varint(raw)
		if n <= 0 {
			return nil, false, fmt.Errorf("%w: samples: bad varint at byte %d", ErrReport, len(raw))
		}
		raw = raw[n:]
		prev += d
		xs = append(xs, float64(prev)/10)
	}
	return xs, true, nil
}

// BlockLength is the block length of a moving-block bootstrap of series:
// the first lag at which its autocorrelation falls below 0.05 (requests
// further apart are treated as independent), at least 1 and at most
// len/20.
func BlockLength(series []float64) int {
	n := len(series)
	maxLag := n / 20
	if maxLag < 1 {
		return 1
	}
	var mean float64
	for _, x := range series {
		mean += x
	}
	mean /= float64(n)
	var v0 float64
	for _, x := range series {
		v0 += (x - mean) * (x - mean)
	}
	if v0 == 0 {
		return 1
	}
	for k := 1; k <= maxLag; k++ {
		var c float64
		for i := 0; i+k < n; i++ {
			c += (series[i] - mean) * (series[i+k] - mean)
		}
		if c/v0 < 0.05 {
			return k
		}
	}
	return maxLag
}

// blockSampler draws moving-block resamples of a series and answers their
// quantiles by counting into the series' sorted order.
type blockSampler struct {
	sorted []float64
	rank   []int // rank[i]: position of series[i] in sorted
	block  int
	counts []int
}

func newBlockSampler(series []float64, block int) *blockSampler {
	n := len(series)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case series[a] < series[b]:
			return -1
		case series[a] > series[b]:
			return 1
		}
		return 0
	})
	s := &blockSampler{sorted: make([]float64, n), rank: make([]int, n), block: max(1, min(block, n)), counts: make([]int, n)}
	for r, i := range idx {
		s.sorted[r] = series[i]
		s.rank[i] = r
	}
	return s
}

// quantile draws one resample and returns its p-quantile. It and
// quantileOfCounts run unseen by the race detector (go:norace): they touch
// only the sampler, which one goroutine owns, and a CI's million draws
// made the bootstrap tests minutes long under -race.
//
//go:norace
func (s *blockSampler) quantile(rng *pcg.Source, p float64) float64 {
	n := len(s.sorted)
	clear(s.counts)
	for drawn := 0; drawn < n; {
		start := rng.IntN(n - s.block + 1)
		for i := start; i < start+s.block && drawn < n; i++ {
			s.counts[s.rank[i]]++
			drawn++
		}
	}
	return quantileOfCounts(s.sorted, s.counts, p)
}

// quantileOfCounts is the p-quantile of the multiset holding counts[i]
// copies of sorted[i].
//
//go:norace
func quantileOfCounts(sorted []float64, counts []int, p float64) float64 {
	n := 0
	for _, c := range counts {
		n += c
	}
	pos := p * float64(n-1)
	lo := int(pos)
	f := pos - float64(lo)
	seen := 0
	for i, c := range counts {
		if c == 0 {
			continue
		}
		if seen <= lo && lo < seen+c {
			a := sorted[i]
			if lo+1 < seen+c || f == 0 {
				return a
			}
			for j := i + 1; j < len(sorted); j++ {
				if counts[j] > 0 {
					return a + f*(sorted[j]-a)
				}
			}
			return a
		}
		seen += c
	}
	return sorted[len(sorted)-1]
}

// BlockBootstrapQuantile is the 95 % moving-block bootstrap CI of the
// p-quantile of a series in arrival order (BlockLength blocks).
func BlockBootstrapQuantile(series []float64, p float64, seed uint64) CI {
	return quantileCI(series, BlockLength(series), p, seed)
}

// BlockBootstrapOverhead is the 95 % moving-block bootstrap CI of
// p-quantile(shared)/p-quantile(base) − 1, the two series resampled
// independently, each with its own block length.
func BlockBootstrapOverhead(shared, base []float64, p float64, seed uint64) CI {
	return overheadCI(shared, BlockLength(shared), base, BlockLength(base), p, seed)
}

// quantileCI resamples blocks of block neighbouring samples (1: single
// samples) BootstrapIters times and returns the 2.5 and 97.5 percentiles
// of the resamples' p-quantiles.
func quantileCI(xs []float64, block int, p float64, seed uint64) CI {
	if len(xs) < 2 {
		return CI{math.NaN(), math.NaN()}
	}
	rng := pcg.New(seed, 0x5eed)
	s := newBlockSampler(xs, block)
	qs := make([]float64, BootstrapIters)
	for i := range qs {
		qs[i] = s.quantile(rng, p)
	}
	return percentileCI(qs)
}

// overheadCI is quantileCI of the ratio of two independently resampled
// quantiles, less 1.
func overheadCI(shared []float64, sb int, base []float64, bb int, p float64, seed uint64) CI {
	if len(shared) < 2 || len(base) < 2 {
		return CI{math.NaN(), math.NaN()}
	}
	rng := pcg.New(seed, 0x0ead)
	a, b := newBlockSampler(shared, sb), newBlockSampler(base, bb)
	os := make([]float64, BootstrapIters)
	for i := range os {
		os[i] = a.quantile(rng, p)/b.quantile(rng, p) - 1
	}
	return percentileCI(os)
}

func percentileCI(xs []float64) CI {
	slices.Sort(xs)
	return CI{Quantile(xs, 0.025), Quantile(xs, 0.975)}
}
