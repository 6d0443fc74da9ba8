package server

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// benchBody is an infer request for "echo" with a [1, n/4... ] FP32 input
// of n values (n a multiple of 4).
func benchBody(n int) string {
	vals := make([]string, n)
	for i := range vals {
		vals[i] = fmt.Sprintf("%d.5", i%100)
	}
	return fmt.Sprintf(`{"id":"b","inputs":[{"name":"input0","shape":[%d,4],"datatype":"FP32","data":[%s]}]}`, n/4, strings.Join(vals, ","))
}

// reportQuantiles adds p50 and p99 of ds, in microseconds, to b.
func reportQuantiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	q := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// BenchmarkInferHTTP measures what the HTTP path adds per request over the
// engine: "handler" is parsing, validation, metrics and encoding in
// process; "loopback" adds a keep-alive TCP round trip through net/http's
// client and server. The fake engine answers at once, so the whole time is
// HTTP-path overhead. Target: p99 ≤ 100 µs (docs/api.md).
func BenchmarkInferHTTP(b *testing.B) {
	for _, n := range []int{4, 1024, 16384} {
		body := benchBody(n)
		b.Run(fmt.Sprintf("handler/values=%d", n), func(b *testing.B) {
			f := newFakeEngine()
			h := NewHandler(f, Options{Metrics: NewMetrics(f, nil)})
			ds := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				req := httptest.NewRequest("POST", "/v2/models/echo/infer", strings.NewReader(body))
				rec := httptest.NewRecorder()
				t0 := time.Now()
				h.ServeHTTP(rec, req)
				ds = append(ds, time.Since(t0))
				if rec.Code != 200 {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
			reportQuantiles(b, ds)
		})
		b.Run(fmt.Sprintf("loopback/values=%d", n), func(b *testing.B) {
			f := newFakeEngine()
			ts := httptest.NewServer(NewHandler(f, Options{Metrics: NewMetrics(f, nil)}))
			defer ts.Close()
			c := ts.Client()
			defer c.CloseIdleConnections()
			url := ts.URL + "/v2/models/echo/infer"
			payload := []byte(body)
			ds := make([]time.Duration, 0, b.N)
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				t0 := time.Now()
				resp, err := c.Post(url, "application/json", bytes.NewReader(payload))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ds = append(ds, time.Since(t0))
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			reportQuantiles(b, ds)
		})
	}
}

// resnetBodies are a ResNet-50 request (one 1×3×224×224 FP32 image, the
// load generator's values: uniform in [-1, 1) as float32) as a plain JSON
// body and as a binary tensor data body asking for binary outputs, with the
// binary body's Inference-Header-Content-Length.
func resnetBodies() (js, bin []byte, header string) {
	const n = 3 * 224 * 224
	rnd := rand.New(rand.NewPCG(1, 2))
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = float64(float32(rnd.Float64()*2 - 1))
	}
	js = append(js, `{"id":"b","inputs":[{"name":"input","shape":[1,3,224,224],"datatype":"FP32","data":[`...)
	for i, v := range vals {
		if i > 0 {
			js = append(js, ',')
		}
		js = strconv.AppendFloat(js, v, 'g', -1, 32)
	}
	js = append(js, "]}]}"...)
	raw, _ := encodeRaw("FP32", vals)
	hdr := fmt.Sprintf(`{"id":"b","parameters":{"binary_data_output":true},"inputs":[{"name":"input","shape":[1,3,224,224],"datatype":"FP32","parameters":{"binary_data_size":%d}}]}`, len(raw))
	bin = append([]byte(hdr), raw...)
	return js, bin, strconv.Itoa(len(hdr))
}

// BenchmarkInferHTTPResNet50 measures the HTTP path for a ResNet-50-sized
// input (150,528 FP32 values) sent as JSON and as binary tensor data
// (binary outputs too), in process ("handler") and over a keep-alive
// loopback connection ("loopback"). The fake engine answers at once with
// 1000 logits, so the whole time is the HTTP path: the request's bytes in
// (and, over loopback, the client's writing and reading), parsing,
// validation, and the response. Targets (docs/api.md): binary p99 at most
// a quarter of JSON's, and binary loopback p99 ≤ 2 ms on the 2-core CI VM.
func BenchmarkInferHTTPResNet50(b *testing.B) {
	js, bin, header := resnetBodies()
	for _, tc := range []struct {
		name   string
		body   []byte
		header string
	}{{"json", js, ""}, {"binary", bin, header}} {
		b.Run("handler/"+tc.name, func(b *testing.B) {
			f := newFakeEngine()
			h := NewHandler(f, Options{Metrics: NewMetrics(f, nil)})
			ds := make([]time.Duration, 0, 1024)
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				req := httptest.NewRequest("POST", "/v2/models/resnet50/infer", bytes.NewReader(tc.body))
				if tc.header != "" {
					req.Header.Set(inferHeaderLength, tc.header)
				}
				rec := httptest.NewRecorder()
				t0 := time.Now()
				h.ServeHTTP(rec, req)
				ds = append(ds, time.Since(t0))
				if rec.Code != 200 {
					b.Fatalf("status %d: %.300s", rec.Code, rec.Body)
				}
			}
			reportQuantiles(b, ds)
		})
		b.Run("loopback/"+tc.name, func(b *testing.B) {
			f := newFakeEngine()
			ts := httptest.NewServer(NewHandler(f, Options{Metrics: NewMetrics(f, nil)}))
			defer ts.Close()
			c := ts.Client()
			defer c.CloseIdleConnections()
			url := ts.URL + "/v2/models/resnet50/infer"
			ds := make([]time.Duration, 0, 1024)
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				req, _ := http.NewRequest("POST", url, bytes.NewReader(tc.body))
				if tc.header != "" {
					req.Header.Set(inferHeaderLength, tc.header)
					req.Header.Set("Content-Type", "application/octet-stream")
				} else {
					req.Header.Set("Content-Type", "application/json")
				}
				t0 := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ds = append(ds, time.Since(t0))
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			reportQuantiles(b, ds)
		})
	}
}
