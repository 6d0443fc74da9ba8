package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	pb "atoll/server/inferencepb"
)

// grpcAPI serves the gRPC API over f through an in-memory connection and
// returns a client and the handler behind it.
func grpcAPI(t testing.TB, eng Engine, opt Options) (pb.GRPCInferenceServiceClient, *Handler) {
	t.Helper()
	h := NewHandler(eng, opt)
	lis := bufconn.Listen(1 << 20)
	srv := NewGRPCServer(h)
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(lis) //nolint:errcheck // ends with Stop
	}()
	conn := grpcDial(t, "passthrough:///bufconn", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return lis.DialContext(ctx)
	}))
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-served
	})
	return pb.NewGRPCInferenceServiceClient(conn), h
}

func grpcDial(t testing.TB, target string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// wantCode fails t unless err is a status with code and a message holding
// every one of msgs.
func wantCode(t *testing.T, what string, err error, code codes.Code, msgs ...string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Errorf("%s: %v, want code %v", what, err, code)
		return
	}
	for _, m := range msgs {
		if !strings.Contains(st.Message(), m) {
			t.Errorf("%s: message %q does not say %q", what, st.Message(), m)
		}
	}
}

func fp32Input(name string, shape []int64, vals ...float32) *pb.ModelInferRequest_InferInputTensor {
	return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: "FP32", Shape: shape, Contents: &pb.InferTensorContents{Fp32Contents: vals}}
}

func goodGRPC() *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: "echo", Id: "g-1", Inputs: []*pb.ModelInferRequest_InferInputTensor{fp32Input("input0", []int64{1, 4}, 1, 2, 3, 4)}}
}

func output(t *testing.T, r *pb.ModelInferResponse, name string) (*pb.ModelInferResponse_InferOutputTensor, []byte) {
	t.Helper()
	for i, o := range r.GetOutputs() {
		if o.GetName() == name {
			var raw []byte
			if len(r.GetRawOutputContents()) > 0 {
				raw = r.GetRawOutputContents()[i]
			}
			return o, raw
		}
	}
	t.Fatalf("response has no output %q: %v", name, r)
	return nil, nil
}

func TestGRPCHealthAndMetadata(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	c, h := grpcAPI(t, f, Options{Version: "v9"})
	ctx := context.Background()

	if r, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.GetLive() {
		t.Errorf("live: %v %v", r, err)
	}
	if r, err := c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || !r.GetReady() {
		t.Errorf("ready: %v %v", r, err)
	}
	md, err := c.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	if err != nil || md.GetName() != "atoll" || md.GetVersion() != "v9" || !slices.Contains(md.GetExtensions(), "priority") {
		t.Errorf("server metadata: %v %v", md, err)
	}

	for _, tc := range []struct {
		name, version string
		ready         bool
		code          codes.Code
	}{
		{"echo", "", true, codes.OK},
		{"echo", "1", true, codes.OK},
		{"be-model", "1", true, codes.OK},
		{"loading", "", false, codes.OK},
		{"echo", "2", false, codes.NotFound},
		{"nope", "", false, codes.NotFound},
	} {
		r, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: tc.name, Version: tc.version})
		wantCode(t, "model ready "+tc.name+"/"+tc.version, err, tc.code)
		if err == nil && r.GetReady() != tc.ready {
			t.Errorf("model ready %s/%s: %v, want %v", tc.name, tc.version, r.GetReady(), tc.ready)
		}
	}

	mm, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	want := f.models[0]
	if mm.GetName() != "echo" || mm.GetPlatform() != want.Platform || !slices.Equal(mm.GetVersions(), []string{"1"}) ||
		len(mm.GetInputs()) != len(want.Inputs) || len(mm.GetOutputs()) != len(want.Outputs) {
		t.Fatalf("model metadata: %v", mm)
	}
	for i, ti := range want.Inputs {
		got := mm.GetInputs()[i]
		if got.GetName() != ti.Name || got.GetDatatype() != ti.Datatype || !slices.Equal(got.GetShape(), ti.Shape) {
			t.Errorf("input %d: %v, want %+v", i, got, ti)
		}
	}
	_, err = c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "nope"})
	wantCode(t, "metadata of an unknown model", err, codes.NotFound, "unknown model", `"echo"`)
	_, err = c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "echo", Version: "7"})
	wantCode(t, "metadata of an unknown version", err, codes.NotFound, `no version "7"`)

	// Draining and an engine that is not ready both read as not ready.
	f.ready.Store(false)
	if r, err := c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || r.GetReady() {
		t.Errorf("ready with the engine not ready: %v %v", r, err)
	}
	f.ready.Store(true)
	h.Drain()
	if r, err := c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || r.GetReady() {
		t.Errorf("ready while draining: %v %v", r, err)
	}
	if r, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "echo"}); err != nil || r.GetReady() {
		t.Errorf("model ready while draining: %v %v", r, err)
	}
	if r, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.GetLive() {
		t.Errorf("live while draining: %v %v", r, err)
	}
}

