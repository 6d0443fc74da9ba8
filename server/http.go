package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Handler. The zero value of a field means its
// DefaultConfig value.
type Options struct {
	// Version is reported by GET /v2.
	Version string
	// Priority maps the "priority" request parameter to a class.
	Priority PriorityConfig
	// BodyLimit is the largest request body accepted, in bytes.
	BodyLimit int64
	// RequestTimeout bounds one inference request.
	RequestTimeout time.Duration
	// Metrics, when set, observes every inference request.
	Metrics *Metrics
	// MetricsHandler, when set, is served at GET /metrics.
	MetricsHandler http.Handler
	// Logger gets one debug record per request and errors; nil discards.
	Logger *slog.Logger
	// Restricted guards API groups with bearer tokens (see Restriction).
	// Every group must be one of APIGroups and every token non-empty;
	// NewHandler panics otherwise (Config.Restrictions checks both).
	Restricted []Restriction
	// MaxInflight bounds the inference requests being handled at once,
	// HTTP and gRPC together (read, decoded, queued or running); one past
	// it is answered 503 with Retry-After before its body is read (gRPC:
	// Unavailable, before its tensors are decoded). Zero:
	// DefaultMaxInflight of the engine's models.
	MaxInflight int
}

// DefaultMaxInflight is the in-flight bound for models: every request their
// queues can hold (max_queue each) plus eight per CPU being decoded, so an
// overload beyond what the engine can queue is refused at the door instead
// of piling up in body decoding until clients time out.
func DefaultMaxInflight(queues []int) int {
	n := 8 * runtime.GOMAXPROCS(0)
	for _, q := range queues {
		n += q
	}
	return n
}

// Handler is the Open Inference Protocol v2 REST API and the jobs API over
// an Engine. Every request gets exactly one answer; handler panics become
// 500s and never reach the server.
type Handler struct {
	eng      Engine
	opt      Options
	models   map[string]ModelInfo // snapshot of eng.Models()
	mux      *http.ServeMux
	draining atomic.Bool
	inflight inflight
	infers   atomic.Int64         // inference requests being handled (MaxInflight)
	bodies   map[string]bodyBound // per model: its infer body bound (inferBodyLimit)
	guard    guard
	nextID   atomic.Uint64
	rawIn    bool // eng takes raw inputs (RawInputs)
}

// NewHandler builds the API over eng.
func NewHandler(eng Engine, opt Options) *Handler {
	def := DefaultConfig()
	if opt.Priority.Levels == 0 {
		opt.Priority = def.Priority
	}
	if opt.BodyLimit <= 0 {
		opt.BodyLimit = def.BodyLimit
	}
	if opt.RequestTimeout <= 0 {
		opt.RequestTimeout = def.RequestTimeout
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.MaxInflight <= 0 {
		var queues []int
		for range eng.Models() {
			queues = append(queues, DefaultMaxQueue)
		}
		opt.MaxInflight = DefaultMaxInflight(queues)
	}
	g, err := newGuard(opt.Restricted)
	if err != nil {
		panic(err)
	}
	h := &Handler{eng: eng, opt: opt, models: map[string]ModelInfo{}, bodies: map[string]bodyBound{}, mux: http.NewServeMux(), guard: g}
	for _, m := range eng.Models() {
		h.models[m.Name] = m
		h.bodies[m.Name] = inferBodyLimit(m, opt.BodyLimit)
	}
	if ri, ok := eng.(RawInputs); ok {
		h.rawIn = ri.AcceptsRaw()
	}
	mux := h.mux
	mux.HandleFunc("GET /v2", h.serverMetadata)
	mux.HandleFunc("GET /v2/{$}", h.serverMetadata)
	mux.HandleFunc("GET /v2/health/live", h.live)
	mux.HandleFunc("GET /v2/health/ready", h.ready)
	mux.HandleFunc("GET /v2/models", h.listModels)
	mux.HandleFunc("GET /v2/models/{$}", h.listModels)
	for _, prefix := range []string{"/v2/models/{name}", "/v2/models/{name}/versions/{version}"} {
		mux.HandleFunc("GET "+prefix, h.modelMetadata)
		mux.HandleFunc("GET "+prefix+"/ready", h.modelReady)
		mux.HandleFunc("POST "+prefix+"/infer", h.infer)
	}
	mux.HandleFunc("POST /v2/jobs", h.submitJob)
	mux.HandleFunc("GET /v2/jobs", h.listJobs)
	mux.HandleFunc("GET /v2/jobs/{id}", h.getJob)
	mux.HandleFunc("DELETE /v2/jobs/{id}", h.cancelJob)
	if opt.MetricsHandler != nil {
		mux.Handle("GET /metrics", opt.MetricsHandler)
	}
	mux.HandleFunc("/", h.notFound)
	return h
}

// Drain makes the handler refuse new work with 503 (shutting down) and
// report not ready, while requests already in flight continue.
func (h *Handler) Drain() { h.draining.Store(true) }

// Wait blocks until every request that entered ServeHTTP has returned.
// Requests may keep arriving while it waits (unlike sync.WaitGroup).
func (h *Handler) Wait() { h.inflight.wait() }

// inflight counts requests in ServeHTTP; wait returns when none are.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil when nobody waits
}

