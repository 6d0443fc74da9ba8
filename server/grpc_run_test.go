package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	pb "atoll/server/inferencepb"
)

// TestGRPCRunShutdown: Run serves gRPC beside HTTP; at shutdown an
// in-flight gRPC request that finishes within the timeout is answered
// normally, one that does not is failed by the engine's Close with
// Unavailable, and nothing listens afterwards.
func TestGRPCRunShutdown(t *testing.T) {
	for _, finish := range []bool{true, false} {
		t.Run(fmt.Sprintf("finish=%v", finish), func(t *testing.T) {
			leakCheck(t)
			f := newFakeEngine()
			f.block = make(chan struct{})
			f.entered = make(chan string, 2)
			gln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			u, hc, run := daemon(t, f, testConfig(), WithGRPCListener(gln))
			conn := grpcDial(t, gln.Addr().String())
			defer conn.Close()
			c := pb.NewGRPCInferenceServiceClient(conn)
			ctx := context.Background()
			if r, err := c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || !r.GetReady() {
				t.Fatalf("gRPC ready: %v %v", r, err)
			}

			grpcDone := make(chan error, 1)
			go func() {
				_, err := c.ModelInfer(ctx, goodGRPC())
				grpcDone <- err
			}()
			httpDone := make(chan reply, 1)
			go func() { httpDone <- do(t, hc, "POST", u+"/v2/models/echo/infer", goodInfer) }()
			<-f.entered
			<-f.entered
			run.cancel()
			if finish {
				time.Sleep(50 * time.Millisecond)
				close(f.block)
			}
			if err := run.wait(t); err != nil {
				t.Errorf("Run: %v", err)
			}
			gerr := <-grpcDone
			hr := <-httpDone
			if finish {
				if gerr != nil || hr.code != 200 {
					t.Errorf("in-flight requests finishing within the timeout: gRPC %v, HTTP %d %s", gerr, hr.code, hr.raw)
				}
			} else {
				wantCode(t, "gRPC request failed by Close", gerr, codes.Unavailable, "shutting down")
				if hr.code != 503 {
					t.Errorf("HTTP request failed by Close: %d %s", hr.code, hr.raw)
				}
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := c.ServerLive(cctx, &pb.ServerLiveRequest{}, grpc.WaitForReady(false)); err == nil {
				t.Error("gRPC still answers after Run returned")
			}
		})
	}
}

func TestGRPCRunListenErrors(t *testing.T) {
	leakCheck(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := testConfig()
	cfg.GRPCListen = busy.Addr().String()
	f := newFakeEngine()
	err = Run(context.Background(), cfg, f)
	if err == nil || !strings.Contains(err.Error(), "--grpc-listen") {
		t.Errorf("gRPC address in use: %v", err)
	}
	select {
	case <-f.closed:
	default:
		t.Error("Run did not close the engine after failing to listen")
	}

	cfg.GRPCListen = "8001"
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "grpc_listen") {
		t.Errorf("grpc_listen without a port: %v", err)
	}
	parsed, err := ParseConfig(strings.NewReader("grpc_listen: \"127.0.0.1:8001\"\n"), "atoll.yaml")
	if err != nil || parsed.GRPCListen != "127.0.0.1:8001" {
		t.Errorf("grpc_listen from YAML: %q %v", parsed.GRPCListen, err)
	}
	// Unset, it stays out of --print-config.
	out, err := DefaultConfig().Marshal()
	if err != nil || strings.Contains(string(out), "grpc_listen") {
		t.Errorf("default config marshals grpc_listen: %v\n%s", err, out)
	}
}

// BenchmarkInferGRPC measures what the gRPC path adds per request over the
// engine, as BenchmarkInferHTTP does for REST: "service" calls ModelInfer
// in process (conversion, validation, metrics); "loopback" adds a gRPC
// round trip over TCP on 127.0.0.1, with the input as fp32_contents or as
// raw_input_contents.
func BenchmarkInferGRPC(b *testing.B) {
	for _, n := range []int{4, 1024, 16384} {
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = float32(i%100) + 0.5
		}
		contents := &pb.ModelInferRequest{ModelName: "echo", Id: "b", Inputs: []*pb.ModelInferRequest_InferInputTensor{fp32Input("input0", []int64{int64(n / 4), 4}, vals...)}}
		rawReq := &pb.ModelInferRequest{ModelName: "echo", Id: "b",
			Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "input0", Datatype: "FP32", Shape: []int64{int64(n / 4), 4}}}}
		var raw []byte
		for _, v := range vals {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
		rawReq.RawInputContents = [][]byte{raw}

		b.Run(fmt.Sprintf("service/values=%d", n), func(b *testing.B) {
			f := newFakeEngine()
			s := NewGRPCService(NewHandler(f, Options{Metrics: NewMetrics(f, nil)}))
			ds := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				_, err := s.ModelInfer(context.Background(), contents)
				ds = append(ds, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
			}
			reportQuantiles(b, ds)
		})
		for _, kind := range []string{"contents", "raw"} {
			req := contents
			if kind == "raw" {
				req = rawReq
			}
			b.Run(fmt.Sprintf("loopback-%s/values=%d", kind, n), func(b *testing.B) {
				f := newFakeEngine()
				srv := NewGRPCServer(NewHandler(f, Options{Metrics: NewMetrics(f, nil)}))
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				go srv.Serve(ln) //nolint:errcheck // ends with Stop
				defer srv.Stop()
				conn := grpcDial(b, ln.Addr().String())
				defer conn.Close()
				c := pb.NewGRPCInferenceServiceClient(conn)
				ds := make([]time.Duration, 0, b.N)
				for b.Loop() {
					t0 := time.Now()
					_, err := c.ModelInfer(context.Background(), req)
					ds = append(ds, time.Since(t0))
					if err != nil {
						b.Fatal(err)
					}
				}
				reportQuantiles(b, ds)
			})
		}
	}
}
