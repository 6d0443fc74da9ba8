package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func nanValue() float64 { return math.NaN() }

// leakCheck fails t if goroutines started during the test outlive it. Call
// it first: cleanups run last-registered first, so servers close before it.
func leakCheck(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// apiServer serves a Handler over a fake engine on loopback.
func apiServer(t *testing.T, f *fakeEngine, opt Options) (*httptest.Server, *http.Client) {
	t.Helper()
	ts := httptest.NewServer(NewHandler(f, opt))
	c := ts.Client()
	t.Cleanup(func() {
		c.CloseIdleConnections()
		ts.Close()
	})
	return ts, c
}

type reply struct {
	code int
	hdr  http.Header
	body map[string]any
	raw  string
}

func do(t *testing.T, c *http.Client, method, url, body string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{code: resp.StatusCode, hdr: resp.Header, raw: string(raw)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			t.Fatalf("%s %s: response is not a JSON object: %v\n%s", method, url, err, raw)
		}
	}
	return r
}

const goodInfer = `{"id":"req-1","inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`

func TestMetadataAndHealth(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	ts, c := apiServer(t, f, Options{Version: "v9.9"})
	u := ts.URL

	r := do(t, c, "GET", u+"/v2", "")
	if r.code != 200 || r.body["name"] != "atoll" || r.body["version"] != "v9.9" {
		t.Errorf("GET /v2 = %d %s", r.code, r.raw)
	}
	if ext, _ := r.body["extensions"].([]any); len(ext) == 0 {
		t.Errorf("GET /v2 has no extensions: %s", r.raw)
	}
	if r := do(t, c, "GET", u+"/v2/health/live", ""); r.code != 200 {
		t.Errorf("live = %d", r.code)
	}
	if r := do(t, c, "GET", u+"/v2/health/ready", ""); r.code != 200 {
		t.Errorf("ready = %d", r.code)
	}
	f.ready.Store(false)
	if r := do(t, c, "GET", u+"/v2/health/ready", ""); r.code != 503 || r.body["error"] == nil {
		t.Errorf("ready while engine not ready = %d %s", r.code, r.raw)
	}
	if r := do(t, c, "GET", u+"/v2/models/echo/ready", ""); r.code != 503 {
		t.Errorf("model ready while engine not ready = %d", r.code)
	}
	f.ready.Store(true)
	// An engine stopped for good is not live: a supervisor restarts the process.
	lost := error(errors.New("device lost"))
	f.broken.Store(&lost)
	if r := do(t, c, "GET", u+"/v2/health/live", ""); r.code != 503 || r.body["live"] != false || !strings.Contains(r.raw, "restart the daemon") {
		t.Errorf("live while the engine is broken = %d %s", r.code, r.raw)
	}
	f.broken.Store(nil)

	if r := do(t, c, "GET", u+"/v2/models", ""); r.code != 200 || !strings.Contains(r.raw, `"name":"echo"`) || !strings.Contains(r.raw, `"ready":true`) || !strings.Contains(r.raw, `"ready":false`) {
		t.Errorf("GET /v2/models = %d %s: want every model with its readiness", r.code, r.raw)
	}
	for _, path := range []string{"/v2/models/echo", "/v2/models/echo/versions/1"} {
		r := do(t, c, "GET", u+path, "")
		if r.code != 200 || r.body["name"] != "echo" || r.body["platform"] != "atoll" {
			t.Errorf("GET %s = %d %s", path, r.code, r.raw)
			continue
		}
		ins, _ := r.body["inputs"].([]any)
		outs, _ := r.body["outputs"].([]any)
		vs, _ := r.body["versions"].([]any)
		if len(ins) != 1 || len(outs) != 2 || len(vs) != 1 || vs[0] != "1" {
			t.Errorf("GET %s: inputs/outputs/versions wrong: %s", path, r.raw)
		}
		if in, _ := ins[0].(map[string]any); in["name"] != "input0" || in["datatype"] != "FP32" {
			t.Errorf("GET %s: input metadata %v", path, in)
		}
	}
	for path, want := range map[string]int{
		"/v2/models/echo/ready":              200,
		"/v2/models/echo/versions/1/ready":   200,
		"/v2/models/loading/ready":           503,
		"/v2/models/nope/ready":              404,
		"/v2/models/nope":                    404,
		"/v2/models/echo/versions/2":         404,
		"/v2/models/echo/versions/2/ready":   404,
		"/v2/nothing/here":                   404,
		"/v2/models/echo/versions/1/unknown": 404,
	} {
		r := do(t, c, "GET", u+path, "")
		if r.code != want {
			t.Errorf("GET %s = %d, want %d (%s)", path, r.code, want, r.raw)
		}
		if want != 200 {
			if msg, _ := r.body["error"].(string); msg == "" {
				t.Errorf("GET %s: no OIP error body: %q", path, r.raw)
			}
		}
	}
	if r := do(t, c, "GET", u+"/v2/models/nope", ""); !strings.Contains(r.raw, `\"echo\"`) {
		t.Errorf("unknown model error does not list the served models: %s", r.raw)
	}
}

