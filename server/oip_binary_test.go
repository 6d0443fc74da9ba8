package server

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// binaryRequest is a binary-extension body: the JSON part, then raw.
func binaryRequest(js string, raw ...[]byte) (body []byte, header string) {
	body = []byte(js)
	for _, r := range raw {
		body = append(body, r...)
	}
	return body, strconv.Itoa(len(js))
}

// binReply is a response split at its Inference-Header-Content-Length.
type binReply struct {
	code  int
	hdr   http.Header
	json  map[string]any
	extra []byte // the bytes after the JSON part
	raw   []byte
}

// postBinary posts body with the given Inference-Header-Content-Length
// values (none: a plain JSON request) and splits the answer.
func postBinary(t *testing.T, c *http.Client, url string, body []byte, header ...string) binReply {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	for _, h := range header {
		req.Header.Add(inferHeaderLength, h)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := binReply{code: resp.StatusCode, hdr: resp.Header, raw: raw}
	js := raw
	if h := resp.Header.Get(inferHeaderLength); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n > len(raw) || n < 0 {
			t.Fatalf("response %s is %q for a body of %d bytes", inferHeaderLength, h, len(raw))
		}
		js, r.extra = raw[:n], raw[n:]
	}
	if err := json.Unmarshal(js, &r.json); err != nil {
		t.Fatalf("response JSON part: %v\n%q", err, js)
	}
	return r
}

