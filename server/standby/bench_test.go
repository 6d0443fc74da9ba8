package standby_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"testing"
	"time"

	"atoll/server/standby"
)

// BenchmarkProxy is the time a ResNet-50 request's body (602,112 bytes:
// 3×224×224 FP32 binary) takes through the supervisor to a worker that
// reads it and answers 4 KB, beside the same request sent to the worker
// directly: the supervisor's cost per request on this machine.
//
//	go test -run '^$' -bench Proxy ./server/standby
func BenchmarkProxy(b *testing.B) {
	dir := b.TempDir()
	path := dir + "/w.sock"
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	answer := make([]byte, 4000)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/{what}", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /v2/models/m/infer", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write(answer)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()
	exited := make(chan struct{})
	sup := standby.New(standby.Options{Logger: slog.New(slog.DiscardHandler),
		Start: func(ctx context.Context, gen int) (*standby.Worker, error) {
			if gen > 1 {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return &standby.Worker{Gen: gen, URL: "http://w", Client: standby.UnixClient(path), Exited: exited, Stop: func() {}, Kill: func() {}}, nil
		}})
	if err := sup.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer sup.Close(time.Second)
	front := httptest.NewServer(sup)
	defer front.Close()
	direct := &http.Server{Handler: mux}
	dln, _ := net.Listen("tcp", "127.0.0.1:0")
	go direct.Serve(dln)
	defer direct.Close()
	body := make([]byte, benchBody)
	for _, c := range []struct{ name, url string }{{"direct", "http://" + dln.Addr().String()}, {"supervisor", front.URL}} {
		b.Run(c.name, func(b *testing.B) {
			client := &http.Client{}
			for b.Loop() {
				var t0, wrote, first time.Time
				reused := false
				tr := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }, WroteRequest: func(httptrace.WroteRequestInfo) { wrote = time.Now() }, GotFirstResponseByte: func() { first = time.Now() }}
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), tr), "POST", c.url+"/v2/models/m/infer", bytes.NewReader(body))
				t0 = time.Now()
				resp, err := client.Do(req)
				if dbgBench {
					println(c.name, reused, wrote.Sub(t0).Microseconds(), first.Sub(wrote).Microseconds(), time.Since(t0).Microseconds())
				}
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}

var dbgBench = false

var benchBody = 602112