func TestInferSuccess(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	ts, c := apiServer(t, f, Options{})
	u := ts.URL + "/v2/models/echo/infer"

	for name, body := range map[string]string{
		"flat":   goodInfer,
		"nested": `{"id":"req-1","inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[[1,2,3,4]]}]}`,
	} {
		r := do(t, c, "POST", u, body)
		if r.code != 200 {
			t.Fatalf("%s: %d %s", name, r.code, r.raw)
		}
		if r.body["model_name"] != "echo" || r.body["id"] != "req-1" {
			t.Errorf("%s: model_name/id wrong: %s", name, r.raw)
		}
		outs := r.body["outputs"].([]any)
		if len(outs) != 2 {
			t.Fatalf("%s: want 2 outputs: %s", name, r.raw)
		}
		o := outs[0].(map[string]any)
		if fmt.Sprint(o["data"]) != "[2 4 6 8]" || fmt.Sprint(o["shape"]) != "[1 4]" || o["datatype"] != "FP32" || o["name"] != "output0" {
			t.Errorf("%s: output0 = %v", name, o)
		}
		p := r.body["parameters"].(map[string]any)
		if p["class"] != "HP" || p["queue_time_ns"] != float64(150000) || p["service_time_ns"] != float64(1e6) {
			t.Errorf("%s: parameters = %v", name, p)
		}
	}

	// Requested outputs only; versioned path; no id.
	r := do(t, c, "POST", ts.URL+"/v2/models/echo/versions/1/infer",
		`{"inputs":[{"name":"input0","shape":[2,4],"datatype":"FP32","data":[1,1,1,1,1,1,1,1]}],"outputs":[{"name":"sum"}]}`)
	if r.code != 200 {
		t.Fatalf("versioned infer: %d %s", r.code, r.raw)
	}
	outs := r.body["outputs"].([]any)
	if len(outs) != 1 || fmt.Sprint(outs[0].(map[string]any)["data"]) != "[8]" {
		t.Errorf("requested output sum: %s", r.raw)
	}
	if _, ok := r.body["id"]; ok {
		t.Errorf("response has an id the request did not send: %s", r.raw)
	}
	if r.body["model_version"] != "1" {
		t.Errorf("versioned response has model_version %v", r.body["model_version"])
	}

	// BOOL outputs come back as JSON booleans.
	r = do(t, c, "POST", ts.URL+"/v2/models/bools/infer", `{"inputs":[{"name":"x","shape":[2],"datatype":"BOOL","data":[true,false]}]}`)
	if r.code != 200 || fmt.Sprint(r.body["outputs"].([]any)[0].(map[string]any)["data"]) != "[true false]" {
		t.Errorf("bools: %d %s", r.code, r.raw)
	}
}