func TestGRPCInferContents(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	m := NewMetrics(f, nil)
	c, _ := grpcAPI(t, f, Options{Metrics: m})
	ctx := context.Background()

	// FP32 on the model with metadata: every output, doubled, and the sum.
	r, err := c.ModelInfer(ctx, goodGRPC())
	if err != nil {
		t.Fatal(err)
	}
	if r.GetModelName() != "echo" || r.GetId() != "g-1" || len(r.GetRawOutputContents()) != 0 {
		t.Errorf("response header: %v", r)
	}
	if cl := r.GetParameters()["class"].GetStringParam(); cl != "HP" {
		t.Errorf("class parameter %q, want HP", cl)
	}
	if q := r.GetParameters()["queue_time_ns"].GetInt64Param(); q != (150 * time.Microsecond).Nanoseconds() {
		t.Errorf("queue_time_ns %d, want the engine's 150µs", q)
	}
	o, _ := output(t, r, "output0")
	if o.GetDatatype() != "FP32" || !slices.Equal(o.GetShape(), []int64{1, 4}) || !slices.Equal(o.GetContents().GetFp32Contents(), []float32{2, 4, 6, 8}) {
		t.Errorf("output0: %v", o)
	}
	s, _ := output(t, r, "sum")
	if !slices.Equal(s.GetContents().GetFp64Contents(), []float64{10}) {
		t.Errorf("sum: %v", s)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("echo", "HP", "200")); got != 1 {
		t.Errorf("atoll_requests_total{echo,HP,200} = %v after one gRPC request, want 1", got)
	}

	// Requested outputs only.
	req := goodGRPC()
	req.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "sum"}}
	if r, err := c.ModelInfer(ctx, req); err != nil || len(r.GetOutputs()) != 1 || r.GetOutputs()[0].GetName() != "sum" {
		t.Errorf("outputs [sum]: %v %v", r, err)
	}

	// The other content kinds, on the model without metadata.
	in := func(dt string, c *pb.InferTensorContents, shape ...int64) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "be-model", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: dt, Shape: shape, Contents: c}}}
	}
	r, err = c.ModelInfer(ctx, in("INT32", &pb.InferTensorContents{IntContents: []int32{-3, 7, 1 << 20}}, 3))
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := output(t, r, "output0"); o.GetDatatype() != "INT32" || !slices.Equal(o.GetContents().GetIntContents(), []int32{-6, 14, 1 << 21}) {
		t.Errorf("INT32: %v", o)
	}
	r, err = c.ModelInfer(ctx, in("INT64", &pb.InferTensorContents{Int64Contents: []int64{1 << 40, -5}}, 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := output(t, r, "output0"); !slices.Equal(o.GetContents().GetInt64Contents(), []int64{1 << 41, -10}) {
		t.Errorf("INT64: %v", o)
	}
	// BOOL: the fake doubles values (2 is no BOOL), so ask for the sum only.
	req = in("BOOL", &pb.InferTensorContents{BoolContents: []bool{true, false, true, true}}, 2, 2)
	req.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "sum"}}
	r, err = c.ModelInfer(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := output(t, r, "sum"); !slices.Equal(o.GetContents().GetFp64Contents(), []float64{3}) {
		t.Errorf("BOOL sum: %v", o)
	}
	// The "bools" model answers BOOL outputs as bool_contents.
	req = in("FP32", &pb.InferTensorContents{Fp32Contents: []float32{1}}, 1)
	req.ModelName = "bools"
	if r, err = c.ModelInfer(ctx, req); err != nil {
		t.Fatal(err)
	}
	if o, _ := output(t, r, "b"); !slices.Equal(o.GetContents().GetBoolContents(), []bool{true, false}) {
		t.Errorf("BOOL output: %v", o)
	}
	// NaN has no JSON form (500 over REST) but travels over gRPC.
	req.ModelName = "nan"
	if r, err = c.ModelInfer(ctx, req); err != nil {
		t.Fatal(err)
	}
	if o, _ := output(t, r, "x"); len(o.GetContents().GetFp32Contents()) != 1 || !math.IsNaN(float64(o.GetContents().GetFp32Contents()[0])) {
		t.Errorf("NaN output: %v", o)
	}
	// An empty tensor needs no contents at all.
	if _, err := c.ModelInfer(ctx, in("FP32", nil, 0, 4)); err != nil {
		t.Errorf("empty tensor: %v", err)
	}
}