// rawOf encodes vals with the shared raw encoder, for requests.
func rawOf(t *testing.T, dt string, vals []float64) []byte {
	t.Helper()
	b, err := encodeRaw(dt, vals)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBinaryInferRoundTrip sends each datatype as binary input and asks
// for binary output: the fake engine doubles the input, so the output's
// raw bytes must decode to twice the values sent.
func TestBinaryInferRoundTrip(t *testing.T) {
	leakCheck(t)
	ts, c := apiServer(t, newFakeEngine(), Options{})
	cases := []struct {
		dt   string
		vals []float64
	}{
		{"FP32", []float64{1.5, -2.25, 0, 1e-3, 3.4e37, -7}},
		{"FP16", []float64{1.5, -2.25, 0, 0.0009765625, 30000, -7}},
		{"BF16", []float64{1.5, -2.25, 0, 0.0078125, 1e30, -7}},
		{"INT32", []float64{1, -2, 0, 1 << 29, -(1 << 29), 7}},
		{"INT64", []float64{1, -2, 0, 1 << 52, -(1 << 52), 7}},
		{"FP64", []float64{1.5, -2.25, 0, 1e-300, 1e300, -7}},
		{"UINT8", []float64{1, 2, 0, 100, 127, 7}},
	}
	for _, tc := range cases {
		t.Run(tc.dt, func(t *testing.T) {
			in := rawOf(t, tc.dt, tc.vals)
			js := fmt.Sprintf(`{"id":"b1","parameters":{"binary_data_output":true},"inputs":[{"name":"x","shape":[2,3],"datatype":%q,"parameters":{"binary_data_size":%d}}]}`, tc.dt, len(in))
			body, hdr := binaryRequest(js, in)
			r := postBinary(t, c, ts.URL+"/v2/models/be-model/infer", body, hdr)
			if r.code != 200 {
				t.Fatalf("status %d: %s", r.code, r.raw)
			}
			if ct := r.hdr.Get("Content-Type"); ct != binaryContentType {
				t.Errorf("Content-Type %q, want %q", ct, binaryContentType)
			}
			if r.hdr.Get(inferHeaderLength) == "" {
				t.Fatal("binary response has no " + inferHeaderLength)
			}
			if r.json["id"] != "b1" {
				t.Errorf("id %v", r.json["id"])
			}
			outs := r.json["outputs"].([]any)
			if len(outs) != 2 {
				t.Fatalf("outputs %v", outs)
			}
			o0, o1 := outs[0].(map[string]any), outs[1].(map[string]any)
			if _, ok := o0["data"]; ok {
				t.Errorf("binary output has data: %v", o0)
			}
			size0 := int(o0["parameters"].(map[string]any)["binary_data_size"].(float64))
			size1 := int(o1["parameters"].(map[string]any)["binary_data_size"].(float64))
			if size0+size1 != len(r.extra) || size1 != 8 {
				t.Fatalf("binary_data_size %d + %d, %d bytes follow the JSON", size0, size1, len(r.extra))
			}
			if o0["datatype"] != tc.dt || !reflect.DeepEqual(o0["shape"], []any{2.0, 3.0}) {
				t.Errorf("output0 %v", o0)
			}
			got, err := decodeRaw(tc.dt, int64(len(tc.vals)), r.extra[:size0], false)
			if err != nil {
				t.Fatal(err)
			}
			sent, _ := decodeRaw(tc.dt, int64(len(tc.vals)), in, false)
			sum := 0.0
			for i, v := range sent {
				// The engine doubles what it received; in range for every case.
				want, _ := decodeRaw(tc.dt, 1, rawOf(t, tc.dt, []float64{2 * v}), false)
				if got[i] != want[0] {
					t.Errorf("output0[%d] = %v, want %v", i, got[i], want[0])
				}
				sum += v
			}
			gotSum := math.Float64frombits(binary.LittleEndian.Uint64(r.extra[size0:]))
			if gotSum != sum {
				t.Errorf("sum %v, want %v", gotSum, sum)
			}
		})
	}
}

// TestBinaryOutputSelection: binary_data on an output overrides
// binary_data_output; a plain JSON request may ask for binary outputs; a
// binary request that asks for none gets a plain JSON response.
func TestBinaryOutputSelection(t *testing.T) {
	leakCheck(t)
	ts, c := apiServer(t, newFakeEngine(), Options{})
	url := ts.URL + "/v2/models/echo/infer"
	in := rawOf(t, "FP32", []float64{1, 2, 3, 4})
	input := fmt.Sprintf(`"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":%d}}]`, len(in))

	// All binary but "sum".
	body, hdr := binaryRequest(`{"parameters":{"binary_data_output":true},`+input+`,"outputs":[{"name":"output0"},{"name":"sum","parameters":{"binary_data":false}}]}`, in)
	r := postBinary(t, c, url, body, hdr)
	if r.code != 200 {
		t.Fatalf("status %d: %s", r.code, r.raw)
	}
	outs := r.json["outputs"].([]any)
	sum := outs[1].(map[string]any)
	if !reflect.DeepEqual(sum["data"], []any{10.0}) || len(r.extra) != 16 {
		t.Errorf("sum %v, %d binary bytes (want JSON sum 10 and 16 bytes of output0)", sum, len(r.extra))
	}
	if got, _ := decodeRaw("FP32", 4, r.extra, false); !reflect.DeepEqual(got, []float64{2, 4, 6, 8}) {
		t.Errorf("output0 %v", got)
	}

	// Only "sum" binary, by its own parameter.
	body, hdr = binaryRequest(`{`+input+`,"outputs":[{"name":"sum","parameters":{"binary_data":true}}]}`, in)
	r = postBinary(t, c, url, body, hdr)
	if r.code != 200 || len(r.extra) != 8 || math.Float64frombits(binary.LittleEndian.Uint64(r.extra)) != 10 {
		t.Errorf("binary sum: %d %q", r.code, r.raw)
	}

	// A binary request that asks for no binary output: JSON back.
	body, hdr = binaryRequest(`{`+input+`}`, in)
	r = postBinary(t, c, url, body, hdr)
	if r.code != 200 || r.hdr.Get(inferHeaderLength) != "" || !strings.HasPrefix(r.hdr.Get("Content-Type"), "application/json") {
		t.Errorf("JSON outputs: %d %v %s", r.code, r.hdr, r.raw)
	}

	// A JSON request asking for binary output.
	r = postBinary(t, c, url, []byte(`{"parameters":{"binary_data_output":true},"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`))
	if r.code != 200 || len(r.extra) != 24 || r.hdr.Get("Content-Type") != binaryContentType {
		t.Errorf("JSON request, binary outputs: %d %v %q", r.code, r.hdr, r.raw)
	}

	// A binary request mixing a JSON input and a binary one.
	body, hdr = binaryRequest(`{"inputs":[{"name":"a","shape":[2],"datatype":"INT64","data":[5,6]},{"name":"b","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}}]}`, rawOf(t, "INT32", []float64{7, -8}))
	r = postBinary(t, c, ts.URL+"/v2/models/be-model/infer", body, hdr)
	if r.code != 200 {
		t.Errorf("mixed inputs: %d %s", r.code, r.raw)
	}
}

// TestBinaryInferErrors: every malformed binary request is a 400 (413 over
// the body limit) with an Open Inference Protocol error body that says
// what is wrong, and the server keeps serving.
func TestBinaryInferErrors(t *testing.T) {
	leakCheck(t)
	ts, c := apiServer(t, newFakeEngine(), Options{BodyLimit: 4096})
	in := rawOf(t, "FP32", []float64{1, 2, 3, 4})
	req := func(params string) string {
		return `{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32"` + params + `}]}`
	}
	good := req(`,"parameters":{"binary_data_size":16}`)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	n := strconv.Itoa(len(good))
	cases := []struct {
		name    string
		model   string
		body    []byte
		headers []string
		code    int
		want    string
	}{
		{"header longer than body", "echo", cat([]byte(good), in), []string{strconv.Itoa(len(good) + 17)}, 400, "the body has only"},
		{"header not a number", "echo", cat([]byte(good), in), []string{"abc"}, 400, "decimal integer"},
		{"header negative", "echo", cat([]byte(good), in), []string{"-5"}, 400, "decimal integer"},
		{"header signed", "echo", cat([]byte(good), in), []string{"+" + n}, 400, "decimal integer"},
		{"header empty", "echo", cat([]byte(good), in), []string{""}, 400, "decimal integer"},
		{"header huge", "echo", cat([]byte(good), in), []string{"99999999999999999999999"}, 400, "decimal integer"},
		{"header twice", "echo", cat([]byte(good), in), []string{n, n}, 400, "headers"},
		{"header cuts the JSON", "echo", cat([]byte(good), in), []string{strconv.Itoa(len(good) - 3)}, 400, "body ended"},
		{"header zero", "echo", cat([]byte(good), in), []string{"0"}, 400, "body is empty"},
		{"size not shape×dtype", "echo", cat([]byte(req(`,"parameters":{"binary_data_size":12}`)), in[:12]), []string{strconv.Itoa(len(req(`,"parameters":{"binary_data_size":12}`)))}, 400, "needs 4 × 4 = 16 bytes"},
		{"sizes past the end", "echo", cat([]byte(good), in[:10]), []string{n}, 400, "runs past the end of the body"},
		{"trailing bytes", "echo", cat([]byte(good), in, []byte("xyz")), []string{n}, 400, "3 trailing bytes"},
		{"binary data without binary input", "echo", cat([]byte(`{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`), in), []string{strconv.Itoa(len(`{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`))}, 400, "16 trailing bytes"},
		{"data and binary_data_size", "echo", []byte(req(`,"data":[1,2,3,4],"parameters":{"binary_data_size":0}`)), []string{strconv.Itoa(len(req(`,"data":[1,2,3,4],"parameters":{"binary_data_size":0}`)))}, 400, `both "data" and "binary_data_size"`},
		{"size not integer", "echo", []byte(req(`,"parameters":{"binary_data_size":"16"}`)), []string{strconv.Itoa(len(req(`,"parameters":{"binary_data_size":"16"}`)))}, 400, "integer >= 0"},
		{"size negative", "echo", []byte(req(`,"parameters":{"binary_data_size":-16}`)), []string{strconv.Itoa(len(req(`,"parameters":{"binary_data_size":-16}`)))}, 400, "integer >= 0"},
		{"no data at all", "echo", []byte(req(``)), []string{strconv.Itoa(len(req(``)))}, 400, `no "data"`},
		{"binary input without header", "echo", cat([]byte(good), in), nil, 400, "after the JSON object"},
		{"binary_data_size without header", "echo", []byte(good), nil, 400, "no Inference-Header-Content-Length header"},
		{"binary_data_output not bool", "echo", []byte(`{"parameters":{"binary_data_output":1},"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`), nil, 400, "true or false"},
		{"NaN in FP32", "echo", cat([]byte(good), rawOf(t, "FP32", []float64{1, math.NaN(), 3, 4})), []string{n}, 400, "send finite values"},
		{"BOOL byte 2", "be-model", []byte(`{"inputs":[{"name":"b","shape":[1],"datatype":"BOOL","parameters":{"binary_data_size":1}}]}` + "\x02"), []string{strconv.Itoa(len(`{"inputs":[{"name":"b","shape":[1],"datatype":"BOOL","parameters":{"binary_data_size":1}}]}`))}, 400, "send 0 or 1"},
		{"BYTES", "be-model", []byte(`{"inputs":[{"name":"b","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":0}}]}`), []string{strconv.Itoa(len(`{"inputs":[{"name":"b","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":0}}]}`))}, 400, "BYTES is not supported"},
		{"wrong shape for model", "echo", cat([]byte(`{"inputs":[{"name":"input0","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`), in), []string{strconv.Itoa(len(`{"inputs":[{"name":"input0","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`))}, 400, "wants [-1 4]"},
		{"over the body limit", "echo", cat([]byte(good), make([]byte, 5000)), []string{n}, 413, "over the limit of 4096 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := postBinary(t, c, ts.URL+"/v2/models/"+tc.model+"/infer", tc.body, tc.headers...)
			if r.code != tc.code {
				t.Fatalf("status %d, want %d: %s", r.code, tc.code, r.raw)
			}
			if ct := r.hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("error Content-Type %q", ct)
			}
			msg, _ := r.json["error"].(string)
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not contain %q", msg, tc.want)
			}
			if len(r.json) != 1 {
				t.Errorf("error body has fields other than \"error\": %s", r.raw)
			}
		})
	}
	body, hdr := binaryRequest(good, in)
	if r := postBinary(t, c, ts.URL+"/v2/models/echo/infer", body, hdr); r.code != 200 {
		t.Errorf("good request after the bad ones: %d %s", r.code, r.raw)
	}
}

