package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// ErrArrivals reports a bad arrival specification or trace file.
var ErrArrivals = errors.New("bench: arrivals")

// Arrival processes for open-loop HP clients.
const (
	Poisson = "poisson"
	Uniform = "uniform"
	Bursty  = "lognormal" // log-normal inter-arrival times: bursts and lulls
	Trace   = "trace"
)

// ArrivalNames lists the processes Arrivals understands.
var ArrivalNames = []string{Poisson, Uniform, Bursty, Trace}

// Arrivals returns the scheduled arrival times in [0, span) of an open-loop
// client offering rate requests per second, from a seeded generator. sigma
// is the log-normal process's shape (ignored by the others; 0 means 1.0).
// The same arguments always give the same times.
func Arrivals(process string, rate float64, span time.Duration, seed uint64, sigma float64) ([]time.Duration, error) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil, fmt.Errorf("%w: rate must be a positive number of requests per second, got %v", ErrArrivals, rate)
	}
	if span <= 0 {
		return nil, fmt.Errorf("%w: span must be positive, got %v", ErrArrivals, span)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	mean := float64(time.Second) / rate
	var gap func() float64
	switch process {
	case Poisson:
		gap = func() float64 { return rng.ExpFloat64() * mean }
	case Uniform:
		gap = func() float64 { return mean }
	case Bursty:
		if sigma == 0 {
			sigma = 1
		}
		if sigma < 0 || sigma > 4 {
			return nil, fmt.Errorf("%w: log-normal sigma must be in (0, 4], got %v", ErrArrivals, sigma)
		}
		// E[exp(N(mu, s^2))] = exp(mu + s^2/2) = mean.
		mu := math.Log(mean) - sigma*sigma/2
		gap = func() float64 { return math.Exp(mu + sigma*rng.NormFloat64()) }
	case Trace:
		return nil, fmt.Errorf("%w: a trace is read from a file (ReadTrace), not generated", ErrArrivals)
	default:
		return nil, fmt.Errorf("%w: unknown process %q (want one of %s)", ErrArrivals, process, strings.Join(ArrivalNames, ", "))
	}
	var out []time.Duration
	t := gap()
	if process == Uniform {
		t = 0
	}
	for t < float64(span) {
		out = append(out, time.Duration(t))
		t += gap()
	}
	return out, nil
}

// ReadTrace reads arrival times, one per line, as Go durations ("1.5ms",
// "250us") or bare numbers in microseconds. Blank lines and lines starting
// with '#' are skipped. Times must not decrease. Errors name the line.
func ReadTrace(r io.Reader) ([]time.Duration, error) {
	var out []time.Duration
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		var d time.Duration
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, fmt.Errorf("%w: trace line %d: %q is not a time", ErrArrivals, line, s)
			}
			d = time.Duration(math.Round(f * float64(time.Microsecond)))
		} else if d, err = time.ParseDuration(s); err != nil {
			return nil, fmt.Errorf("%w: trace line %d: %q is neither a duration (\"1.5ms\") nor microseconds", ErrArrivals, line, s)
		}
		if d < 0 {
			return nil, fmt.Errorf("%w: trace line %d: negative time %v", ErrArrivals, line, d)
		}
		if n := len(out); n > 0 && d < out[n-1] {
			return nil, fmt.Errorf("%w: trace line %d: time %v is before the previous one (%v); sort the trace", ErrArrivals, line, d, out[n-1])
		}
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: reading trace: %v", ErrArrivals, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: trace has no arrival times", ErrArrivals)
	}
	return out, nil
}

// Rate is the mean offered rate of a set of arrivals over span.
func Rate(times []time.Duration, span time.Duration) float64 {
	if span <= 0 {
		return 0
	}
	return float64(len(times)) / span.Seconds()
}