func le32(vals ...uint32) []byte {
	b := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func TestGRPCInferRaw(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	c, _ := grpcAPI(t, f, Options{})
	ctx := context.Background()
	raw := func(model, dt string, b []byte, shape ...int64) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{
			ModelName:        model,
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "input0", Datatype: dt, Shape: shape}},
			RawInputContents: [][]byte{b},
		}
	}
	f32 := func(vs ...float32) []byte {
		u := make([]uint32, len(vs))
		for i, v := range vs {
			u[i] = math.Float32bits(v)
		}
		return le32(u...)
	}
	var i64 []byte
	for _, v := range []int64{-1 << 50, 3} {
		i64 = binary.LittleEndian.AppendUint64(i64, uint64(v))
	}
	// FP16 and BF16 of 1.5, -2, 0.25, 65504 (FP16's largest) and 2^-24
	// (its smallest subnormal): 1.5 = 0x3e00, -2 = 0xc000 ...
	f16 := []byte{0x00, 0x3e, 0x00, 0xc0, 0x00, 0x34, 0xff, 0x7b, 0x01, 0x00}
	bf16 := []byte{0xc0, 0x3f, 0x00, 0xc0, 0x80, 0x3e, 0x80, 0x47, 0x80, 0x33}

	for _, tc := range []struct {
		name  string
		req   *pb.ModelInferRequest
		in    []float64
		bytes int // per element
	}{
		{"FP32", raw("echo", "FP32", f32(1, -2.5, 3, 1e-3), 1, 4), []float64{1, -2.5, 3, float64(float32(1e-3))}, 4},
		{"INT32", raw("be-model", "INT32", le32(7, math.MaxUint32, 1<<29), 3), []float64{7, -1, 1 << 29}, 4},
		{"INT64", raw("be-model", "INT64", i64, 2), []float64{-1 << 50, 3}, 8},
		{"FP16", raw("be-model", "FP16", f16, 5), []float64{1.5, -2, 0.25, 65504, 0x1p-24}, 2},
		{"BF16", raw("be-model", "BF16", bf16, 5), []float64{1.5, -2, 0.25, 65536, 0x1p-24}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := c.ModelInfer(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.GetRawOutputContents()) != len(r.GetOutputs()) {
				t.Fatalf("raw inputs got %d raw outputs for %d outputs", len(r.GetRawOutputContents()), len(r.GetOutputs()))
			}
			o, b := output(t, r, "output0")
			if o.GetContents() != nil {
				t.Errorf("output0 has both contents and raw contents")
			}
			got, err := decodeRaw(o.GetDatatype(), int64(len(tc.in)), b, false)
			if err != nil {
				t.Fatal(err)
			}
			// The fake doubles; FP16 65504*2 overflows to +Inf.
			for i, v := range tc.in {
				want := 2 * v
				if tc.name == "FP16" && want > 65504 {
					want = math.Inf(1)
				}
				if got[i] != want {
					t.Errorf("output0[%d] = %v, want %v", i, got[i], want)
				}
			}
			s, sb := output(t, r, "sum")
			sum, err := decodeRaw(s.GetDatatype(), 1, sb, false)
			if err != nil {
				t.Fatal(err)
			}
			want := 0.0
			for _, v := range tc.in {
				want += v
			}
			if sum[0] != want {
				t.Errorf("sum %v, want %v", sum[0], want)
			}
		})
	}
}

