package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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
