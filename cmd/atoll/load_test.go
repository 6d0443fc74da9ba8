package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"atoll/loadgen"
)

// TestLoadCommand runs 'atoll load' end to end against a minimal Open
// Inference Protocol server over loopback and checks the table and the
// JSON report.
func TestLoadCommand(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/models/tiny", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(loadgen.Metadata{Name: "tiny", Inputs: []loadgen.TensorMeta{{Name: "x", Datatype: "FP32", Shape: []int64{-1, 4}}}})
	})
	mux.HandleFunc("POST /v2/models/tiny/infer", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID string `json:"id"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		if strings.HasSuffix(req.ID, "7") { // every tenth request is rejected
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":"queue full"}`))
			return
		}
		w.Write([]byte(`{"model_name":"tiny","outputs":[{"name":"y","datatype":"FP32","shape":[1],"data":[1]}]}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	out := filepath.Join(t.TempDir(), "load.json")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), &env{stdout: &stdout, stderr: &stderr}, []string{
		"load", "--url", srv.URL, "--model", "tiny", "--arrival", "uniform", "--rate", "200",
		"--duration", "500ms", "--warmup", "100ms", "--slo", "1s", "--late", "1s", "--out", out,
	})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"p99 ms", "≤1000ms", "http-503:", "VALID"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	t.Log("\n" + stdout.String())
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep loadgen.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	// 100 uniform requests at 0, 5ms, ...; the 80 from 100ms on are measured,
	// and 8 of them have ids ending in 7.
	if rep.APIVersion != loadgen.ReportVersion || rep.Arrival != "uniform" || rep.Total.Scheduled != 80 || rep.WarmupSkipped != 20 {
		t.Errorf("report: version %q arrival %q scheduled %d warm-up %d", rep.APIVersion, rep.Arrival, rep.Total.Scheduled, rep.WarmupSkipped)
	}
	if rep.Total.Errors["http-503"] != 8 || rep.Total.OK != 72 || rep.Total.SLOAttainment == nil || *rep.Total.SLOAttainment != 0.9 {
		t.Errorf("report totals: %+v", rep.Total)
	}
}

// TestLoadDataFlag: 'atoll load' sends the binary tensor data extension by
// default (the Inference-Header-Content-Length header, binary outputs asked
// for) and JSON bodies with --data json; a bad --data value is refused.
func TestLoadDataFlag(t *testing.T) {
	var binary, plain atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/models/tiny", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(loadgen.Metadata{Name: "tiny", Inputs: []loadgen.TensorMeta{{Name: "x", Datatype: "FP32", Shape: []int64{-1, 4}}}})
	})
	mux.HandleFunc("POST /v2/models/tiny/infer", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := r.Header.Get("Inference-Header-Content-Length")
		n, err := strconv.Atoi(h)
		switch {
		case h == "" && json.Valid(body) && bytes.Contains(body, []byte(`"data":[`)):
			plain.Add(1)
		case err == nil && n <= len(body) && len(body)-n == 16 && bytes.Contains(body[:n], []byte(`"binary_data_output":true`)):
			binary.Add(1)
		default:
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"unexpected body"}`))
			return
		}
		w.Write([]byte(`{"model_name":"tiny","outputs":[{"name":"y","datatype":"FP32","shape":[1],"data":[1]}]}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tc := range []struct {
		flags        []string
		binary, json int64
	}{{nil, 20, 0}, {[]string{"--data", "binary"}, 40, 0}, {[]string{"--data", "json"}, 40, 20}} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"load", "--url", srv.URL, "--model", "tiny", "--arrival", "uniform", "--rate", "200",
			"--duration", "100ms", "--warmup", "0", "--late", "1s", "--quiet"}, tc.flags...)
		if code := run(context.Background(), &env{stdout: &stdout, stderr: &stderr}, args); code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.flags, code, stderr.String())
		}
		if binary.Load() != tc.binary || plain.Load() != tc.json {
			t.Errorf("after %v: %d binary and %d JSON requests, want %d and %d", tc.flags, binary.Load(), plain.Load(), tc.binary, tc.json)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), &env{stdout: &stdout, stderr: &stderr}, []string{"load", "--model", "tiny", "--url", srv.URL, "--data", "protobuf"}); code == 0 || !strings.Contains(stderr.String(), `data format "protobuf"`) {
		t.Errorf("--data protobuf: exit %d: %s", code, stderr.String())
	}
}