// TestFP16RoundTrip: every binary16 value decodes and encodes back to
// itself (NaNs to a NaN), and rounding goes to the nearest even half.
func TestFP16RoundTrip(t *testing.T) {
	for h := range 1 << 16 {
		v := fp16ToFloat(uint16(h))
		back := floatToFP16(v)
		if math.IsNaN(v) {
			if !math.IsNaN(fp16ToFloat(back)) {
				t.Fatalf("%#04x: NaN came back as %#04x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("%#04x = %v came back as %#04x", h, v, back)
		}
	}
	for _, tc := range []struct {
		v    float64
		want uint16
	}{
		{1 + 0x1p-11, 0x3c00},              // halfway between 1 and the next half: to even (1)
		{1 + 3*0x1p-11, 0x3c02},            // halfway, odd below: up
		{65519, 0x7bff},                    // below the halfway point to 2^16
		{65520, 0x7c00},                    // halfway: infinity
		{0x1p-25, 0},                       // half the smallest subnormal: to even (0)
		{0x1p-14 - 0x1p-26, 0x0400},        // rounds up into the smallest normal
		{math.Copysign(0, -1), 0x8000},     // keeps the sign
		{math.Inf(-1), 0xfc00},             //
		{float64(math.MaxFloat32), 0x7c00}, //
	} {
		if got := floatToFP16(tc.v); got != tc.want {
			t.Errorf("floatToFP16(%v) = %#04x, want %#04x", tc.v, got, tc.want)
		}
	}
	for _, tc := range []struct {
		v    float64
		want uint16
	}{
		{1, 0x3f80},
		{1 + 0x1p-8, 0x3f80},   // halfway: to even
		{1 + 3*0x1p-8, 0x3f82}, // halfway, odd below: up
		{-2, 0xc000},
	} {
		if got := floatToBF16(tc.v); got != tc.want {
			t.Errorf("floatToBF16(%v) = %#04x, want %#04x", tc.v, got, tc.want)
		}
	}
	if b := floatToBF16(math.NaN()); !math.IsNaN(float64(math.Float32frombits(uint32(b) << 16))) {
		t.Errorf("floatToBF16(NaN) = %#04x, not a NaN", b)
	}
}

func TestGRPCInferErrors(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	m := NewMetrics(f, nil)
	c, _ := grpcAPI(t, f, Options{Metrics: m, BodyLimit: 4096})
	ctx := context.Background()

	with := func(mod func(r *pb.ModelInferRequest)) *pb.ModelInferRequest {
		r := goodGRPC()
		mod(r)
		return r
	}
	be := func(dt string, c *pb.InferTensorContents, shape ...int64) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "be-model", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: dt, Shape: shape, Contents: c}}}
	}
	prio := func(p *pb.InferParameter) func(r *pb.ModelInferRequest) {
		return func(r *pb.ModelInferRequest) { r.Parameters = map[string]*pb.InferParameter{"priority": p} }
	}
	int64p := func(v int64) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
	}
	nan := math.Float32bits(float32(math.NaN()))

	for _, tc := range []struct {
		name string
		req  *pb.ModelInferRequest
		code codes.Code
		msgs []string
	}{
		{"unknown model", with(func(r *pb.ModelInferRequest) { r.ModelName = "nope" }), codes.NotFound, []string{"unknown model", `"echo"`}},
		{"unknown version", with(func(r *pb.ModelInferRequest) { r.ModelVersion = "3" }), codes.NotFound, []string{`no version "3"`}},
		{"no inputs", with(func(r *pb.ModelInferRequest) { r.Inputs = nil }), codes.InvalidArgument, []string{"no inputs"}},
		{"no name", with(func(r *pb.ModelInferRequest) { r.Inputs[0].Name = "" }), codes.InvalidArgument, []string{"inputs[0] has no name"}},
		{"no datatype", with(func(r *pb.ModelInferRequest) { r.Inputs[0].Datatype = "" }), codes.InvalidArgument, []string{"no datatype", "FP32"}},
		{"BYTES", be("BYTES", &pb.InferTensorContents{BytesContents: [][]byte{[]byte("a")}}, 1), codes.InvalidArgument, []string{"BYTES is not supported"}},
		{"unknown datatype", be("FP8", nil, 1), codes.InvalidArgument, []string{`unknown datatype "FP8"`}},
		{"negative dimension", be("FP32", nil, -1), codes.InvalidArgument, []string{"shape[0] is -1"}},
		{"too many elements", be("FP32", nil, 1<<20, 1<<20), codes.InvalidArgument, []string{"more than"}},
		{"rank", be("FP32", nil, make([]int64, maxRank+1)...), codes.InvalidArgument, []string{"rank 17"}},
		{"count", with(func(r *pb.ModelInferRequest) { r.Inputs[0].Contents.Fp32Contents = []float32{1, 2, 3} }), codes.InvalidArgument, []string{"needs 4 values", "has 3"}},
		{"wrong contents field", be("FP32", &pb.InferTensorContents{IntContents: []int32{1}}, 1), codes.InvalidArgument, []string{"contents.int_contents", "contents.fp32_contents"}},
		{"mixed contents fields", be("INT64", &pb.InferTensorContents{Int64Contents: []int64{1}, Fp32Contents: []float32{1}}, 1), codes.InvalidArgument, []string{"contents.fp32_contents"}},
		{"FP16 in contents", be("FP16", &pb.InferTensorContents{Fp32Contents: []float32{1}}, 1), codes.InvalidArgument, []string{"FP16 has no contents field", "raw_input_contents"}},
		{"INT8 out of range", be("INT8", &pb.InferTensorContents{IntContents: []int32{300}}, 1), codes.InvalidArgument, []string{"out of range for INT8"}},
		{"UINT8 out of range", be("UINT8", &pb.InferTensorContents{UintContents: []uint32{256}}, 1), codes.InvalidArgument, []string{"out of range for UINT8"}},
		{"NaN input", be("FP32", &pb.InferTensorContents{Fp32Contents: []float32{float32(math.NaN())}}, 1), codes.InvalidArgument, []string{"NaN", "finite"}},
		{"duplicate input", with(func(r *pb.ModelInferRequest) { r.ModelName = "be-model"; r.Inputs = append(r.Inputs, r.Inputs[0]) }), codes.InvalidArgument, []string{"appears twice"}},
		{"model's datatype", with(func(r *pb.ModelInferRequest) {
			r.Inputs[0] = &pb.ModelInferRequest_InferInputTensor{Name: "input0", Datatype: "FP64", Shape: []int64{1, 4}, Contents: &pb.InferTensorContents{Fp64Contents: []float64{1, 2, 3, 4}}}
		}), codes.InvalidArgument, []string{`input "input0" is FP64`, "wants FP32"}},
		{"model's shape", with(func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{2, 2} }), codes.InvalidArgument, []string{"shape [2 2]", "wants [-1 4]"}},
		{"unknown output", with(func(r *pb.ModelInferRequest) {
			r.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}}
		}), codes.InvalidArgument, []string{`no output "logits"`}},
		{"output without name", with(func(r *pb.ModelInferRequest) { r.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{}} }), codes.InvalidArgument, []string{"outputs[0] has no name"}},
		{"priority too high", with(prio(int64p(3))), codes.InvalidArgument, []string{`"priority" is 3`, "use 1 (highest) to 2"}},
		{"priority negative", with(prio(int64p(-1))), codes.InvalidArgument, []string{`"priority" is -1`}},
		{"priority as string", with(prio(&pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: "1"}})), codes.InvalidArgument, []string{"int64_param"}},
		{"raw count", with(func(r *pb.ModelInferRequest) {
			r.Inputs[0].Contents = nil
			r.RawInputContents = [][]byte{le32(1, 2, 3, 4), le32(1)}
		}), codes.InvalidArgument, []string{"1 inputs and 2 raw_input_contents"}},
		{"raw length", with(func(r *pb.ModelInferRequest) {
			r.Inputs[0].Contents = nil
			r.RawInputContents = [][]byte{le32(1, 2, 3)}
		}), codes.InvalidArgument, []string{"(16 bytes)", "has 12 bytes"}},
		{"raw and contents", with(func(r *pb.ModelInferRequest) { r.RawInputContents = [][]byte{le32(1, 2, 3, 4)} }), codes.InvalidArgument, []string{"has contents and the request has raw_input_contents"}},
		{"raw NaN", with(func(r *pb.ModelInferRequest) {
			r.Inputs[0].Contents = nil
			r.RawInputContents = [][]byte{le32(0, 0, nan, 0)}
		}), codes.InvalidArgument, []string{"value 2 is NaN"}},
		{"raw BOOL byte", &pb.ModelInferRequest{ModelName: "be-model", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "b", Datatype: "BOOL", Shape: []int64{2}}}, RawInputContents: [][]byte{{1, 7}}}, codes.InvalidArgument, []string{"BOOL byte is 7"}},
		{"over the body limit", be("FP32", &pb.InferTensorContents{Fp32Contents: make([]float32, 2048)}, 2048), codes.ResourceExhausted, nil},
		{"engine failure", with(func(r *pb.ModelInferRequest) { r.ModelName = "broken" }), codes.Internal, []string{"internal error", "fake device fault"}},
		{"no result", with(func(r *pb.ModelInferRequest) { r.ModelName = "nilresult" }), codes.Internal, []string{"no result"}},
		{"panic", with(func(r *pb.ModelInferRequest) { r.ModelName = "panics" }), codes.Internal, []string{"keeps serving others"}},
	} {
		calls := f.calls.Load()
		_, err := c.ModelInfer(ctx, tc.req)
		wantCode(t, tc.name, err, tc.code, tc.msgs...)
		if tc.code == codes.InvalidArgument || tc.code == codes.NotFound || tc.code == codes.ResourceExhausted {
			if f.calls.Load() != calls {
				t.Errorf("%s: the bad request reached the engine", tc.name)
			}
		}
	}
	// After all that, good requests still succeed.
	if _, err := c.ModelInfer(ctx, goodGRPC()); err != nil {
		t.Errorf("a good request after the bad ones: %v", err)
	}
	if got := testutil.ToFloat64(m.failures.WithLabelValues("echo", "_none", "404")); got != 1 {
		t.Errorf("failures{echo,_none,404} = %v, want 1 (the unknown version)", got)
	}
	if got := testutil.ToFloat64(m.failures.WithLabelValues("_unknown", "_none", "404")); got != 1 {
		t.Errorf("failures{_unknown,_none,404} = %v, want 1 (the unknown model)", got)
	}
	if got := testutil.ToFloat64(m.failures.WithLabelValues("echo", "HP", "400")); got == 0 {
		t.Error("no 400 failures counted for echo/HP")
	}
	if got := testutil.ToFloat64(m.failures.WithLabelValues("broken", "HP", "500")); got != 1 {
		t.Errorf("failures{broken,HP,500} = %v, want 1", got)
	}
}

