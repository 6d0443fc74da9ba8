package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"atoll/models"
)

// checkEngine is the real engine's input path without the scheduler:
// Infer runs engModel.check (what engineImpl.Infer does before it submits
// the request) and answers at once with zero logits. It records each
// request's decode phase as the daemon measures it (handler start to the
// end of the check, where Infer would submit).
type checkEngine struct {
	*engineImpl
	decode []time.Duration
	out    []float64
	last   *models.Bundle
}

func (c *checkEngine) Infer(_ context.Context, req *InferRequest) (*InferResult, error) {
	m, ok := c.byName[req.Model]
	if !ok {
		return nil, ErrUnknownModel
	}
	b, err := m.check(req)
	if err != nil {
		return nil, err
	}
	c.last = b
	c.decode = append(c.decode, time.Since(req.Arrived))
	o := m.info.Outputs[0]
	return &InferResult{Outputs: []Tensor{{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape, Data: c.out}}}, nil
}

// newCheckEngine loads zoo models the way `atoll serve --backend cuda`
// does (no CPU reference weights), on the simulator, without starting the
// scheduler loop.
func newCheckEngine(tb testing.TB, zoo ...string) *checkEngine {
	tb.Helper()
	cfg := EngineConfig{Virtual: true, Instances: true}
	for _, z := range zoo {
		cfg.Models = append(cfg.Models, EngineModel{Zoo: z})
	}
	e, err := newEngineImpl(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	e.ready.Store(true)
	n := 1
	for _, d := range e.models[0].info.Outputs[0].Shape {
		n *= int(d)
	}
	return &checkEngine{engineImpl: e, out: make([]float64, n)}
}

// modelBinaryBody is an infer request for model m in the binary tensor
// data extension, with each input in its storage type: the graph's
// InitInputs (images uniform in [-1, 1), token ids over the vocabulary)
// as raw bytes, binary outputs asked for. It returns the body, the
// Inference-Header-Content-Length value and the inputs.
func modelBinaryBody(tb testing.TB, m *engModel, seed uint64) (body []byte, header string, in *models.Bundle) {
	tb.Helper()
	in = models.InitInputs(m.graph, seed)
	hdr := []byte(`{"id":"b","parameters":{"binary_data_output":true},"inputs":[`)
	var raw []byte
	for i, ti := range m.info.Inputs {
		d, _ := in.Get(ti.Name)
		if i > 0 {
			hdr = append(hdr, ',')
		}
		shape := ""
		for j, s := range ti.Shape {
			if j > 0 {
				shape += ","
			}
			shape += strconv.FormatInt(s, 10)
		}
		hdr = fmt.Appendf(hdr, `{"name":%q,"shape":[%s],"datatype":%q,"parameters":{"binary_data_size":%d}}`, ti.Name, shape, ti.Datatype, len(d.Raw))
		raw = append(raw, d.Raw...)
	}
	hdr = append(hdr, "]}"...)
	return append(hdr, raw...), strconv.Itoa(len(hdr)), in
}

// BenchmarkDecodeResNet50 is the daemon's decode phase for the real
// resnet50 input (BF16 [1,224,224,3], 301 KB, binary tensor data
// extension): the handler reads the body, parses it and calls Infer,
// whose input check (engModel.check, building the device bundle) ends the
// phase. "raw" is the raw fast path (the engine takes Tensor.Raw);
// "float64" hides the engine's RawInputs, which is the path before it
// (bytes decoded to float64, checked, encoded back). decode-µs is the
// phase's mean per request (handler start to the end of the check, as
// atoll_request_phase_seconds{phase="decode"} measures it), p50/p99 its
// quantiles; ns/op is the whole handler including the binary response of
// 1000 logits. Profile it with
//
//	go test ./server -run '^$' -bench DecodeResNet50 -cpuprofile cpu.out
func BenchmarkDecodeResNet50(b *testing.B) {
	c := newCheckEngine(b, "resnet50")
	body, header, _ := modelBinaryBody(b, c.models[0], 1)
	for _, tc := range []struct {
		name string
		eng  Engine
	}{{"raw", c}, {"float64", slowEngine{c}}} {
		b.Run(tc.name, func(b *testing.B) {
			h := NewHandler(tc.eng, Options{Metrics: NewMetrics(tc.eng, nil)})
			c.decode = make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				req := httptest.NewRequest("POST", "/v2/models/resnet50/infer", bytes.NewReader(body))
				req.Header.Set(inferHeaderLength, header)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("status %d: %.300s", rec.Code, rec.Body)
				}
			}
			var sum time.Duration
			for _, d := range c.decode {
				sum += d
			}
			if len(c.decode) > 0 {
				b.ReportMetric(float64(sum.Nanoseconds())/float64(len(c.decode))/1e3, "decode-µs")
			}
			reportQuantiles(b, c.decode)
		})
	}
}

// BenchmarkDecodeResNet50GRPC is BenchmarkDecodeResNet50 for the gRPC
// API in process (ModelInfer on a request with raw_input_contents, no
// protobuf decoding): "raw" and "float64" as there.
func BenchmarkDecodeResNet50GRPC(b *testing.B) {
	c := newCheckEngine(b, "resnet50")
	_, _, in := modelBinaryBody(b, c.models[0], 1)
	req := grpcRawRequest(c.models[0], in)
	for _, tc := range []struct {
		name string
		eng  Engine
	}{{"raw", c}, {"float64", slowEngine{c}}} {
		b.Run(tc.name, func(b *testing.B) {
			s := NewGRPCService(NewHandler(tc.eng, Options{Metrics: NewMetrics(tc.eng, nil)}))
			c.decode = make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			b.SetBytes(int64(len(req.RawInputContents[0])))
			for b.Loop() {
				if _, err := s.ModelInfer(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			var sum time.Duration
			for _, d := range c.decode {
				sum += d
			}
			if len(c.decode) > 0 {
				b.ReportMetric(float64(sum.Nanoseconds())/float64(len(c.decode))/1e3, "decode-µs")
			}
			reportQuantiles(b, c.decode)
		})
	}
}
