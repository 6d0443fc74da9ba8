package server_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"atoll/profiles"
	"atoll/server"
)

// TestOverloadIsAnswered: open-loop requests at twice what the (paced,
// simulated) daemon serves, with the default limits: every request gets an
// answer — served, or refused at once with 503 and Retry-After — none is
// left to the client's time-out (10 s, generous for a loaded CI machine
// under the race detector), and nothing leaks.
func TestOverloadIsAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("3 s of load")
	}
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	// Paced to the wall clock: each request holds the simulated GPU for
	// ResNet-152's profiled time (about 1.5 ms on the default H100), so the
	// daemon serves at most 1/that; the load is twice that.
	prof, err := profiles.Lookup("H100-SXM", "resnet152", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := startDaemon(t, func(c *server.EngineConfig) { c.GPU, c.Models[0].Zoo = "H100-SXM", "resnet152" })
	defer stop()
	u := "http://" + addr + "/v2/models/rn/infer"
	data := make([]float64, 32*32*3)
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1, 32, 32, 3}, "datatype": "BF16", "data": data}}})
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()

	const dur = 3 * time.Second
	rate := int(2 / prof.Total().Seconds())
	var ok, refused, noRetryAfter, timedOut, other atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; time.Since(start) < dur; i++ {
		if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Post(u, "application/json", bytes.NewReader(body))
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					timedOut.Add(1)
				} else {
					other.Add(1)
				}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				ok.Add(1)
			case http.StatusServiceUnavailable:
				refused.Add(1)
				if resp.Header.Get("Retry-After") == "" {
					noRetryAfter.Add(1)
				}
			default:
				other.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Logf("%v at %d req/s: %d served (%.0f/s), %d refused with 503, %d timed out, %d other",
		dur, rate, ok.Load(), float64(ok.Load())/dur.Seconds(), refused.Load(), timedOut.Load(), other.Load())
	if timedOut.Load() != 0 || other.Load() != 0 || noRetryAfter.Load() != 0 {
		t.Errorf("%d timed out, %d other answers or errors, %d 503s without Retry-After: want every request served or refused at once", timedOut.Load(), other.Load(), noRetryAfter.Load())
	}
	if ok.Load() == 0 || refused.Load() == 0 {
		t.Errorf("%d served, %d refused: at twice the capacity want both", ok.Load(), refused.Load())
	}
}