func (f *inflight) add() {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
}

func (f *inflight) done() {
	f.mu.Lock()
	f.n--
	if f.n == 0 && f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
	f.mu.Unlock()
}

func (f *inflight) wait() {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	idle := f.idle
	f.mu.Unlock()
	<-idle
}

// ServeHTTP serves one request: recovers panics, logs at debug level, and
// dispatches.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.inflight.add()
	defer h.inflight.done()
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler { //nolint:errorlint // sentinel panic value
				panic(p)
			}
			h.opt.Logger.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if !sw.wrote {
				writeJSON(sw, http.StatusInternalServerError, errorJSON{Error: fmt.Sprintf("%v: the server failed on this request; it keeps serving others (see the daemon log)", ErrInternal)})
			}
		}
		if h.opt.Logger.Enabled(r.Context(), slog.LevelDebug) {
			h.opt.Logger.Debug("request", "method", r.Method, "path", r.URL.Path, "status", sw.code, "bytes", sw.n, "duration", time.Since(start), "remote", r.RemoteAddr)
		}
	}()
	if !h.authorizeHTTP(sw, r) {
		return
	}
	h.mux.ServeHTTP(sw, r)
}

// statusWriter remembers the status code and whether anything was written.
type statusWriter struct {
	http.ResponseWriter
	code  int
	n     int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.code, w.wrote = http.StatusOK, true
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += n
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeJSON writes v with code. v must marshal (callers marshal risky
// values themselves).
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(errorJSON{Error: fmt.Sprintf("%v: encoding the response: %v", ErrInternal, err)})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	w.Write(append(b, '\n')) //nolint:errcheck // the client may be gone; nothing to do
}

// statusOf maps an error to its HTTP status code.
func statusOf(err error) int {
	var mb *http.MaxBytesError
	var om *errBodyOverModel
	switch {
	case errors.As(err, &mb), errors.As(err, &om):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrBadInput):
		return http.StatusBadRequest
	case errors.Is(err, ErrUnknownModel), errors.Is(err, ErrUnknownJob):
		return http.StatusNotFound
	case errors.Is(err, ErrJobConflict):
		return http.StatusConflict
	case errors.Is(err, ErrTooManyJobs):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrShuttingDown), errors.Is(err, ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		return 499 // client closed the request (nginx's convention)
	}
	return http.StatusInternalServerError
}

// writeError writes err as an Open Inference Protocol error body and
// returns the status code.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) int {
	code := statusOf(err)
	msg := err.Error()
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &mb):
		msg = fmt.Sprintf("%v: the request body is over the limit of %d bytes; send a smaller request or raise body_limit", ErrBadInput, mb.Limit)
	case errors.Is(err, ErrQueueFull):
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, ErrTooManyJobs):
		w.Header().Set("Retry-After", "10")
	case errors.Is(err, ErrShuttingDown), errors.Is(err, ErrUnavailable):
		w.Header().Set("Retry-After", "5")
	case code == http.StatusGatewayTimeout:
		msg = fmt.Sprintf("the request did not finish within request_timeout (%v); retry later or raise request_timeout: %v", h.opt.RequestTimeout, err)
	case code == http.StatusInternalServerError:
		h.opt.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		if !errors.Is(err, ErrInternal) {
			msg = fmt.Sprintf("%v: %v", ErrInternal, err)
		}
	}
	writeJSON(w, code, errorJSON{Error: msg})
	return code
}

func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusNotFound, errorJSON{Error: fmt.Sprintf("no endpoint %s %s; see docs/api.md for the API (GET /v2, POST /v2/models/{name}/infer, /v2/jobs ...)", r.Method, r.URL.Path)})
}