// TestInferErrors sends every kind of bad request and checks the status,
// the OIP error body, and that the message says what is wrong.
func TestInferErrors(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	ts, c := apiServer(t, f, Options{BodyLimit: 4096, Priority: PriorityConfig{Levels: 3, HPMax: 1}})
	in := func(shape, dtype, data string) string {
		return fmt.Sprintf(`{"inputs":[{"name":"input0","shape":%s,"datatype":%q,"data":%s}]}`, shape, dtype, data)
	}
	cases := []struct {
		name, model, body string
		code              int
		want              string
	}{
		{"malformed", "echo", `{"inputs":[`, 400, "body ended"},
		{"not json", "echo", `hello`, 400, "malformed JSON"},
		{"empty", "echo", ``, 400, "body is empty"},
		{"trailing", "echo", goodInfer + `{}`, 400, "after the JSON object"},
		{"unknown field", "echo", `{"inputs":[],"bogus":1}`, 400, `unknown field "bogus"`},
		{"unknown tensor field", "echo", `{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4],"contents":{}}]}`, 400, `unknown field "contents"`},
		{"wrong json type", "echo", `{"inputs":"x"}`, 400, `"inputs" must be a JSON array`},
		{"no inputs", "echo", `{"inputs":[]}`, 400, "no inputs"},
		{"no name", "echo", `{"inputs":[{"shape":[1],"datatype":"FP32","data":[1]}]}`, 400, `inputs[0] has no "name"`},
		{"no datatype", "echo", in(`[1,4]`, "", `[1,2,3,4]`), 400, `no "datatype"`},
		{"unknown datatype", "echo", in(`[1,4]`, "FP8", `[1,2,3,4]`), 400, `unknown datatype "FP8"`},
		{"bytes", "echo", in(`[1]`, "BYTES", `["a"]`), 400, "BYTES is not supported"},
		{"no shape", "echo", `{"inputs":[{"name":"input0","datatype":"FP32","data":[1]}]}`, 400, `no "shape"`},
		{"negative shape", "echo", in(`[-1,4]`, "FP32", `[1,2,3,4]`), 400, "shape[0] is -1"},
		{"huge shape", "echo", in(`[100000,100000,100000]`, "FP32", `[1]`), 400, "elements"},
		{"no data", "echo", `{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32"}]}`, 400, `no "data"`},
		{"short data", "echo", in(`[1,4]`, "FP32", `[1,2,3]`), 400, "needs 4 values, data has 3"},
		{"long data", "echo", in(`[1,4]`, "FP32", `[[1,2,3,4],[5]]`), 400, "needs 4 values, data has 5"},
		{"string data", "echo", in(`[1,4]`, "FP32", `[1,"2",3,4]`), 400, "string"},
		{"null data", "echo", in(`[1,4]`, "FP32", `[1,null,3,4]`), 400, "null"},
		{"object data", "echo", in(`[1,4]`, "FP32", `[{"a":1}]`), 400, "object"},
		{"bool in fp32", "echo", in(`[1,4]`, "FP32", `[true,1,2,3]`), 400, "boolean"},
		{"deep nesting", "echo", in(`[1]`, "FP32", strings.Repeat("[", 20)+"1"+strings.Repeat("]", 20)), 400, "nested deeper"},
		{"fraction in int", "be-model", in(`[2]`, "INT32", `[1,2.5]`), 400, "not an integer"},
		{"int8 range", "be-model", in(`[1]`, "INT8", `[300]`), 400, "out of range for INT8"},
		{"uint negative", "be-model", in(`[1]`, "UINT8", `[-1]`), 400, "out of range for UINT8"},
		{"fp16 range", "be-model", in(`[1]`, "FP16", `[1e6]`), 400, "out of range for FP16"},
		{"number in bool", "be-model", in(`[1]`, "BOOL", `[1]`), 400, "true or false"},
		{"duplicate input", "be-model", `{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[1]},{"name":"a","shape":[1],"datatype":"FP32","data":[1]}]}`, 400, "appears twice"},
		{"wrong input name", "echo", `{"inputs":[{"name":"image","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`, 400, `no input "image"`},
		{"wrong datatype for model", "echo", in(`[1,4]`, "FP64", `[1,2,3,4]`), 400, "wants FP32"},
		{"wrong shape for model", "echo", in(`[4]`, "FP32", `[1,2,3,4]`), 400, "wants [-1 4]"},
		{"unknown output", "echo", `{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"logits"}]}`, 400, `no output "logits"`},
		{"unnamed output", "echo", `{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{}]}`, 400, `outputs[0] has no "name"`},
		{"priority not int", "echo", `{"parameters":{"priority":"high"},"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`, 400, "must be an integer"},
		{"priority too low", "echo", `{"parameters":{"priority":4},"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`, 400, "use 1 (highest) to 3"},
		{"priority negative", "echo", `{"parameters":{"priority":-1},"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`, 400, "use 1 (highest) to 3"},
		{"unknown model", "nope", goodInfer, 404, "unknown model"},
		{"too big", "echo", in(`[1,4]`, "FP32", "["+strings.Repeat("1.0,", 2000)+"1]"), 413, "over the limit of 4096 bytes"},
		{"engine internal", "broken", in(`[1]`, "FP32", `[1]`), 500, "fake device fault"},
		{"engine nil result", "nilresult", in(`[1]`, "FP32", `[1]`), 500, "no result"},
		{"engine panic", "panics", in(`[1]`, "FP32", `[1]`), 500, "keeps serving others"},
		{"NaN output", "nan", in(`[1]`, "FP32", `[1]`), 500, "NaN"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, c, "POST", ts.URL+"/v2/models/"+tc.model+"/infer", tc.body)
			if r.code != tc.code {
				t.Fatalf("status %d, want %d: %s", r.code, tc.code, r.raw)
			}
			msg, _ := r.body["error"].(string)
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not contain %q", msg, tc.want)
			}
			if len(r.body) != 1 {
				t.Errorf("error body has fields other than \"error\": %s", r.raw)
			}
		})
	}
	// The server still serves after all of that.
	if r := do(t, c, "POST", ts.URL+"/v2/models/echo/infer", goodInfer); r.code != 200 {
		t.Errorf("good request after the bad ones: %d %s", r.code, r.raw)
	}
}

