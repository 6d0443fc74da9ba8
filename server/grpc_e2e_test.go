package server_test

import (
	"context"
	"encoding/binary"
	"math"
	"net"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"atoll/server"
	pb "atoll/server/inferencepb"
)

// TestGRPCEndToEnd runs the daemon over the real engine (simulated GPU,
// virtual time, a reduced ResNet) with gRPC on loopback: metadata, raw and
// contents inference in both classes, a bad request, shutdown.
func TestGRPCEndToEnd(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })

	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, stop := startE2E(t, nil, server.WithGRPCListener(gln))
	conn, err := grpc.NewClient(gln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stop()
		t.Fatal(err)
	}
	defer func() {
		conn.Close()
		stop()
	}()
	c := pb.NewGRPCInferenceServiceClient(conn)
	bg := context.Background()

	if r, err := c.ServerReady(bg, &pb.ServerReadyRequest{}, grpc.WaitForReady(true)); err != nil || !r.GetReady() {
		t.Fatalf("ready: %v %v", r, err)
	}
	md, err := c.ModelMetadata(bg, &pb.ModelMetadataRequest{Name: "rn"})
	if err != nil {
		t.Fatal(err)
	}
	if len(md.GetInputs()) != 1 {
		t.Fatalf("metadata: %v", md)
	}
	in := md.GetInputs()[0]
	dt := in.GetDatatype()
	if dt != "FP32" && dt != "BF16" {
		t.Fatalf("the test builds FP32 or BF16 inputs; the model wants %v", in)
	}
	shape := make([]int64, len(in.GetShape()))
	n := int64(1)
	for i, d := range in.GetShape() {
		if d < 0 {
			d = 1
		}
		shape[i], n = d, n*d
	}
	vals := make([]float32, n)
	var raw []byte
	for i := range vals {
		vals[i] = float32(i%7) / 7
		bits := math.Float32bits(vals[i])
		if dt == "BF16" {
			raw = binary.LittleEndian.AppendUint16(raw, uint16(bits>>16))
		} else {
			raw = binary.LittleEndian.AppendUint32(raw, bits)
		}
	}
	size := map[string]int{"FP32": 4, "BF16": 2, "FP16": 2}
	for _, tc := range []struct {
		prio    int64
		useRaw  bool
		wantCls string
	}{{1, true, "HP"}, {2, false, "BE"}, {0, true, "HP"}} {
		req := &pb.ModelInferRequest{
			ModelName:  "rn",
			Id:         "e2e",
			Parameters: map[string]*pb.InferParameter{"priority": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: tc.prio}}},
			Inputs:     []*pb.ModelInferRequest_InferInputTensor{{Name: in.GetName(), Datatype: dt, Shape: shape}},
		}
		if tc.useRaw {
			req.RawInputContents = [][]byte{raw}
		} else {
			req.Inputs[0].Contents = &pb.InferTensorContents{Fp32Contents: vals}
		}
		r, err := c.ModelInfer(bg, req)
		if !tc.useRaw && dt == "BF16" {
			// BF16 has no contents field: only raw contents carry it.
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("BF16 in fp32_contents: %v, want InvalidArgument", err)
			}
			req.Inputs[0].Contents = nil
			req.RawInputContents = [][]byte{raw}
			tc.useRaw = true
			r, err = c.ModelInfer(bg, req)
		}
		if err != nil {
			t.Fatalf("priority %d: %v", tc.prio, err)
		}
		if r.GetId() != "e2e" || r.GetParameters()["class"].GetStringParam() != tc.wantCls || len(r.GetOutputs()) != len(md.GetOutputs()) {
			t.Errorf("priority %d: %v", tc.prio, r)
		}
		for i, o := range r.GetOutputs() {
			elems := int64(1)
			for _, d := range o.GetShape() {
				elems *= d
			}
			got := int64(len(o.GetContents().GetFp32Contents()))
			if len(r.GetRawOutputContents()) > 0 {
				got = int64(len(r.GetRawOutputContents()[i]) / size[o.GetDatatype()])
			}
			if size[o.GetDatatype()] == 0 || got != elems || got == 0 {
				t.Errorf("priority %d: output %s has %d values for shape %v", tc.prio, o.GetName(), got, o.GetShape())
			}
		}
	}
	bad := &pb.ModelInferRequest{ModelName: "rn", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: in.GetName(), Datatype: dt, Shape: []int64{1}}}, RawInputContents: [][]byte{raw[:size[dt]]}}
	if _, err := c.ModelInfer(bg, bad); status.Code(err) != codes.InvalidArgument {
		t.Errorf("wrong shape: %v, want InvalidArgument", err)
	}
}
