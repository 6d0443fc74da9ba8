package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sentinel errors. Every error Run, NewClient and Metadata return wraps one.
var (
	ErrURL          = errors.New("loadgen: bad URL")
	ErrModel        = errors.New("loadgen: bad model")
	ErrUnknownModel = errors.New("loadgen: unknown model")
	ErrConfig       = errors.New("loadgen: bad configuration")
	ErrServer       = errors.New("loadgen: server")
)

// Hard caps: a load run is bounded whatever the flags say.
const (
	MaxInFlightCap = 10000
	MaxRequests    = 5_000_000
	MaxDuration    = time.Hour
	MaxTimeout     = 5 * time.Minute
	maxElements    = 1 << 24 // elements in one request's input tensors
	maxBody        = 64 << 20
	maxMetaBody    = 1 << 20
)

// ClientOptions tune a Client.
type ClientOptions struct {
	// MaxInFlight sizes the connection pool: at most this many requests
	// are outstanding at once, each on its own reused connection.
	MaxInFlight int
	// Timeout bounds one request (connect, send, wait, read). 0 means 10s.
	Timeout time.Duration
}

// Client talks the Open Inference Protocol v2 REST API to one daemon. It is
// safe for concurrent use. Close releases its idle connections.
type Client struct {
	base    *url.URL
	hc      *http.Client
	tr      *http.Transport
	timeout time.Duration
	// msgs keeps the daemon's first error message per HTTP error kind
	// ("http-400" → "value 0 is -5; ..."), for the report.
	msgs sync.Map
}

// Messages returns the daemon's first error message for each HTTP error
// kind seen so far.
func (c *Client) Messages() map[string]string {
	out := map[string]string{}
	c.msgs.Range(func(k, v any) bool {
		out[k.(string)] = v.(string)
		return true
	})
	return out
}

// CheckURL parses a daemon's base URL: http or https, a host, and nothing
// after the path. It does not restrict the host; the command defaults to
// loopback and only goes elsewhere when told to with an explicit --url.
func CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v (want e.g. http://127.0.0.1:8000)", ErrURL, raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: %q: scheme must be http or https (want e.g. http://127.0.0.1:8000)", ErrURL, raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("%w: %q has no host (want e.g. http://127.0.0.1:8000)", ErrURL, raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: %q: give only scheme, host, port and an optional path prefix", ErrURL, raw)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// IsLoopback reports whether u names this machine (localhost or a loopback
// address).
func IsLoopback(u *url.URL) bool {
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

var modelName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// CheckModel checks a model name: letters, digits, '.', '_', '-', at most
// 128 characters, so it is one path segment of the API.
func CheckModel(name string) error {
	if !modelName.MatchString(name) {
		return fmt.Errorf("%w: %q: a model name is 1-128 letters, digits, '.', '_' or '-' starting with a letter or digit (list them with GET /v2/models or 'atoll models')", ErrModel, name)
	}
	return nil
}

// NewClient makes a client for the daemon at rawURL.
func NewClient(rawURL string, o ClientOptions) (*Client, error) {
	u, err := CheckURL(rawURL)
	if err != nil {
		return nil, err
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 64
	}
	if o.MaxInFlight > MaxInFlightCap {
		return nil, fmt.Errorf("%w: max in-flight %d is over the cap of %d", ErrConfig, o.MaxInFlight, MaxInFlightCap)
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Timeout < 0 || o.Timeout > MaxTimeout {
		return nil, fmt.Errorf("%w: request timeout %v must be in (0, %v]", ErrConfig, o.Timeout, MaxTimeout)
	}
	tr := &http.Transport{
		Proxy: nil, // a load test measures the daemon, not a proxy
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          o.MaxInFlight,
		MaxIdleConnsPerHost:   o.MaxInFlight, // reuse: one warm connection per in-flight slot
		MaxConnsPerHost:       o.MaxInFlight,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
		WriteBufferSize:       64 << 10, // ResNet-50 inputs are 600 KB binary, more as JSON
		ReadBufferSize:        64 << 10,
		ForceAttemptHTTP2:     false,
	}
	return &Client{base: u, tr: tr, hc: &http.Client{Transport: tr}, timeout: o.Timeout}, nil
}

// URL is the daemon's base URL.
func (c *Client) URL() string { return c.base.String() }

// Close closes the client's idle connections. Call it after Run.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

func (c *Client) endpoint(parts ...string) string {
	u := *c.base
	p := u.Path
	for _, s := range parts {
		p += "/" + url.PathEscape(s)
	}
	u.Path = p
	return u.String()
}

// Metadata is the model metadata response of GET /v2/models/{name}.
type Metadata struct {
	Name     string       `json:"name"`
	Versions []string     `json:"versions,omitempty"`
	Platform string       `json:"platform"`
	Inputs   []TensorMeta `json:"inputs"`
	Outputs  []TensorMeta `json:"outputs"`
}

// TensorMeta describes one model input or output.
type TensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// errorBody is the Open Inference Protocol error response.
type errorBody struct {
	Error string `json:"error"`
}

// Metadata fetches a model's metadata.
func (c *Client) Metadata(ctx context.Context, model string) (*Metadata, error) {
	if err := CheckModel(model); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.endpoint("v2", "models", model), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrURL, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("loadgen: GET model metadata: %w", ctx.Err())
		}
		return nil, fmt.Errorf("%w: GET model metadata from %s: %v (is 'atoll serve' running there?)", ErrServer, c.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetaBody))
	if err != nil {
		return nil, fmt.Errorf("%w: reading model metadata: %v", ErrServer, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w: %q is not served at %s%s (list the served models with GET /v2/models)", ErrUnknownModel, model, c.base, serverSays(body))
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%w: GET model metadata: HTTP %d%s", ErrServer, resp.StatusCode, serverSays(body))
	}
	var m Metadata
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("%w: model metadata is not Open Inference Protocol JSON: %v", ErrServer, err)
	}
	if len(m.Inputs) == 0 {
		return nil, fmt.Errorf("%w: model %q declares no inputs", ErrServer, model)
	}
	return &m, nil
}

func serverSays(body []byte) string {
	var e errorBody
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return ": server says: " + e.Error
	}
	return ""
}

