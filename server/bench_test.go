package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
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