// TestGRPCMaxInflight: HTTP and gRPC share max_inflight; one more gRPC
// request is Unavailable and never reaches the engine.
func TestGRPCMaxInflight(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	f.block = make(chan struct{})
	f.entered = make(chan string, 1)
	c, _ := grpcAPI(t, f, Options{MaxInflight: 1})
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(ctx, goodGRPC())
		first <- err
	}()
	<-f.entered
	calls := f.calls.Load()
	_, err := c.ModelInfer(ctx, goodGRPC())
	wantCode(t, "over max_inflight", err, codes.Unavailable, "max_inflight 1")
	if f.calls.Load() != calls {
		t.Error("the refused request reached the engine")
	}
	close(f.block)
	if err := <-first; err != nil {
		t.Errorf("the request in flight: %v", err)
	}
	if _, err := c.ModelInfer(ctx, goodGRPC()); err != nil {
		t.Errorf("after the other finished: %v", err)
	}
}

// TestGRPCUnavailableAndDeadline: queue full, draining and a closed engine
// are Unavailable; the request timeout is DeadlineExceeded.
func TestGRPCUnavailableAndDeadline(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	f.queueMax = 1
	f.block = make(chan struct{})
	f.entered = make(chan string, 1)
	c, h := grpcAPI(t, f, Options{RequestTimeout: 5 * time.Second})
	ctx := context.Background()

	first := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(ctx, goodGRPC())
		first <- err
	}()
	id := <-f.entered
	if id != "g-1" {
		t.Errorf("the engine got request id %q, want the client's g-1", id)
	}
	_, err := c.ModelInfer(ctx, goodGRPC())
	wantCode(t, "queue full", err, codes.Unavailable, "queue full")
	close(f.block)
	if err := <-first; err != nil {
		t.Errorf("the queued request: %v", err)
	}

	// A request that outlives the timeout; the fake honours ctx.
	f2 := newFakeEngine()
	f2.block = make(chan struct{})
	c2, _ := grpcAPI(t, f2, Options{RequestTimeout: 50 * time.Millisecond})
	_, err = c2.ModelInfer(ctx, goodGRPC())
	wantCode(t, "request timeout", err, codes.DeadlineExceeded, "request_timeout (50ms)")

	h.Drain()
	_, err = c.ModelInfer(ctx, goodGRPC())
	wantCode(t, "draining", err, codes.Unavailable, "shutting down", "draining")

	f3 := newFakeEngine()
	f3.Close(ctx)
	c3, _ := grpcAPI(t, f3, Options{})
	_, err = c3.ModelInfer(ctx, goodGRPC())
	wantCode(t, "engine closed", err, codes.Unavailable, "shutting down")
}