// TestBinaryMatchesJSON: random tensors of every datatype sent as binary
// data parse to exactly what the same values sent as JSON parse to.
func TestBinaryMatchesJSON(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	info := ModelInfo{Name: "m"}
	prio := PriorityConfig{Levels: 2, HPMax: 1}
	for _, dt := range []string{"BOOL", "INT8", "UINT8", "INT16", "UINT16", "INT32", "UINT32", "INT64", "UINT64", "FP16", "BF16", "FP32", "FP64"} {
		for trial := range 20 {
			n := rnd.IntN(50)
			vals := make([]float64, n)
			for i := range vals {
				switch dt {
				case "BOOL":
					vals[i] = float64(rnd.IntN(2))
				case "FP16", "BF16", "FP32", "FP64":
					// Values the datatype holds exactly, so JSON and raw agree.
					v, _ := decodeRaw(dt, 1, rawOf(t, dt, []float64{rnd.NormFloat64() * 100}), false)
					vals[i] = v[0]
				default:
					r := datatypes[dt]
					lo, hi := max(r.min, -1e6), min(r.max, 1e6)
					vals[i] = math.Round(lo + rnd.Float64()*(hi-lo))
				}
			}
			data, _ := json.Marshal(vals)
			if dt == "BOOL" {
				bs := make([]bool, n)
				for i, v := range vals {
					bs[i] = v != 0
				}
				data, _ = json.Marshal(bs)
			}
			js := fmt.Sprintf(`{"id":"t","inputs":[{"name":"x","shape":[%d],"datatype":%q,"data":%s}]}`, n, dt, data)
			want, _, _, err := parseInfer([]byte(js), info, prio)
			if err != nil {
				t.Fatalf("%s trial %d: JSON: %v", dt, trial, err)
			}
			raw := rawOf(t, dt, vals)
			hdr := fmt.Sprintf(`{"id":"t","inputs":[{"name":"x","shape":[%d],"datatype":%q,"parameters":{"binary_data_size":%d}}]}`, n, dt, len(raw))
			body, hl := binaryRequest(hdr, raw)
			got, _, _, _, err := parseInferBinary(body, hl, info, prio)
			if err != nil {
				t.Fatalf("%s trial %d: binary: %v", dt, trial, err)
			}
			if !reflect.DeepEqual(got.Inputs[0].Data, want.Inputs[0].Data) && !(n == 0 && len(got.Inputs[0].Data) == 0) {
				t.Fatalf("%s trial %d: binary %v, JSON %v", dt, trial, got.Inputs[0].Data, want.Inputs[0].Data)
			}
		}
	}
}