// Kinds of outcome, the keys of a report's error counts.
const (
	KindOK          = "ok"
	KindTimeout     = "timeout"      // no answer within the request timeout
	KindTransport   = "transport"    // connection refused, reset, or closed mid-request
	KindBadResponse = "bad-response" // 200 with a body that is not an inference response
	KindCancelled   = "cancelled"    // the run was interrupted while the request was in flight
	KindDropped     = "dropped"      // not sent: the generator was at its in-flight bound
)

// KindHTTP is the kind of an HTTP error status: "http-503" and so on.
func KindHTTP(status int) string { return fmt.Sprintf("http-%d", status) }

// inferResponse is the part of an inference response the generator checks.
type inferResponse struct {
	Outputs []struct {
		Parameters map[string]json.RawMessage `json:"parameters"`
		Data       json.RawMessage            `json:"data"`
	} `json:"outputs"`
}

// inferHeaderLength is the binary tensor data extension's header: the
// length of the JSON part of a body.
const inferHeaderLength = "Inference-Header-Content-Length"

// Infer posts request id of a prepared body and classifies the outcome. It
// returns KindOK or one of the error kinds; it never returns an error for
// the server's or the network's failure, only a kind. The body goes out as
// the prepared slices themselves (only the id is fresh): no encoding and no
// copy of the tensor data per request.
func (c *Client) Infer(ctx context.Context, model string, b *Body, id int) (kind string) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	head, suffix, raw := b.pieces(id)
	size := int64(len(head) + len(suffix) + len(raw))
	open := func() io.Reader {
		return io.MultiReader(bytes.NewReader(head), bytes.NewReader(suffix), bytes.NewReader(raw))
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, c.endpoint("v2", "models", model, "infer"), open())
	if err != nil {
		return KindTransport
	}
	req.ContentLength = size
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(open()), nil }
	if b.Binary() {
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set(inferHeaderLength, strconv.Itoa(len(head)+len(suffix)))
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return classifyErr(ctx, rctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		kind := KindHTTP(resp.StatusCode)
		// Read it all so the connection is reused; keep the first
		// message of each kind.
		var body bytes.Buffer
		if _, err := body.ReadFrom(io.LimitReader(resp.Body, maxBody)); err != nil {
			return classifyErr(ctx, rctx, err)
		}
		if _, seen := c.msgs.Load(kind); !seen {
			var e struct {
				Error string `json:"error"`
			}
			msg := strings.TrimSpace(body.String())
			if json.Unmarshal(body.Bytes(), &e) == nil && e.Error != "" {
				msg = e.Error
			}
			if len(msg) > 300 {
				msg = msg[:300] + "…"
			}
			c.msgs.LoadOrStore(kind, msg)
		}
		return kind
	}
	var buf bytes.Buffer
	if resp.ContentLength > 0 && resp.ContentLength <= maxBody {
		buf.Grow(int(resp.ContentLength))
	}
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, maxBody)); err != nil {
		return classifyErr(ctx, rctx, err)
	}
	if !validResponse(buf.Bytes(), resp.Header.Values(inferHeaderLength)) {
		return KindBadResponse
	}
	return KindOK
}

// validResponse checks an inference response: a JSON object with outputs,
// and with the binary extension's header, a JSON part of that length
// whose outputs' binary_data_size values add up to the bytes after it.
func validResponse(body []byte, header []string) bool {
	js, rest := body, []byte(nil)
	switch len(header) {
	case 0:
	case 1:
		n, err := strconv.ParseUint(header[0], 10, 63)
		if err != nil || n > uint64(len(body)) {
			return false
		}
		js, rest = body[:n], body[n:]
	default:
		return false
	}
	var r inferResponse
	if json.Unmarshal(js, &r) != nil || len(r.Outputs) == 0 {
		return false
	}
	sum := uint64(0)
	for _, o := range r.Outputs {
		size, ok := o.Parameters["binary_data_size"]
		if !ok {
			if len(o.Data) == 0 {
				return false
			}
			continue
		}
		v, err := strconv.ParseUint(string(size), 10, 63)
		if err != nil || len(o.Data) != 0 || v > uint64(len(rest)) {
			return false
		}
		sum += v
	}
	return sum == uint64(len(rest))
}

func classifyErr(parent, rctx context.Context, err error) string {
	switch {
	case parent.Err() != nil:
		return KindCancelled
	case errors.Is(rctx.Err(), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return KindTimeout
		}
		return KindTransport
	}
}
