package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"atoll/server"
)

// TestServeStandbyFaultDrill runs `atoll serve --standby` as a user does —
// the supervisor starts this binary as its workers — over the simulator
// with a fault drill: a BE kernel of a training job faults in the serving
// worker; every HP request is answered 200, the faulting job ends failed
// naming the fault kernel, the job that asked to resume finishes its
// iterations, and one failover is counted.
func TestServeStandbyFaultDrill(t *testing.T) {
	t.Parallel()
	bin := buildAtoll(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	cfg := fmt.Sprintf(`listen: %s
standby: true
models: [{name: mobilenetv2, batch: 1, default_class: HP}]
jobs: [{model: resnet50-train}]
fault_drill: {be_launch: 3000, kind: trap}
`, addr)
	if err := os.WriteFile(filepath.Join(dir, "atoll.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	stop := startDaemon(t, bin, dir, os.Environ(), []string{"serve", "--config", "atoll.yaml"})
	defer stop()
	if err := waitReady(addr, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr
	do := func(method, path, body string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if out != nil && resp.StatusCode/100 == 2 {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s %s: %v: %s", method, path, err, b)
			}
		} else if resp.StatusCode/100 != 2 {
			t.Logf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
		}
		return resp.StatusCode
	}
	var meta server.ModelInfo
	if code := do(http.MethodGet, "/v2/models/mobilenetv2", "", &meta); code != http.StatusOK {
		t.Fatalf("metadata: %d", code)
	}
	n, shape := 1, []int64{}
	for _, d := range meta.Inputs[0].Shape {
		shape = append(shape, max(d, 1))
		n *= int(max(d, 1))
	}
	data := make([]float32, n)
	infer, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": meta.Inputs[0].Name, "shape": shape, "datatype": meta.Inputs[0].Datatype, "data": data}}})

	var faulty, resumed server.JobStatus
	do(http.MethodPost, "/v2/jobs", `{"model":"resnet50-train","iterations":1000000}`, &faulty)
	do(http.MethodPost, "/v2/jobs", `{"model":"resnet50-train","iterations":3,"resume":true}`, &resumed)
	failed, after := 0, 0
	deadline := time.Now().Add(60 * time.Second)
	for after < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the resumed job did not finish within 60 s")
		}
		if do(http.MethodPost, "/v2/models/mobilenetv2/infer", string(infer), nil) != http.StatusOK {
			failed++
		}
		var st server.JobStatus
		if do(http.MethodGet, "/v2/jobs/"+resumed.ID, "", &st); !st.Ended.IsZero() {
			after++
		}
	}
	if failed != 0 {
		t.Errorf("%d HP requests failed across the fault", failed)
	}
	var st server.JobStatus
	do(http.MethodGet, "/v2/jobs/"+faulty.ID, "", &st)
	if st.State != server.JobFailed || !strings.Contains(st.Error, "fault_trap") {
		t.Errorf("the faulting job: %+v, want failed naming the fault kernel", st)
	}
	do(http.MethodGet, "/v2/jobs/"+resumed.ID, "", &st)
	if st.State != server.JobDone || st.Done != 3 || st.Resumed != 1 {
		t.Errorf("the job that asked to resume: %+v, want done, 3 of 3, resumed once", st)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(m), "atoll_standby_failovers_total 1") {
		t.Errorf("/metrics does not count one failover")
	}
}