// FuzzParseInferBinary: any body and header value either parse into
// tensors whose data length is the product of their shape and whose
// binary inputs used up exactly the bytes after the JSON part, or fail
// with ErrBadInput; nothing panics.
func FuzzParseInferBinary(f *testing.F) {
	in := make([]byte, 16)
	binary.LittleEndian.PutUint32(in[4:], math.Float32bits(2))
	good := `{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`
	two := `{"parameters":{"binary_data_output":true},"inputs":[{"name":"a","shape":[2],"datatype":"FP16","parameters":{"binary_data_size":4}},{"name":"b","shape":[1],"datatype":"INT64","data":[3]},{"name":"c","shape":[1],"datatype":"BOOL","parameters":{"binary_data_size":1}}],"outputs":[{"name":"y","parameters":{"binary_data":false}}]}`
	for _, s := range []struct {
		body, header string
	}{
		{good + string(in), strconv.Itoa(len(good))},
		{good + string(in), strconv.Itoa(len(good) + 1)},
		{good + string(in[:8]), strconv.Itoa(len(good))},
		{good + string(in) + "x", strconv.Itoa(len(good))},
		{two + "\x00\x3c\x00\xbc\x01", strconv.Itoa(len(two))},
		{two + "\x00\x3c\x00\xbc\x02", strconv.Itoa(len(two))},
		{goodInfer, strconv.Itoa(len(goodInfer))},
		{goodInfer, "1e3"},
		{"", "0"},
		{`{"inputs":[{"name":"x","shape":[0],"datatype":"FP32","parameters":{"binary_data_size":0}}]}`, "88"},
	} {
		f.Add([]byte(s.body), s.header)
	}
	info := ModelInfo{Name: "any", DefaultClass: BE}
	prio := PriorityConfig{Levels: 3, HPMax: 1}
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		req, _, _, _, err := parseInferBinary(body, header, info, prio)
		if err != nil {
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("error does not wrap ErrBadInput: %v", err)
			}
			return
		}
		js, rest, err := splitBinary(body, header)
		if err != nil {
			t.Fatalf("parsed, but the split fails: %v", err)
		}
		rj, err := decodeInfer(js)
		if err != nil {
			t.Fatalf("parsed, but the JSON part does not decode: %v", err)
		}
		used := int64(0)
		for i, in := range req.Inputs {
			n := int64(1)
			for _, d := range in.Shape {
				if d < 0 {
					t.Fatalf("negative dimension accepted: %v", in.Shape)
				}
				n *= d
			}
			if int64(len(in.Data)) != n {
				t.Fatalf("input %q: shape %v but %d values", in.Name, in.Shape, len(in.Data))
			}
			if _, ok := rj.Inputs[i].Parameters["binary_data_size"]; ok {
				used += n * rawSize[in.Datatype]
			}
		}
		if used != int64(len(rest)) {
			t.Fatalf("binary inputs use %d bytes, %d follow the JSON part", used, len(rest))
		}
	})
}