// classEngine records the class of every request it sees.
type classEngine struct {
	*fakeEngine
	mu      sync.Mutex
	classes []Class
}

func (e *classEngine) Infer(ctx context.Context, req *InferRequest) (*InferResult, error) {
	e.mu.Lock()
	e.classes = append(e.classes, req.Class)
	e.mu.Unlock()
	return e.fakeEngine.Infer(ctx, req)
}

func TestGRPCClassMapping(t *testing.T) {
	leakCheck(t)
	eng := &classEngine{fakeEngine: newFakeEngine()}
	prio := PriorityConfig{Levels: 4, HPMax: 2}
	c, _ := grpcAPI(t, eng, Options{Priority: prio})
	ctx := context.Background()
	for _, tc := range []struct {
		model string
		prio  int64 // -99: no parameter
	}{
		{"echo", -99}, {"be-model", -99}, {"echo", 0}, {"be-model", 0},
		{"echo", 1}, {"be-model", 2}, {"echo", 3}, {"be-model", 4}, {"echo", 5}, {"echo", -2},
	} {
		req := goodGRPC()
		req.ModelName = tc.model
		p := tc.prio
		if p != -99 {
			req.Parameters = map[string]*pb.InferParameter{"priority": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: p}}}
		} else {
			p = 0
		}
		def := HP
		if tc.model == "be-model" {
			def = BE
		}
		want, wantErr := prio.ClassOf(p, def)
		n := len(eng.classes)
		r, err := c.ModelInfer(ctx, req)
		what := fmt.Sprintf("%s priority %d", tc.model, tc.prio)
		if wantErr != nil {
			wantCode(t, what, err, codes.InvalidArgument, wantErr.Error())
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		eng.mu.Lock()
		got := eng.classes[n]
		eng.mu.Unlock()
		if got != want || r.GetParameters()["class"].GetStringParam() != string(want) {
			t.Errorf("%s: engine saw %s, response says %s; want %s", what, got, r.GetParameters()["class"].GetStringParam(), want)
		}
	}
	// The mapping is the configured one, not a fixed one: 1 and 2 are HP
	// and 3 BE here, where the default config would refuse 3.
	if eng.classes[4] != HP || eng.classes[5] != HP || eng.classes[6] != BE {
		t.Errorf("classes %v", eng.classes)
	}
}