func (h *Handler) serverMetadata(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, serverMetadataJSON{Name: "atoll", Version: h.opt.Version, Extensions: []string{"binary_tensor_data", "priority", "jobs", "metrics"}})
}

func (h *Handler) live(w http.ResponseWriter, r *http.Request) {
	if err := h.broken(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"live": false, "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"live": true})
}

// broken is why the engine stopped for good (Breakable), as a liveness
// probe should read it; nil while it serves or may serve again.
func (h *Handler) broken() error {
	b, ok := h.eng.(Breakable)
	if !ok {
		return nil
	}
	if err := b.Broken(); err != nil {
		return fmt.Errorf("the engine stopped for good (%w): restart the daemon", err)
	}
	return nil
}

func (h *Handler) ready(w http.ResponseWriter, r *http.Request) {
	if h.draining.Load() || !h.eng.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, errorJSON{Error: "the server is not ready (starting or draining); retry later"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ready": true})
}

// model finds the path's model and checks its version. It writes the error
// and returns false when there is none.
func (h *Handler) model(r *http.Request) (ModelInfo, string, error) {
	name := r.PathValue("name")
	m, ok := h.models[name]
	if !ok {
		names := make([]string, 0, len(h.models))
		for n := range h.models {
			names = append(names, strconv.Quote(n))
		}
		slices.Sort(names)
		return m, "", fmt.Errorf("%w %q; served models: %v", ErrUnknownModel, name, names)
	}
	versions := m.Versions
	if len(versions) == 0 {
		versions = []string{"1"}
	}
	v := r.PathValue("version")
	if v != "" && !slices.Contains(versions, v) {
		return m, "", fmt.Errorf("%w: model %q has no version %q; versions: %v", ErrUnknownModel, name, v, versions)
	}
	m.Versions = versions
	return m, v, nil
}

func (h *Handler) modelMetadata(w http.ResponseWriter, r *http.Request) {
	m, _, err := h.model(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if m.Inputs == nil {
		m.Inputs = []TensorInfo{}
	}
	if m.Outputs == nil {
		m.Outputs = []TensorInfo{}
	}
	writeJSON(w, http.StatusOK, m)
}

// listModels answers GET /v2/models: every served model's metadata (as
// GET /v2/models/{name} gives it) and readiness. The Open Inference
// Protocol has no such endpoint; Triton's is POST /v2/repository/index.
func (h *Handler) listModels(w http.ResponseWriter, r *http.Request) {
	type entry struct {
		ModelInfo
		Ready bool `json:"ready"`
	}
	out := struct {
		Models []entry `json:"models"`
	}{Models: []entry{}}
	for _, m := range h.eng.Models() {
		if m.Inputs == nil {
			m.Inputs = []TensorInfo{}
		}
		if m.Outputs == nil {
			m.Outputs = []TensorInfo{}
		}
		out.Models = append(out.Models, entry{ModelInfo: m, Ready: m.Ready && !h.draining.Load() && h.eng.Ready()})
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) modelReady(w http.ResponseWriter, r *http.Request) {
	m, _, err := h.model(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ready := false
	if !h.draining.Load() && h.eng.Ready() {
		for _, mi := range h.eng.Models() {
			if mi.Name == m.Name {
				ready = mi.Ready
			}
		}
	}
	if !ready {
		writeJSON(w, http.StatusServiceUnavailable, errorJSON{Error: fmt.Sprintf("model %q is not ready (loading, or the server is draining); retry later", m.Name)})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": m.Name, "ready": true})
}

// readBody reads the whole body under the configured limit.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return h.readBodyInto(w, r, h.opt.BodyLimit, nil)
}

// bodyPool recycles the buffers of large infer bodies (a ResNet-50 request
// is 600 KB as binary tensor data): allocating and clearing one per request
// is garbage-collector work on the latency path. Safe because nothing
// parsed from a body refers to its bytes (names and ids are copied, values
// decoded into fresh slices, raw inputs copied by ownRaw); serveInfer
// returns the buffer once parsed.
var bodyPool sync.Pool // of *[]byte

const (
	poolMinBody = 64 << 10 // smaller bodies are cheap to allocate
	poolMaxBody = 16 << 20 // larger ones are not kept
)

// pooledBody returns an empty buffer of capacity at least n: a pooled one
// when n is large enough to be worth it.
func pooledBody(n int64) []byte {
	if n >= poolMinBody && n <= poolMaxBody {
		if p, ok := bodyPool.Get().(*[]byte); ok {
			if int64(cap(*p)) >= n {
				return (*p)[:0]
			}
			bodyPool.Put(p)
		}
	}
	return make([]byte, 0, n)
}

// releaseBody hands a body's buffer back for reuse; the caller must not
// touch it afterwards.
func releaseBody(b []byte) {
	if cap(b) >= poolMinBody && cap(b) <= poolMaxBody {
		bodyPool.Put(&b)
	}
}

// Bounds of an infer body for a model whose inputs have fixed shapes
// (inferBodyLimit): room for every input value written out at length in
// JSON, pretty-printed and all, and for the request's names, parameters and
// output requests besides.
const (
	bodyBytesPerValue = 64
	bodySlack         = 64 << 10
)

// bodyBound is the largest infer body accepted for a model, and the number
// of input values it was derived from (0: it is the daemon's BodyLimit).
type bodyBound struct{ limit, values int64 }

// inferBodyLimit is the largest infer body accepted for m: bodyLimit, or
// less when every input of m has a fixed shape (what the engine serves) —
// bodySlack plus bodyBytesPerValue for each input value, more than any
// encoding of a valid request takes. Read with this limit, a chunked body
// too is refused (413) as soon as it is longer, so oversized requests hold
// a model's worth of memory each, not bodyLimit's.
func inferBodyLimit(m ModelInfo, bodyLimit int64) bodyBound {
	none := bodyBound{limit: bodyLimit}
	if len(m.Inputs) == 0 {
		return none
	}
	var values int64
	for _, in := range m.Inputs {
		e := int64(1)
		for _, d := range in.Shape {
			if d < 0 {
				return none // a variable dimension: no bound from the model
			}
			if d > 0 && e > bodyLimit/d {
				return none // more values than bodyLimit has bytes
			}
			e *= d
		}
		if values += e; values > bodyLimit/bodyBytesPerValue {
			return none
		}
	}
	if bound := bodySlack + values*bodyBytesPerValue; bound < bodyLimit {
		return bodyBound{limit: bound, values: values}
	}
	return none
}

// enterInfer counts one more inference request in progress (HTTP or gRPC),
// or refuses it (ErrQueueFull: 503, gRPC Unavailable) when MaxInflight are;
// the caller of a nil error decrements h.infers when it is done.
func (h *Handler) enterInfer() error {
	if n := h.infers.Add(1); n > int64(h.opt.MaxInflight) {
		h.infers.Add(-1)
		return fmt.Errorf("%w: %d inference requests are in progress (max_inflight %d); retry later", ErrQueueFull, n-1, h.opt.MaxInflight)
	}
	return nil
}

// errBodyOverModel is an infer body longer than its model's inputs can
// take (inferBodyLimit): 413, with the model's figures.
type errBodyOverModel struct {
	model         string
	limit, values int64
}

func (e *errBodyOverModel) Error() string {
	return fmt.Sprintf("%v: the request body is over %d bytes, more than any encoding of model %q's inputs (%d values) takes; check the inputs' shapes against GET /v2/models/%s",
		ErrBadInput, e.limit, e.model, e.values, e.model)
}

// readBodyInto is readBody reading into a buffer from pooledBody when pool
// is set (serveInfer), else a fresh one, refusing a body over limit bytes.
func (h *Handler) readBodyInto(w http.ResponseWriter, r *http.Request, limit int64, pool func(n int64) []byte) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	n := r.ContentLength
	if n < 0 || n > 1<<20 {
		n = 512
	}
	var buf []byte
	if pool != nil && r.ContentLength >= 0 {
		buf = pool(r.ContentLength + 1)
	} else {
		buf = make([]byte, 0, n+1)
	}
	for {
		m, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: reading the request body: %v", ErrBadInput, err)
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
}

func (h *Handler) infer(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	name := r.PathValue("name")
	done := h.opt.Metrics.begin(name)
	defer done()
	var class Class
	var res *InferResult
	code := h.serveInfer(w, r, arrived, &class, &res)
	h.opt.Metrics.observe(name, class, code, time.Since(arrived), res)
}

// serveInfer answers one infer request exactly once and returns the code.
func (h *Handler) serveInfer(w http.ResponseWriter, r *http.Request, arrived time.Time, class *Class, out **InferResult) int {
	m, version, err := h.model(r)
	if err != nil {
		return h.writeError(w, r, err)
	}
	if h.draining.Load() {
		return h.writeError(w, r, fmt.Errorf("%w: the daemon is draining; send the request to another replica", ErrShuttingDown))
	}
	if err := h.enterInfer(); err != nil {
		return h.writeError(w, r, err)
	}
	defer h.infers.Add(-1)
	bound := h.bodies[m.Name]
	body, err := h.readBodyInto(w, r, bound.limit, pooledBody)
	if err != nil {
		var mb *http.MaxBytesError
		if bound.values > 0 && errors.As(err, &mb) {
			err = &errBodyOverModel{model: m.Name, limit: bound.limit, values: bound.values}
		}
		return h.writeError(w, r, err)
	}
	var req *InferRequest
	var modes outputModes
	var id string
	var cl Class
	switch hl := r.Header.Values(inferHeaderLength); len(hl) {
	case 0:
		req, modes, id, cl, err = parseInferJSON(body, m, h.opt.Priority)
	case 1:
		req, modes, id, cl, err = parseInferBinaryRaw(body, hl[0], m, h.opt.Priority, h.rawIn)
	default:
		err = badInput("the request has %d %s headers; send one, the length of the JSON part of the body", len(hl), inferHeaderLength)
	}
	releaseBody(body) // nothing parsed refers to it (raw inputs are copies); body is not used below
	*class = cl
	if err != nil {
		return h.writeError(w, r, err)
	}
	req.Arrived = arrived
	internalID := req.ID
	if internalID == "" {
		internalID = "r" + strconv.FormatUint(h.nextID.Add(1), 10)
	}
	req.ID = internalID
	ctx, cancel := context.WithTimeout(r.Context(), h.opt.RequestTimeout)
	defer cancel()
	res, err := h.eng.Infer(ctx, req)
	if err == nil && res == nil {
		err = fmt.Errorf("%w: the engine returned no result and no error", ErrInternal)
	}
	if err != nil {
		return h.writeError(w, r, err)
	}
	*out = res
	resp := inferResponseJSON{
		ModelName:    m.Name,
		ModelVersion: version,
		ID:           id,
		Parameters:   responseParams{Class: req.Class, QueueNs: res.Queue.Nanoseconds(), ServiceNs: res.Service.Nanoseconds()},
	}
	b, jsonLen, binary, err := appendBinaryResponse(make([]byte, 0, responseSizeHint(res.Outputs, modes)), &resp, res.Outputs, modes)
	if err != nil {
		if errors.Is(err, ErrInternal) {
			return h.writeError(w, r, err)
		}
		return h.writeError(w, r, fmt.Errorf("%w: the outputs cannot be sent as JSON: %v", ErrInternal, err))
	}
	if binary {
		w.Header().Set("Content-Type", binaryContentType)
		w.Header().Set(inferHeaderLength, strconv.Itoa(jsonLen))
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	w.Write(b) //nolint:errcheck // the client may be gone
	return http.StatusOK
}

func (h *Handler) submitJob(w http.ResponseWriter, r *http.Request) {
	if h.draining.Load() {
		h.writeError(w, r, fmt.Errorf("%w: the daemon is draining; submit the job elsewhere or later", ErrShuttingDown))
		return
	}
	body, err := h.readBody(w, r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var spec JobSpec
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		h.writeError(w, r, badInput("the body is not a job spec {\"model\", \"iterations\", optional \"batch\", \"resume\"}: %s", jsonProblem(err)))
		return
	}
	if dec.More() {
		h.writeError(w, r, badInput("the body has data after the job spec; send exactly one object"))
		return
	}
	switch {
	case spec.Model == "":
		err = badInput("job spec has no \"model\"; give a zoo model name")
	case spec.Batch < 0:
		err = badInput("job spec \"batch\" is %d; give a batch the daemon allows for the model, or leave it out for the configured one", spec.Batch)
	case spec.Iterations <= 0:
		err = badInput("job spec \"iterations\" is %d; it must be > 0", spec.Iterations)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	st, err := h.eng.SubmitJob(spec)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v2/jobs/"+st.ID)
	writeJSON(w, http.StatusCreated, st)
}

func (h *Handler) listJobs(w http.ResponseWriter, r *http.Request) {
	jobs := h.eng.Jobs()
	if jobs == nil {
		jobs = []JobStatus{}
	}
	writeJSON(w, http.StatusOK, map[string][]JobStatus{"jobs": jobs})
}

func (h *Handler) getJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, ok := h.eng.Job(id)
	if !ok {
		h.writeError(w, r, fmt.Errorf("%w %q; GET /v2/jobs lists the jobs", ErrUnknownJob, id))
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Handler) cancelJob(w http.ResponseWriter, r *http.Request) {
	st, err := h.eng.CancelJob(r.PathValue("id"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