func TestBodyLimitChunked(t *testing.T) {
	leakCheck(t)
	ts, c := apiServer(t, newFakeEngine(), Options{BodyLimit: 2048})
	// No Content-Length: the limit must hold while reading.
	code, raw := postChunked(t, c, ts.URL+"/v2/models/echo/infer", `{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[`, "1,", 4000, "1]}]}")
	if code != 413 || !strings.Contains(raw, "over the limit of 2048 bytes") {
		t.Errorf("chunked body over limit: %d %s", code, raw)
	}
}

// postChunked posts head, n times rep, then tail as a body without a
// Content-Length (chunked) and returns the answer's status and body.
func postChunked(t *testing.T, c *http.Client, url, head, rep string, n int, tail string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, io.MultiReader(strings.NewReader(head), strings.NewReader(strings.Repeat(rep, n)+tail)))
	if req.ContentLength != 0 && req.ContentLength != -1 {
		t.Fatalf("request has a Content-Length (%d); the test needs chunked", req.ContentLength)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(raw)
}

// TestBodyLimitFromModel: a model whose inputs have fixed shapes bounds its
// infer bodies far below body_limit, chunked ones included, and a valid
// request of any layout still fits.
func TestBodyLimitFromModel(t *testing.T) {
	leakCheck(t)
	ts, c := apiServer(t, newFakeEngine(), Options{BodyLimit: 64 << 20})
	// A valid request, pretty-printed at length: 8 values.
	pretty := "{\n  \"inputs\": [\n    {\n      \"name\": \"input0\",\n      \"shape\": [2, 4],\n      \"datatype\": \"FP32\",\n      \"data\": [" +
		strings.Repeat("\n        -1.2345678901234567e-38,", 7) + "\n        1.0\n      ]\n    }\n  ]\n}\n"
	if r := do(t, c, "POST", ts.URL+"/v2/models/fixed/infer", pretty); r.code != 200 {
		t.Fatalf("valid pretty-printed request: %d %s", r.code, r.raw)
	}
	// 2 MB of a chunked body: far over fixed's bound (64 KiB + 8 × 64 bytes),
	// far under body_limit. The server stops reading at the bound.
	code, raw := postChunked(t, c, ts.URL+"/v2/models/fixed/infer", `{"inputs":[{"name":"input0","shape":[2,4],"datatype":"FP32","data":[`, "1,", 1<<20, "1]}]}")
	if code != 413 || !strings.Contains(raw, `model \"fixed\"'s inputs (8 values)`) {
		t.Errorf("chunked body over the model's bound: %d %s", code, raw)
	}
	// The bound from the inputs' shapes; none where a dimension varies.
	for _, tc := range []struct {
		in           []TensorInfo
		limit, value int64
	}{
		{nil, 1 << 20, 0},
		{[]TensorInfo{{Shape: []int64{-1, 4}}}, 1 << 20, 0},
		{[]TensorInfo{{Shape: []int64{2, 4}}}, bodySlack + 8*bodyBytesPerValue, 8},
		{[]TensorInfo{{Shape: []int64{2, 4}}, {Shape: []int64{3}}}, bodySlack + 11*bodyBytesPerValue, 11},
		{[]TensorInfo{{Shape: []int64{0, 4}}}, bodySlack, 0},
		{[]TensorInfo{{Shape: []int64{1, 224, 224, 3}}}, 1 << 20, 0},            // over body_limit: body_limit
		{[]TensorInfo{{Shape: []int64{1 << 40, 1 << 40, 1 << 40}}}, 1 << 20, 0}, // no overflow
	} {
		if b := inferBodyLimit(ModelInfo{Inputs: tc.in}, 1<<20); b.limit != tc.limit || b.values != tc.value {
			t.Errorf("inferBodyLimit(%v) = %+v; want %d, %d", tc.in, b, tc.limit, tc.value)
		}
	}
}