// TestDecodeRawNonFinite: decodeRaw refuses NaN and infinities of every
// float type for inputs (finite) and passes them for outputs.
func TestDecodeRawNonFinite(t *testing.T) {
	for _, tc := range []struct {
		dt  string
		raw []byte
	}{
		{"FP16", []byte{0x00, 0x3c, 0x00, 0x7c}},             // 1, +Inf
		{"FP16", []byte{0x00, 0x3c, 0x01, 0xfe}},             // 1, NaN
		{"BF16", []byte{0x80, 0x3f, 0x80, 0xff}},             // 1, -Inf
		{"FP32", rawOf(t, "FP32", []float64{1, math.NaN()})}, // 1, NaN
		{"FP64", rawOf(t, "FP64", []float64{1, math.Inf(-1)})},
	} {
		if _, err := decodeRaw(tc.dt, 2, tc.raw, true); err == nil || !strings.Contains(err.Error(), "value 1 is") {
			t.Errorf("%s % x: finite decode: %v", tc.dt, tc.raw, err)
		}
		got, err := decodeRaw(tc.dt, 2, tc.raw, false)
		if err != nil || got[0] != 1 || !(math.IsNaN(got[1]) || math.IsInf(got[1], 0)) {
			t.Errorf("%s % x: output decode %v, %v", tc.dt, tc.raw, got, err)
		}
	}
}

