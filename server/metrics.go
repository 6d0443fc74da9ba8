package server

import (
	"strconv"
	"time"

	"atoll/sched"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the daemon's Prometheus collectors. The package registers
// nothing itself: NewMetrics builds them, and the daemon (or a test)
// registers Collectors on a registry it owns. Names follow Prometheus
// conventions (base units, _total for counters); docs/api.md lists them.
type Metrics struct {
	requests   *prometheus.CounterVec
	failures   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	queue      *prometheus.HistogramVec
	phase      *prometheus.HistogramVec
	delay      *prometheus.HistogramVec
	inFlight   *prometheus.GaugeVec
	preemptLat prometheus.Histogram
	engine     *engineCollector
	gpu        *gpuCollector
	served     map[string]bool // model names that are served (label guard)
}

// Label values used when a request's model or class is not known: an
// unknown model name never becomes a label value, so bad requests cannot
// grow the series count.
const (
	labelUnknownModel = "_unknown"
	labelNoClass      = "_none"
)

// latencyBuckets span 100 µs to 10 s in 1-2.5-5 steps (16 buckets).
var latencyBuckets = []float64{100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10}

// preemptBuckets span 1 µs to 100 ms in 1-2.5-5 steps (16 buckets).
var preemptBuckets = []float64{1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3}

// GPUSample is one GPU's counters as NVML reports them.
type GPUSample struct {
	Index       int
	Name        string
	UUID        string
	UtilGPU     float64 // percent, 0..100
	MemoryUsed  uint64  // bytes
	MemoryTotal uint64  // bytes
	PowerDraw   float64 // watts
	PowerLimit  float64 // watts
}

// GPUSource reports the GPUs' counters at scrape time. The daemon passes
// one built on gpu/cuda's Inventory when NVML is available; errors drop the
// GPU series from that scrape.
type GPUSource interface {
	GPUs() ([]GPUSample, error)
}

// GPUSourceFunc adapts a function to GPUSource.
type GPUSourceFunc func() ([]GPUSample, error)

// GPUs calls f.
func (f GPUSourceFunc) GPUs() ([]GPUSample, error) { return f() }

// NewMetrics builds the collectors for eng's models. gpus may be nil.
func NewMetrics(eng Engine, gpus GPUSource) *Metrics {
	mc := []string{"model", "class"}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atoll_requests_total",
			Help: "Inference requests answered, by model, class and HTTP status code.",
		}, []string{"model", "class", "code"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atoll_request_failures_total",
			Help: "Inference requests answered with an error (status >= 400), by model, class and HTTP status code.",
		}, []string{"model", "class", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atoll_request_duration_seconds",
			Help:    "Inference request latency from arrival to response, successful requests, by model and class.",
			Buckets: latencyBuckets,
		}, mc),
		queue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atoll_request_queue_seconds",
			Help:    "Inference request queue time, arrival to first kernel start, by model and class.",
			Buckets: latencyBuckets,
		}, mc),
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atoll_request_phase_seconds",
			Help:    "Successful inference requests' time by phase: decode (protocol layer: body read and parsed), compute_input (inputs uploaded), queue (waiting in the scheduler), compute_infer (first kernel start to last kernel end), compute_output (outputs read back).",
			Buckets: latencyBuckets,
		}, append(append([]string(nil), mc...), "phase")),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "atoll_requests_in_flight",
			Help: "Inference requests being served now, by model.",
		}, []string{"model"}),
		delay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atoll_request_delay_seconds",
			Help:    "Successful HP requests' time in the scheduler beyond their kernels' solo durations, by cause: hp-queue (behind earlier requests of the model), policy (launch held), host (launch not yet on the device), drain (beside a BE preemption draining), padded (slower inside a padded launch), co-run (slower beside BE kernels in flight), variance (kernel time off its solo duration with no BE beside it; negative values are observed as 0).",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 16),
		}, append(append([]string(nil), mc...), "cause")),
		preemptLat: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "atoll_preemption_latency_seconds",
			Help:    "Time from an HP arrival's preemption request to the BE kernel giving up the SMs.",
			Buckets: preemptBuckets,
		}),
		served: map[string]bool{},
	}
	for _, mi := range eng.Models() {
		m.served[mi.Name] = true
	}
	m.engine = newEngineCollector(eng, m.preemptLat)
	if gpus != nil {
		m.gpu = newGPUCollector(gpus)
	}
	return m
}

// Collectors are what the daemon registers.
func (m *Metrics) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.requests, m.failures, m.latency, m.queue, m.phase, m.delay, m.inFlight, m.engine}
	if m.gpu != nil {
		cs = append(cs, m.gpu)
	}
	return cs
}

// Register registers every collector on reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *Metrics) modelLabel(name string) string {
	if m.served[name] {
		return name
	}
	return labelUnknownModel
}