func TestQueueFullRetryAfter(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	f.queueMax = 1
	f.block = make(chan struct{})
	f.entered = make(chan string, 1)
	ts, c := apiServer(t, f, Options{})
	first := make(chan reply, 1)
	go func() { first <- do(t, c, "POST", ts.URL+"/v2/models/echo/infer", goodInfer) }()
	<-f.entered
	r := do(t, c, "POST", ts.URL+"/v2/models/echo/infer", goodInfer)
	if r.code != 503 || r.hdr.Get("Retry-After") == "" || !strings.Contains(r.body["error"].(string), "queue full") {
		t.Errorf("queue full: %d Retry-After=%q %s", r.code, r.hdr.Get("Retry-After"), r.raw)
	}
	close(f.block)
	if r := <-first; r.code != 200 {
		t.Errorf("the queued request: %d %s", r.code, r.raw)
	}
}

// TestMaxInflight: with max_inflight requests being handled, one more is
// refused at once with 503 and Retry-After (its body unread); once they
// finish, requests are served again. The default counts every model's queue.
func TestMaxInflight(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	f.block = make(chan struct{})
	f.entered = make(chan string, 2)
	ts, c := apiServer(t, f, Options{MaxInflight: 2})
	held := make(chan reply, 2)
	for range 2 {
		go func() { held <- do(t, c, "POST", ts.URL+"/v2/models/echo/infer", goodInfer) }()
		<-f.entered
	}
	calls := f.calls.Load()
	r := do(t, c, "POST", ts.URL+"/v2/models/echo/infer", goodInfer)
	if r.code != 503 || r.hdr.Get("Retry-After") == "" || !strings.Contains(r.raw, "max_inflight 2") {
		t.Errorf("third request in flight: %d Retry-After=%q %s", r.code, r.hdr.Get("Retry-After"), r.raw)
	}
	if f.calls.Load() != calls {
		t.Error("the refused request reached the engine")
	}
	close(f.block)
	for range 2 {
		if r := <-held; r.code != 200 {
			t.Errorf("a request in flight: %d %s", r.code, r.raw)
		}
	}
	if r := do(t, c, "POST", ts.URL+"/v2/models/echo/infer", goodInfer); r.code != 200 {
		t.Errorf("after the others finished: %d %s", r.code, r.raw)
	}
	if got, want := DefaultMaxInflight([]int{64, 16}), 80+8*runtime.GOMAXPROCS(0); got != want {
		t.Errorf("DefaultMaxInflight(64, 16) = %d, want %d", got, want)
	}
}

