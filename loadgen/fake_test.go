package loadgen

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeOIP implements just enough of the Open Inference Protocol v2 for the
// generator: model metadata and infer, with a per-request delay and fault
// chosen from the request id.
type fakeOIP struct {
	meta Metadata
	// delay and fault see the request id (the generator's schedule index).
	delay func(id int) time.Duration
	fault func(id int) string // "", "400", "503", "500", "close", "garbage", "shortbinary", "hang"
	// serial makes the fake serve one request at a time, like a GPU.
	serial bool

	mu       sync.Mutex
	inflight atomic.Int64
	peak     atomic.Int64
	served   atomic.Int64
	conns    atomic.Int64 // connections opened
	prios    sync.Map     // id -> priority parameter (float64) or nil

	binaryReqs atomic.Int64 // requests with Inference-Header-Content-Length
}

func testModel() Metadata {
	return Metadata{
		Name:     "tiny",
		Platform: "atoll",
		Inputs:   []TensorMeta{{Name: "x", Datatype: "FP32", Shape: []int64{-1, 3, 4}}},
		Outputs:  []TensorMeta{{Name: "y", Datatype: "FP32", Shape: []int64{-1, 2}}},
	}
}

func oipError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func (f *fakeOIP) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/models/{name}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") != f.meta.Name {
			oipError(w, http.StatusNotFound, fmt.Sprintf("unknown model %q", r.PathValue("name")))
			return
		}
		json.NewEncoder(w).Encode(f.meta)
	})
	mux.HandleFunc("POST /v2/models/{name}/infer", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") != f.meta.Name {
			oipError(w, http.StatusNotFound, "unknown model")
			return
		}
		var req struct {
			ID         string         `json:"id"`
			Parameters map[string]any `json:"parameters"`
			Inputs     []struct {
				Name       string         `json:"name"`
				Shape      []int64        `json:"shape"`
				Datatype   string         `json:"datatype"`
				Parameters map[string]int `json:"parameters"`
				Data       []float64      `json:"data"`
			} `json:"inputs"`
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		js, rest := body, []byte(nil)
		if h := r.Header.Get("Inference-Header-Content-Length"); h != "" {
			n, err := strconv.Atoi(h)
			if err != nil || n < 0 || n > len(body) {
				oipError(w, http.StatusBadRequest, "bad Inference-Header-Content-Length")
				return
			}
			js, rest = body[:n], body[n:]
			f.binaryReqs.Add(1)
		}
		if err := json.Unmarshal(js, &req); err != nil {
			oipError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
			return
		}
		id, err := strconv.Atoi(req.ID)
		if err != nil || len(req.Inputs) != 1 || req.Inputs[0].Name != "x" {
			oipError(w, http.StatusBadRequest, "bad input")
			return
		}
		x := req.Inputs[0]
		if size, ok := x.Parameters["binary_data_size"]; ok {
			if size != len(rest) || x.Data != nil || x.Datatype != "FP32" {
				oipError(w, http.StatusBadRequest, "bad binary input")
				return
			}
			for i := 0; i+4 <= len(rest); i += 4 {
				x.Data = append(x.Data, float64(math.Float32frombits(binary.LittleEndian.Uint32(rest[i:]))))
			}
		} else if len(rest) != 0 {
			oipError(w, http.StatusBadRequest, "trailing bytes")
			return
		}
		if len(x.Data) != 12 {
			oipError(w, http.StatusBadRequest, "bad input")
			return
		}
		for _, v := range x.Data {
			if v < -1 || v >= 1 {
				oipError(w, http.StatusBadRequest, "input value out of the generator's range")
				return
			}
		}
		binaryOut := req.Parameters["binary_data_output"] == true
		f.prios.Store(id, req.Parameters["priority"])
		n := f.inflight.Add(1)
		defer f.inflight.Add(-1)
		for {
			p := f.peak.Load()
			if n <= p || f.peak.CompareAndSwap(p, n) {
				break
			}
		}
		if f.serial {
			f.mu.Lock()
			defer f.mu.Unlock()
		}
		fault := ""
		if f.fault != nil {
			fault = f.fault(id)
		}
		d := time.Duration(0)
		if f.delay != nil {
			d = f.delay(id)
		}
		if fault == "hang" {
			d = time.Hour
		}
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		f.served.Add(1)
		switch fault {
		case "400":
			oipError(w, http.StatusBadRequest, "injected bad input")
		case "503":
			oipError(w, http.StatusServiceUnavailable, "queue full")
		case "500":
			oipError(w, http.StatusInternalServerError, "device failure")
		case "close":
			hj, _ := w.(http.Hijacker)
			conn, _, err := hj.Hijack()
			if err == nil {
				conn.Close()
			}
		case "garbage":
			w.Write([]byte(`{"outputs": oops`))
		case "shortbinary": // binary_data_size larger than what follows
			js := []byte(`{"outputs":[{"name":"y","datatype":"FP32","shape":[1,2],"parameters":{"binary_data_size":8}}]}`)
			w.Header().Set("Inference-Header-Content-Length", strconv.Itoa(len(js)))
			w.Write(append(js, 0, 0, 0, 0))
		default:
			if binaryOut {
				js := []byte(`{"model_name":"tiny","id":"` + req.ID + `","outputs":[{"name":"y","datatype":"FP32","shape":[1,2],"parameters":{"binary_data_size":8}}]}`)
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Header().Set("Inference-Header-Content-Length", strconv.Itoa(len(js)))
				w.Write(append(js, 0, 0, 0, 0, 0, 0, 0x80, 0x3f))
				return
			}
			json.NewEncoder(w).Encode(map[string]any{
				"model_name": f.meta.Name, "id": req.ID,
				"outputs": []map[string]any{{"name": "y", "datatype": "FP32", "shape": []int{1, 2}, "data": []float64{0, 1}}},
			})
		}
	})
	return mux
}

// start serves f on loopback for the test and returns a client for it.
func (f *fakeOIP) start(t *testing.T, o ClientOptions) *Client {
	t.Helper()
	if f.meta.Name == "" {
		f.meta = testModel()
	}
	srv := httptest.NewUnstartedServer(f.handler())
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	srv.Start()
	c, err := NewClient(srv.URL, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.CloseClientConnections()
		srv.Close()
	})
	return c
}
