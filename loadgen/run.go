package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Class is one request class of a mixed load: its name, the "priority"
// parameter its requests carry (0: none, the model's default) and its share
// of the requests.
type Class struct {
	Name     string  `json:"name"`
	Priority int     `json:"priority,omitempty"`
	Weight   float64 `json:"weight"`
}

// DefaultPriorities are the priority levels of the class names hp and be
// when a mix does not give them (Triton's meaning: 1 is highest).
var DefaultPriorities = map[string]int{"hp": 1, "be": 2}

// ParseMix parses "hp=0.8,be=0.2" into classes, with priorities from
// "hp=1,be=2" (empty: DefaultPriorities). Weights are positive and are
// normalised to sum to 1; every class needs a priority.
func ParseMix(mix, priorities string) ([]Class, error) {
	prio := map[string]int{}
	for k, v := range DefaultPriorities {
		prio[k] = v
	}
	if priorities != "" {
		for _, kv := range strings.Split(priorities, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			p, err := strconv.Atoi(v)
			if !ok || k == "" || err != nil || p < 1 {
				return nil, fmt.Errorf("%w: priorities %q: want class=level pairs like hp=1,be=2 (levels from 1, the highest)", ErrConfig, priorities)
			}
			prio[k] = p
		}
	}
	var out []Class
	seen := map[string]bool{}
	sum := 0.0
	for _, kv := range strings.Split(mix, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		w, err := strconv.ParseFloat(v, 64)
		if !ok || k == "" || err != nil || !(w > 0) || w > 1e9 {
			return nil, fmt.Errorf("%w: mix %q: want class=share pairs with positive shares, like hp=0.8,be=0.2", ErrConfig, mix)
		}
		if seen[k] {
			return nil, fmt.Errorf("%w: mix %q names class %q twice", ErrConfig, mix, k)
		}
		seen[k] = true
		p, ok := prio[k]
		if !ok {
			return nil, fmt.Errorf("%w: mix class %q has no priority level; give one with --priorities %s=N", ErrConfig, k, k)
		}
		out = append(out, Class{Name: k, Priority: p, Weight: w})
		sum += w
	}
	for i := range out {
		out[i].Weight /= sum
	}
	return out, nil
}

// Config is one load run.
type Config struct {
	Model string
	// Schedule is every request's send time from the start of the run,
	// not decreasing (bench.Arrivals or bench.ReadTrace).
	Schedule []time.Duration
	// Span is the run's length (the arrivals' span; for a trace, at least
	// its last time). Throughput and goodput are per second of the
	// measured window [Warmup, Span).
	Span time.Duration
	// Warmup: requests scheduled before it are sent but not measured.
	Warmup time.Duration
	// Classes of the load; empty means one class "all" with no priority.
	Classes []Class
	// Batch replaces the variable (-1) dimensions of the inputs.
	Batch int
	// Data is how requests carry tensors: DataBinary (the zero value) or
	// DataJSON.
	Data DataFormat
	Seed uint64
	// MaxInFlight bounds the outstanding requests; a request due while
	// the bound is reached is dropped (KindDropped), never delayed.
	MaxInFlight int
	// SLO is the latency bound of SLO attainment and goodput (0: none).
	SLO time.Duration
	// LateThreshold: a request sent later than this after its scheduled
	// time is a late send, and any late send makes the run invalid.
	// 0 means 2ms.
	LateThreshold time.Duration
}

// Record is one request's outcome. Times are from the start of the run.
type Record struct {
	Class     int           `json:"class"`
	Scheduled time.Duration `json:"scheduledNs"`
	Sent      time.Duration `json:"sentNs"` // 0 if dropped or never sent
	Done      time.Duration `json:"doneNs"`
	Kind      string        `json:"kind"` // KindOK or an error kind
	Measured  bool          `json:"measured"`
}

// Latency is completion − scheduled send time.
func (r Record) Latency() time.Duration { return r.Done - r.Scheduled }

// Lag is how late the generator sent the request.
func (r Record) Lag() time.Duration { return r.Sent - r.Scheduled }

// Result is a finished (or interrupted) run: the configuration and every
// request's record, in schedule order.
type Result struct {
	URL         string
	Config      Config
	Records     []Record // one per scheduled request; Kind "" if never due (interrupted)
	Interrupted bool
	Wall        time.Duration
	// Messages is the daemon's first error message per HTTP error kind.
	Messages map[string]string
}