// TestGRPCSameErrorsAsREST: a request that is wrong in the same way gets
// the same message over both protocols.
func TestGRPCSameErrorsAsREST(t *testing.T) {
	leakCheck(t)
	f := newFakeEngine()
	ts, hc := apiServer(t, f, Options{})
	c, _ := grpcAPI(t, f, Options{})
	for _, tc := range []struct {
		json string
		req  *pb.ModelInferRequest
	}{
		{`{"inputs":[{"name":"input0","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}`,
			&pb.ModelInferRequest{ModelName: "echo", Inputs: []*pb.ModelInferRequest_InferInputTensor{fp32Input("input0", []int64{1, 3}, 1, 2, 3)}}},
		{`{"parameters":{"priority":7},"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`,
			&pb.ModelInferRequest{ModelName: "echo", Parameters: map[string]*pb.InferParameter{"priority": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 7}}},
				Inputs: []*pb.ModelInferRequest_InferInputTensor{fp32Input("input0", []int64{1, 4}, 1, 2, 3, 4)}}},
		{`{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"nope"}]}`,
			&pb.ModelInferRequest{ModelName: "echo", Inputs: []*pb.ModelInferRequest_InferInputTensor{fp32Input("input0", []int64{1, 4}, 1, 2, 3, 4)},
				Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "nope"}}}},
	} {
		r := do(t, hc, "POST", ts.URL+"/v2/models/echo/infer", tc.json)
		if r.code != 400 {
			t.Fatalf("REST: %d %s", r.code, r.raw)
		}
		_, err := c.ModelInfer(context.Background(), tc.req)
		wantCode(t, "gRPC", err, codes.InvalidArgument, r.body["error"].(string))
	}
}