// begin counts a request in flight; the returned function ends it.
func (m *Metrics) begin(model string) func() {
	if m == nil {
		return func() {}
	}
	g := m.inFlight.WithLabelValues(m.modelLabel(model))
	g.Inc()
	return g.Dec
}

// observe records one answered inference request.
func (m *Metrics) observe(model string, class Class, code int, total time.Duration, res *InferResult) {
	if m == nil {
		return
	}
	ml, cl := m.modelLabel(model), string(class)
	if cl == "" {
		cl = labelNoClass
	}
	c := strconv.Itoa(code)
	m.requests.WithLabelValues(ml, cl, c).Inc()
	if code >= 400 {
		m.failures.WithLabelValues(ml, cl, c).Inc()
		return
	}
	m.latency.WithLabelValues(ml, cl).Observe(total.Seconds())
	if res == nil {
		return
	}
	m.queue.WithLabelValues(ml, cl).Observe(res.Queue.Seconds())
	// The scheduler's own wait: the queue less decode and upload.
	wait := max(0, res.Queue-res.Decode-res.Input)
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"decode", res.Decode}, {"compute_input", res.Input}, {"queue", wait}, {"compute_infer", res.Service}, {"compute_output", res.Output}} {
		m.phase.WithLabelValues(ml, cl, p.name).Observe(p.d.Seconds())
	}
	if res.Delay != (sched.Causes{}) {
		for c, d := range res.Delay {
			m.delay.WithLabelValues(ml, cl, sched.Cause(c).String()).Observe(max(d, 0).Seconds())
		}
	}
}

// engineCollector turns Engine.Stats into metrics at scrape time.
type engineCollector struct {
	eng        Engine
	preemptLat prometheus.Histogram
	info       *prometheus.Desc
	preempts   *prometheus.Desc
	padded     *prometheus.Desc
	launches   *prometheus.Desc
	beIters    *prometheus.Desc
	beWork     *prometheus.Desc
	queueDepth *prometheus.Desc
	ready      *prometheus.Desc
	restarts   *prometheus.Desc
	retried    *prometheus.Desc
	// Per GPU, when the engine is a Fleet.
	gpuReady, gpuDepth, gpuLaunches, gpuBEWork, gpuRestarts *prometheus.Desc
}

func newEngineCollector(eng Engine, lat prometheus.Histogram) *engineCollector {
	return &engineCollector{
		eng:        eng,
		preemptLat: lat,
		info:       prometheus.NewDesc("atoll_engine_info", "The engine's backend and device (value 1).", []string{"backend", "device"}, nil),
		preempts:   prometheus.NewDesc("atoll_preemptions_total", "BE kernels preempted for HP work.", nil, nil),
		padded:     prometheus.NewDesc("atoll_padded_launches_total", "BE kernels launched as padding beside HP kernels.", nil, nil),
		launches:   prometheus.NewDesc("atoll_launches_total", "Kernel launches of every class.", nil, nil),
		beIters:    prometheus.NewDesc("atoll_be_iterations_total", "Best-effort job iterations completed.", nil, nil),
		beWork:     prometheus.NewDesc("atoll_be_work_seconds_total", "Profiled solo seconds of BE kernels completed (BE throughput in solo-GPU seconds).", nil, nil),
		queueDepth: prometheus.NewDesc("atoll_queue_depth", "Requests accepted by the engine and not yet finished.", nil, nil),
		ready:      prometheus.NewDesc("atoll_ready", "1 when the engine accepts requests, 0 while starting, reopening the device or draining.", nil, nil),
		restarts:   prometheus.NewDesc("atoll_engine_restarts_total", "Times the device was reopened after a device failure.", nil, nil),
		retried:    prometheus.NewDesc("atoll_requests_retried_total", "HP requests run again after a device failure (inference is idempotent).", nil, nil),

		gpuReady:    prometheus.NewDesc("atoll_gpu_ready", "Per GPU of a multi-GPU daemon: 1 when its engine accepts requests.", []string{"gpu", "uuid"}, nil),
		gpuDepth:    prometheus.NewDesc("atoll_gpu_queue_depth", "Per GPU: requests accepted by its engine and not yet finished.", []string{"gpu", "uuid"}, nil),
		gpuLaunches: prometheus.NewDesc("atoll_gpu_launches_total", "Per GPU: kernel launches.", []string{"gpu", "uuid"}, nil),
		gpuBEWork:   prometheus.NewDesc("atoll_gpu_be_work_seconds_total", "Per GPU: profiled solo seconds of BE kernels completed.", []string{"gpu", "uuid"}, nil),
		gpuRestarts: prometheus.NewDesc("atoll_gpu_restarts_total", "Per GPU: device reopens after failures.", []string{"gpu", "uuid"}, nil),
	}
}