func TestPriorityMapping(t *testing.T) {
	leakCheck(t)
	for _, tc := range []struct {
		prio    PriorityConfig
		model   string
		param   string // "" = absent
		want    Class
		wantErr bool
	}{
		{PriorityConfig{Levels: 2, HPMax: 1}, "echo", "", HP, false},
		{PriorityConfig{Levels: 2, HPMax: 1}, "be-model", "", BE, false},
		{PriorityConfig{Levels: 2, HPMax: 1}, "be-model", "0", BE, false},
		{PriorityConfig{Levels: 2, HPMax: 1}, "be-model", "1", HP, false},
		{PriorityConfig{Levels: 2, HPMax: 1}, "echo", "2", BE, false},
		{PriorityConfig{Levels: 2, HPMax: 1}, "echo", "3", "", true},
		{PriorityConfig{Levels: 5, HPMax: 2}, "be-model", "2", HP, false},
		{PriorityConfig{Levels: 5, HPMax: 2}, "echo", "3", BE, false},
		{PriorityConfig{Levels: 5, HPMax: 2}, "echo", "5", BE, false},
		{PriorityConfig{Levels: 5, HPMax: 0}, "echo", "1", BE, false},
		{PriorityConfig{Levels: 5, HPMax: 5}, "be-model", "5", HP, false},
	} {
		name := fmt.Sprintf("levels%d_hpmax%d_%s_p%s", tc.prio.Levels, tc.prio.HPMax, tc.model, tc.param)
		t.Run(name, func(t *testing.T) {
			f := newFakeEngine()
			ts, c := apiServer(t, f, Options{Priority: tc.prio})
			params := ""
			if tc.param != "" {
				params = `"parameters":{"priority":` + tc.param + `},`
			}
			body := `{` + params + `"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`
			if tc.model == "echo" {
				body = `{` + params + `"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`
			}
			r := do(t, c, "POST", ts.URL+"/v2/models/"+tc.model+"/infer", body)
			if tc.wantErr {
				if r.code != 400 {
					t.Errorf("status %d, want 400: %s", r.code, r.raw)
				}
				return
			}
			if r.code != 200 {
				t.Fatalf("status %d: %s", r.code, r.raw)
			}
			if got := r.body["parameters"].(map[string]any)["class"]; got != string(tc.want) {
				t.Errorf("class %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBadRequestsDoNotHarmOthers sends good and bad requests at once: every
// good one succeeds with its own answer, every bad one gets its 4xx.
func TestBadRequestsDoNotHarmOthers(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	ts, c := apiServer(t, f, Options{BodyLimit: 8192})
	bad := []string{`{"inputs":[`, `{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1]}]}`, `{"x":1}`,
		`{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[` + strings.Repeat("1,", 5000) + `1]}]}`}
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan string, 2*workers*each)
	for w := range workers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range each {
				v := float64(w*1000 + i)
				body := fmt.Sprintf(`{"id":"g%d-%d","inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[%v,0,0,0]}],"outputs":[{"name":"sum"}]}`, w, i, v)
				resp, err := c.Post(ts.URL+"/v2/models/echo/infer", "application/json", strings.NewReader(body))
				if err != nil {
					errs <- err.Error()
					continue
				}
				var out inferResponseJSON
				err = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				want := fmt.Sprintf("g%d-%d", w, i)
				if err != nil || resp.StatusCode != 200 || out.ID != want || len(out.Outputs) != 1 || fmt.Sprint(out.Outputs[0].Data) != fmt.Sprintf("[%v]", v) {
					errs <- fmt.Sprintf("good %s: %d %v %+v", want, resp.StatusCode, err, out)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := range each {
				resp, err := c.Post(ts.URL+"/v2/models/echo/infer", "application/json", strings.NewReader(bad[(w+i)%len(bad)]))
				if err != nil {
					errs <- err.Error()
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 400 && resp.StatusCode != 413 {
					errs <- fmt.Sprintf("bad request %d answered %d", (w+i)%len(bad), resp.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if got := f.calls.Load(); got != workers*each {
		t.Errorf("engine saw %d requests, want exactly the %d good ones", got, workers*each)
	}
}

func TestJobsAPI(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	ts, c := apiServer(t, f, Options{})
	u := ts.URL + "/v2/jobs"

	if r := do(t, c, "GET", u, ""); r.code != 200 || r.raw != "{\"jobs\":[]}\n" {
		t.Errorf("empty list: %d %q", r.code, r.raw)
	}
	r := do(t, c, "POST", u, `{"model":"resnet50-train","batch":32,"iterations":100}`)
	if r.code != 201 || r.body["id"] != "job-1" || r.body["state"] != JobRunning || r.hdr.Get("Location") != "/v2/jobs/job-1" {
		t.Fatalf("submit: %d %v %s", r.code, r.hdr, r.raw)
	}
	if spec := r.body["spec"].(map[string]any); spec["batch"] != float64(32) || spec["iterations"] != float64(100) {
		t.Errorf("submit: spec %v", spec)
	}
	if r := do(t, c, "GET", u, ""); r.code != 200 || len(r.body["jobs"].([]any)) != 1 {
		t.Errorf("list: %d %s", r.code, r.raw)
	}
	if r := do(t, c, "GET", u+"/job-1", ""); r.code != 200 || r.body["id"] != "job-1" {
		t.Errorf("get: %d %s", r.code, r.raw)
	}
	if r := do(t, c, "DELETE", u+"/job-1", ""); r.code != 200 || r.body["state"] != JobCancelled {
		t.Errorf("cancel: %d %s", r.code, r.raw)
	}
	for _, tc := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"DELETE", "/job-1", "", 409, "not cancellable"},
		{"GET", "/job-9", "", 404, "unknown job"},
		{"DELETE", "/job-9", "", 404, "unknown job"},
		{"POST", "", `{"model":"nope","batch":1,"iterations":1}`, 404, "unknown model"},
		{"POST", "", `{"model":"echo","batch":1,"iterations":0}`, 400, `"iterations" is 0`},
		{"POST", "", `{"model":"echo","batch":-2,"iterations":1}`, 400, `"batch" is -2`},
		{"POST", "", `{"model":"nope","iterations":1}`, 404, "unknown model"}, // no batch: past the handler, to the engine
		{"POST", "", `{"batch":1,"iterations":1}`, 400, `no "model"`},
		{"POST", "", `{"model":"echo","batch":1,"iterations":1,"priority":3}`, 400, `unknown field "priority"`},
		{"POST", "", `{"model":"echo",`, 400, "body ended"},
		{"POST", "", `{"model":"echo","batch":"big","iterations":1}`, 400, `"batch" must be a JSON number`},
		{"PUT", "/job-1", "", 404, "no endpoint PUT"},
	} {
		r := do(t, c, tc.method, u+tc.path, tc.body)
		msg, _ := r.body["error"].(string)
		if r.code != tc.code || !strings.Contains(msg, tc.want) {
			t.Errorf("%s %s %s: %d %q, want %d containing %q", tc.method, tc.path, tc.body, r.code, msg, tc.code, tc.want)
		}
	}
}

func TestHandlerDrain(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	h := NewHandler(f, Options{})
	h.Drain()
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v2/models/echo/infer", goodInfer},
		{"POST", "/v2/jobs", `{"model":"echo","batch":1,"iterations":1}`},
		{"GET", "/v2/health/ready", ""},
		{"GET", "/v2/models/echo/ready", ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, bytes.NewBufferString(tc.body)))
		if rec.Code != 503 {
			t.Errorf("%s %s while draining: %d %s", tc.method, tc.path, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v2/health/live", nil))
	if rec.Code != 200 {
		t.Errorf("live while draining: %d", rec.Code)
	}
	if f.calls.Load() != 0 {
		t.Errorf("engine got %d requests while draining", f.calls.Load())
	}
}

// TestInflightWait: wait returns only once every request is done, and
// requests may start while it waits.
func TestInflightWait(t *testing.T) {
	var f inflight
	f.wait() // none in flight: returns at once
	f.add()
	f.add()
	returned := make(chan struct{})
	go func() { f.wait(); close(returned) }()
	f.add() // a request arriving while Wait waits
	f.done()
	f.done()
	select {
	case <-returned:
		t.Fatal("wait returned with a request in flight")
	case <-time.After(20 * time.Millisecond):
	}
	f.done()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return after the last request")
	}
}

// TestTimeoutAndClientGone: a request outliving request_timeout gets 504; a
// client that leaves is counted as 499; a debug logger sees every request.
func TestTimeoutAndClientGone(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	f.block = make(chan struct{})
	f.entered = make(chan string, 4)
	m := NewMetrics(f, nil)
	var logs syncBuffer
	ts, c := apiServer(t, f, Options{RequestTimeout: 50 * time.Millisecond, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	r := do(t, c, "POST", ts.URL+"/v2/models/echo/infer", goodInfer)
	<-f.entered
	if r.code != 504 || !strings.Contains(r.body["error"].(string), "request_timeout (50ms)") {
		t.Errorf("timeout: %d %s", r.code, r.raw)
	}

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v2/models/echo/infer", strings.NewReader(goodInfer))
	go func() { <-f.entered; cancel() }()
	if _, err := c.Do(req); err == nil {
		t.Error("the cancelled request got an answer")
	}
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(m.requests.WithLabelValues("echo", "HP", "499")) != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("echo", "HP", "499")); got != 1 {
		t.Errorf("client-gone requests counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.failures.WithLabelValues("echo", "HP", "504")); got != 1 {
		t.Errorf("timed-out requests counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.inFlight.WithLabelValues("echo")); got != 0 {
		t.Errorf("in-flight gauge %v after all requests ended", got)
	}
	if s := logs.String(); !strings.Contains(s, "msg=request") || !strings.Contains(s, "status=504") || !strings.Contains(s, "path=/v2/models/echo/infer") {
		t.Errorf("debug request log: %q", s)
	}
}

// syncBuffer is a bytes.Buffer safe for the handler goroutines' logging.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