// TestPooledBodiesConcurrent: large bodies (pooled buffers) sent at once
// from several clients, JSON and binary, each get their own values back:
// no request sees another's bytes through a recycled buffer.
func TestPooledBodiesConcurrent(t *testing.T) {
	leakCheck(t)
	ts, c := apiServer(t, newFakeEngine(), Options{})
	url := ts.URL + "/v2/models/echo/infer"
	const rows = 5000 // 20,000 FP32 values: 80 KB binary, more as JSON
	errs := make(chan error, 64)
	for g := range 6 {
		go func() {
			for k := range 8 {
				vals := make([]float64, rows*4)
				for i := range vals {
					vals[i] = float64(g*1000 + k*10 + i%7)
				}
				var body []byte
				hdr := ""
				if (g+k)%2 == 0 {
					raw, _ := encodeRaw("FP32", vals)
					js := fmt.Sprintf(`{"parameters":{"binary_data_output":true},"inputs":[{"name":"input0","shape":[%d,4],"datatype":"FP32","parameters":{"binary_data_size":%d}}],"outputs":[{"name":"output0"}]}`, rows, len(raw))
					body, hdr = append([]byte(js), raw...), strconv.Itoa(len(js))
				} else {
					data, _ := json.Marshal(vals)
					body = fmt.Appendf(nil, `{"parameters":{"binary_data_output":true},"inputs":[{"name":"input0","shape":[%d,4],"datatype":"FP32","data":%s}],"outputs":[{"name":"output0"}]}`, rows, data)
				}
				req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
				if hdr != "" {
					req.Header.Set(inferHeaderLength, hdr)
				}
				resp, err := c.Do(req)
				if err != nil {
					errs <- err
					return
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				n, _ := strconv.Atoi(resp.Header.Get(inferHeaderLength))
				if resp.StatusCode != 200 || n <= 0 || n > len(raw) {
					errs <- fmt.Errorf("client %d request %d: %d %.200s", g, k, resp.StatusCode, raw)
					return
				}
				got, err := decodeRaw("FP32", int64(len(vals)), raw[n:], false)
				if err != nil {
					errs <- err
					return
				}
				for i, v := range vals {
					if got[i] != 2*v {
						errs <- fmt.Errorf("client %d request %d: output0[%d] = %v, want %v", g, k, i, got[i], 2*v)
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range 6 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