// perGPU is implemented by engines over several GPUs (Fleet).
type perGPU interface {
	Engines() []Engine
	DeviceLabel(i int) (ordinal int, uuid string)
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.preempts, c.padded, c.launches, c.beIters, c.beWork, c.queueDepth, c.ready, c.restarts, c.retried,
		c.gpuReady, c.gpuDepth, c.gpuLaunches, c.gpuBEWork, c.gpuRestarts} {
		ch <- d
	}
	c.preemptLat.Describe(ch)
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.eng.Stats()
	for _, d := range s.PreemptLatency {
		c.preemptLat.Observe(d.Seconds())
	}
	ready := 0.0
	if c.eng.Ready() {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, s.Backend, s.Device)
	ch <- prometheus.MustNewConstMetric(c.preempts, prometheus.CounterValue, float64(s.Preemptions))
	ch <- prometheus.MustNewConstMetric(c.padded, prometheus.CounterValue, float64(s.PaddedLaunches))
	ch <- prometheus.MustNewConstMetric(c.launches, prometheus.CounterValue, float64(s.Launches))
	ch <- prometheus.MustNewConstMetric(c.beIters, prometheus.CounterValue, float64(s.BEIterations))
	ch <- prometheus.MustNewConstMetric(c.beWork, prometheus.CounterValue, s.BEWorkSeconds)
	ch <- prometheus.MustNewConstMetric(c.queueDepth, prometheus.GaugeValue, float64(s.QueueDepth))
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, ready)
	ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(s.Restarts))
	ch <- prometheus.MustNewConstMetric(c.retried, prometheus.CounterValue, float64(s.Retried))
	if f, ok := c.eng.(perGPU); ok {
		for i, e := range f.Engines() {
			ordinal, uuid := f.DeviceLabel(i)
			gs, gpu := e.Stats(), strconv.Itoa(ordinal)
			up := 0.0
			if e.Ready() {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(c.gpuReady, prometheus.GaugeValue, up, gpu, uuid)
			ch <- prometheus.MustNewConstMetric(c.gpuDepth, prometheus.GaugeValue, float64(gs.QueueDepth), gpu, uuid)
			ch <- prometheus.MustNewConstMetric(c.gpuLaunches, prometheus.CounterValue, float64(gs.Launches), gpu, uuid)
			ch <- prometheus.MustNewConstMetric(c.gpuBEWork, prometheus.CounterValue, gs.BEWorkSeconds, gpu, uuid)
			ch <- prometheus.MustNewConstMetric(c.gpuRestarts, prometheus.CounterValue, float64(gs.Restarts), gpu, uuid)
		}
	}
	c.preemptLat.Collect(ch)
}

// gpuCollector turns a GPUSource into metrics at scrape time.
type gpuCollector struct {
	src                                  GPUSource
	util, memUsed, memTotal, pwr, pwrLim *prometheus.Desc
}

func newGPUCollector(src GPUSource) *gpuCollector {
	l := []string{"gpu", "uuid", "name"}
	return &gpuCollector{
		src:      src,
		util:     prometheus.NewDesc("atoll_gpu_utilization_ratio", "Fraction of the last NVML sample period in which a kernel ran (0..1).", l, nil),
		memUsed:  prometheus.NewDesc("atoll_gpu_memory_used_bytes", "GPU memory in use.", l, nil),
		memTotal: prometheus.NewDesc("atoll_gpu_memory_total_bytes", "GPU memory in all.", l, nil),
		pwr:      prometheus.NewDesc("atoll_gpu_power_watts", "GPU power draw.", l, nil),
		pwrLim:   prometheus.NewDesc("atoll_gpu_power_limit_watts", "GPU enforced power limit.", l, nil),
	}
}

func (c *gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.util, c.memUsed, c.memTotal, c.pwr, c.pwrLim} {
		ch <- d
	}
}

func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	gs, err := c.src.GPUs()
	if err != nil {
		return // no GPU series this scrape; the rest of /metrics still answers
	}
	for _, g := range gs {
		l := []string{strconv.Itoa(g.Index), g.UUID, g.Name}
		ch <- prometheus.MustNewConstMetric(c.util, prometheus.GaugeValue, g.UtilGPU/100, l...)
		ch <- prometheus.MustNewConstMetric(c.memUsed, prometheus.GaugeValue, float64(g.MemoryUsed), l...)
		ch <- prometheus.MustNewConstMetric(c.memTotal, prometheus.GaugeValue, float64(g.MemoryTotal), l...)
		ch <- prometheus.MustNewConstMetric(c.pwr, prometheus.GaugeValue, g.PowerDraw, l...)
		ch <- prometheus.MustNewConstMetric(c.pwrLim, prometheus.GaugeValue, g.PowerLimit, l...)
	}
}