func (cfg *Config) check() error {
	if err := CheckModel(cfg.Model); err != nil {
		return err
	}
	n := len(cfg.Schedule)
	switch {
	case n == 0:
		return fmt.Errorf("%w: no requests scheduled (raise --rate or --duration)", ErrConfig)
	case n > MaxRequests:
		return fmt.Errorf("%w: %d requests scheduled, over the cap of %d (lower --rate or --duration)", ErrConfig, n, MaxRequests)
	case cfg.MaxInFlight < 1 || cfg.MaxInFlight > MaxInFlightCap:
		return fmt.Errorf("%w: max in-flight must be in [1, %d], got %d", ErrConfig, MaxInFlightCap, cfg.MaxInFlight)
	case cfg.Span <= 0 || cfg.Span > MaxDuration:
		return fmt.Errorf("%w: run span %v must be in (0, %v]", ErrConfig, cfg.Span, MaxDuration)
	case cfg.Warmup < 0 || cfg.Warmup >= cfg.Span:
		return fmt.Errorf("%w: warm-up %v must be shorter than the run (%v)", ErrConfig, cfg.Warmup, cfg.Span)
	case cfg.SLO < 0:
		return fmt.Errorf("%w: SLO must not be negative, got %v", ErrConfig, cfg.SLO)
	case cfg.LateThreshold < 0:
		return fmt.Errorf("%w: late threshold must not be negative, got %v", ErrConfig, cfg.LateThreshold)
	}
	for i := 1; i < n; i++ {
		if cfg.Schedule[i] < cfg.Schedule[i-1] || cfg.Schedule[i-1] < 0 {
			return fmt.Errorf("%w: schedule must be non-negative and not decreasing (request %d)", ErrConfig, i)
		}
	}
	if cfg.Schedule[n-1] > cfg.Span {
		return fmt.Errorf("%w: last request at %v is after the run span %v", ErrConfig, cfg.Schedule[n-1], cfg.Span)
	}
	names := map[string]bool{}
	for _, c := range cfg.Classes {
		if c.Name == "" || names[c.Name] || !(c.Weight > 0) || c.Priority < 0 {
			return fmt.Errorf("%w: class %+v: want a unique name, a positive weight and a priority ≥ 0", ErrConfig, c)
		}
		names[c.Name] = true
	}
	return nil
}

// Run fetches the model's metadata, builds one request body per class and
// sends every scheduled request at its time, at most MaxInFlight at once.
// It returns when every sent request has finished (each is bounded by the
// client's timeout). If ctx ends first it stops sending, cancels what is in
// flight and returns the partial result with Interrupted set.
func Run(ctx context.Context, c *Client, cfg Config) (*Result, error) {
	if cfg.Batch == 0 {
		cfg.Batch = 1
	}
	if cfg.LateThreshold == 0 {
		cfg.LateThreshold = 2 * time.Millisecond
	}
	if len(cfg.Classes) == 0 {
		cfg.Classes = []Class{{Name: "all", Weight: 1}}
	}
	data, err := ParseDataFormat(string(cfg.Data))
	if err != nil {
		return nil, err
	}
	cfg.Data = data
	if err := cfg.check(); err != nil {
		return nil, err
	}
	meta, err := c.Metadata(ctx, cfg.Model)
	if err != nil {
		return nil, err
	}
	bodies := make([]*Body, len(cfg.Classes))
	for i, cl := range cfg.Classes {
		if bodies[i], err = NewBody(meta, cfg.Batch, cl.Priority, cfg.Seed+uint64(i), cfg.Data); err != nil {
			return nil, err
		}
	}
	recs := make([]Record, len(cfg.Schedule))
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xa0761d6478bd642f))
	for i, s := range cfg.Schedule {
		recs[i] = Record{Class: pickClass(rng, cfg.Classes), Scheduled: s, Measured: s >= cfg.Warmup}
	}

	// Every request goroutine is owned by this function: reqCtx cancels
	// them on interrupt and wg waits for them before Run returns.
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	slots := make(chan struct{}, cfg.MaxInFlight)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	start := time.Now()
	interrupted := false
loop:
	for i := range recs {
		// Sleep until shortly before the request is due, then yield until
		// it is: Go's timers can wake up to about a millisecond late,
		// which would be generator lag.
		due := start.Add(recs[i].Scheduled)
		if wait := time.Until(due) - spinAhead; wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				interrupted = true
				break loop
			}
		}
		for time.Now().Before(due) {
			runtime.Gosched()
		}
		if ctx.Err() != nil {
			interrupted = true
			break
		}
		select {
		case slots <- struct{}{}:
		default:
			recs[i].Kind = KindDropped
			recs[i].Done = time.Since(start)
			continue
		}
		wg.Add(1)
		go func(r *Record, body *Body, id int) {
			defer wg.Done()
			defer func() { <-slots }()
			r.Sent = time.Since(start)
			r.Kind = c.Infer(reqCtx, cfg.Model, body, id)
			r.Done = time.Since(start)
		}(&recs[i], bodies[recs[i].Class], i)
	}
	if interrupted {
		cancel()
	}
	wg.Wait()
	return &Result{URL: c.URL(), Config: cfg, Records: recs, Interrupted: interrupted, Wall: time.Since(start), Messages: c.Messages()}, nil
}

// spinAhead is how long before a request is due the generator stops
// sleeping and yields in a loop instead.
const spinAhead = time.Millisecond

func pickClass(rng *rand.Rand, cs []Class) int {
	if len(cs) == 1 {
		return 0
	}
	sum := 0.0
	for _, c := range cs {
		sum += c.Weight
	}
	u := rng.Float64() * sum
	acc := 0.0
	for i, c := range cs {
		acc += c.Weight
		if u < acc {
			return i
		}
	}
	return len(cs) - 1
}

// classOrder lists class indices by name, for stable reports.
func classOrder(cs []Class) []int {
	idx := make([]int, len(cs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return cs[idx[a]].Name < cs[idx[b]].Name })
	return idx
}
