package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "atoll/server/inferencepb"
)

// This file is the Open Inference Protocol v2 gRPC API
// (inference.GRPCInferenceService) over the same Handler as the REST API:
// the same engine, model snapshot, priority mapping, request timeout,
// metrics, drain state and in-flight count, so that Drain and Wait cover
// both protocols. Only the wire format differs: tensors arrive as
// InferTensorContents or raw little-endian bytes instead of JSON.

// GRPCService implements inference.GRPCInferenceService over a Handler.
type GRPCService struct {
	pb.UnimplementedGRPCInferenceServiceServer
	h *Handler
}

// NewGRPCService serves the gRPC API over h's engine and options.
func NewGRPCService(h *Handler) *GRPCService { return &GRPCService{h: h} }

// NewGRPCServer is a grpc.Server with the service registered: messages
// are bounded by h's body limit (larger ones get ResourceExhausted), every
// call counts as in flight for h.Wait, and a panic in a call becomes an
// Internal error for that call only. extra options come last.
func NewGRPCServer(h *Handler, extra ...grpc.ServerOption) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(min(h.opt.BodyLimit, math.MaxInt32))),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.ChainUnaryInterceptor(h.grpcUnary, h.grpcAuth),
	}
	s := grpc.NewServer(append(opts, extra...)...)
	pb.RegisterGRPCInferenceServiceServer(s, NewGRPCService(h))
	return s
}

// grpcUnary counts the call in flight, recovers panics and logs the call
// at debug level.
func (h *Handler) grpcUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (resp any, err error) {
	h.inflight.add()
	defer h.inflight.done()
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			h.opt.Logger.Error("grpc handler panic", "method", info.FullMethod, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "%v: the server failed on this request; it keeps serving others (see the daemon log)", ErrInternal)
		}
		if h.opt.Logger.Enabled(ctx, slog.LevelDebug) {
			h.opt.Logger.Debug("grpc request", "method", info.FullMethod, "code", status.Code(err).String(), "duration", time.Since(start))
		}
	}()
	return next(ctx, req)
}

// grpcCode maps an error to its gRPC status code, as statusOf does to an
// HTTP status.
func grpcCode(err error) codes.Code {
	switch {
	case errors.Is(err, ErrBadInput):
		return codes.InvalidArgument
	case errors.Is(err, ErrUnknownModel), errors.Is(err, ErrUnknownJob):
		return codes.NotFound
	case errors.Is(err, ErrJobConflict):
		return codes.FailedPrecondition
	case errors.Is(err, ErrTooManyJobs):
		return codes.ResourceExhausted
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrShuttingDown), errors.Is(err, ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Internal
}

// grpcError turns err into a status error with the same message the REST
// API would send.
func (h *Handler) grpcError(method string, err error) error {
	code := grpcCode(err)
	msg := err.Error()
	switch code {
	case codes.DeadlineExceeded:
		msg = fmt.Sprintf("the request did not finish within request_timeout (%v) or the call's deadline; retry later or raise them: %v", h.opt.RequestTimeout, err)
	case codes.Internal:
		h.opt.Logger.Error("grpc request failed", "method", method, "err", err)
		if !errors.Is(err, ErrInternal) {
			msg = fmt.Sprintf("%v: %v", ErrInternal, err)
		}
	}
	return status.Error(code, msg)
}

// grpcModel finds a model by name and optional version, with the REST
// API's rules and messages.
func (h *Handler) grpcModel(name, version string) (ModelInfo, error) {
	// Handler.model reads the path values of a REST request; give it those.
	r := &http.Request{}
	r.SetPathValue("name", name)
	r.SetPathValue("version", version)
	m, _, err := h.model(r)
	return m, err
}

// ServerLive answers true while the process serves and its engine has not
// stopped for good (Breakable).
func (s *GRPCService) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: s.h.broken() == nil}, nil
}

// ServerReady answers false while the engine starts or the daemon drains.
func (s *GRPCService) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: !s.h.draining.Load() && s.h.eng.Ready()}, nil
}

// ModelReady answers whether the model is ready; an unknown model or
// version is NotFound.
func (s *GRPCService) ModelReady(_ context.Context, req *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	m, err := s.h.grpcModel(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, s.h.grpcError("ModelReady", err)
	}
	ready := false
	if !s.h.draining.Load() && s.h.eng.Ready() {
		for _, mi := range s.h.eng.Models() {
			if mi.Name == m.Name {
				ready = mi.Ready
			}
		}
	}
	return &pb.ModelReadyResponse{Ready: ready}, nil
}

// ServerMetadata is GET /v2's answer.
func (s *GRPCService) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{Name: "atoll", Version: s.h.opt.Version, Extensions: []string{"priority", "jobs", "metrics"}}, nil
}

// ModelMetadata is GET /v2/models/{name}'s answer.
func (s *GRPCService) ModelMetadata(_ context.Context, req *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	m, err := s.h.grpcModel(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, s.h.grpcError("ModelMetadata", err)
	}
	meta := func(ts []TensorInfo) []*pb.ModelMetadataResponse_TensorMetadata {
		out := make([]*pb.ModelMetadataResponse_TensorMetadata, len(ts))
		for i, t := range ts {
			out[i] = &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
		}
		return out
	}
	return &pb.ModelMetadataResponse{Name: m.Name, Versions: m.Versions, Platform: m.Platform, Inputs: meta(m.Inputs), Outputs: meta(m.Outputs)}, nil
}

// ModelInfer runs one request through the engine, with the REST API's
// checks, priority mapping, timeout and metrics (counted under the HTTP
// status the same error would get over REST).
func (s *GRPCService) ModelInfer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	h := s.h
	arrived := time.Now()
	name := req.GetModelName()
	done := h.opt.Metrics.begin(name)
	defer done()
	resp, class, res, err := s.infer(ctx, req, arrived)
	code := http.StatusOK
	if err != nil {
		code = statusOf(err)
		err = h.grpcError("ModelInfer", err)
	}
	h.opt.Metrics.observe(name, class, code, time.Since(arrived), res)
	return resp, err
}

func (s *GRPCService) infer(ctx context.Context, req *pb.ModelInferRequest, arrived time.Time) (*pb.ModelInferResponse, Class, *InferResult, error) {
	h := s.h
	m, err := h.grpcModel(req.GetModelName(), req.GetModelVersion())
	if err != nil {
		return nil, "", nil, err
	}
	if h.draining.Load() {
		return nil, "", nil, fmt.Errorf("%w: the daemon is draining; send the request to another replica", ErrShuttingDown)
	}
	if err := h.enterInfer(); err != nil {
		return nil, "", nil, err
	}
	defer h.infers.Add(-1)
	ir, err := grpcInferRequest(req, m, h.opt.Priority, h.rawIn)
	if err != nil {
		class := Class("")
		if ir != nil {
			class = ir.Class
		}
		return nil, class, nil, err
	}
	ir.Arrived = arrived
	if ir.ID == "" {
		ir.ID = "g" + strconv.FormatUint(h.nextID.Add(1), 10)
	}
	cctx, cancel := context.WithTimeout(ctx, h.opt.RequestTimeout)
	defer cancel()
	res, err := h.eng.Infer(cctx, ir)
	if err == nil && res == nil {
		err = fmt.Errorf("%w: the engine returned no result and no error", ErrInternal)
	}
	if err != nil {
		return nil, ir.Class, nil, err
	}
	resp := &pb.ModelInferResponse{
		ModelName:    m.Name,
		ModelVersion: req.GetModelVersion(),
		Id:           req.GetId(),
		Parameters: map[string]*pb.InferParameter{
			"class":           {ParameterChoice: &pb.InferParameter_StringParam{StringParam: string(ir.Class)}},
			"queue_time_ns":   {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: res.Queue.Nanoseconds()}},
			"service_time_ns": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: res.Service.Nanoseconds()}},
		},
	}
	if err := encodeOutputs(resp, res.Outputs, len(req.GetRawInputContents()) > 0); err != nil {
		return nil, ir.Class, res, err
	}
	return resp, ir.Class, res, nil
}

// grpcPriority reads the request's "priority" parameter (an int64_param):
// absent is 0.
func grpcPriority(params map[string]*pb.InferParameter) (int64, error) {
	p, ok := params["priority"]
	if !ok {
		return 0, nil
	}
	v, ok := p.GetParameterChoice().(*pb.InferParameter_Int64Param)
	if !ok {
		return 0, badInput("parameter \"priority\" is %v; it must be an int64_param (1 is the highest priority, 0 the model's default)", p)
	}
	return v.Int64Param, nil
}

// grpcInferRequest checks a gRPC request as buildInfer checks a JSON one
// and builds the InferRequest. On an error after the class is known, the
// returned request is non-nil and carries only the class. With acceptsRaw
// (the engine implements RawInputs), a raw_input_contents entry whose
// datatype is the model input's storage type (rawFast) goes to the engine
// as Tensor.Raw, a copy: nothing returned refers to req.
func grpcInferRequest(req *pb.ModelInferRequest, info ModelInfo, prio PriorityConfig, acceptsRaw bool) (*InferRequest, error) {
	p, err := grpcPriority(req.GetParameters())
	if err != nil {
		return nil, err
	}
	def := info.DefaultClass
	if def == "" {
		def = HP
	}
	class, err := prio.ClassOf(p, def)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*InferRequest, error) { return &InferRequest{Class: class}, err }
	inputs, raw := req.GetInputs(), req.GetRawInputContents()
	if len(inputs) == 0 {
		return fail(badInput("the request has no inputs; send inputs [{name, datatype, shape, contents}]"))
	}
	if len(raw) > 0 && len(raw) != len(inputs) {
		return fail(badInput("the request has %d inputs and %d raw_input_contents; send one raw entry per input, in order, or none", len(inputs), len(raw)))
	}
	ir := &InferRequest{ID: req.GetId(), Model: info.Name, Class: class, Inputs: make([]Tensor, len(inputs))}
	seen := make(map[string]bool, len(inputs))
	for i, in := range inputs {
		var rawData []byte
		if len(raw) > 0 {
			rawData = raw[i]
		}
		keep := len(raw) > 0 && rawFast(acceptsRaw, info, in.GetName(), in.GetDatatype())
		t, err := grpcTensor(i, in, len(raw) > 0, rawData, keep)
		if err != nil {
			return fail(err)
		}
		if seen[t.Name] {
			return fail(badInput("input %q appears twice; send each input once", t.Name))
		}
		seen[t.Name] = true
		ir.Inputs[i] = t
	}
	if outs := req.GetOutputs(); len(outs) > 0 {
		ir.Outputs = make([]string, len(outs))
		for i, o := range outs {
			if o.GetName() == "" {
				return fail(badInput("outputs[%d] has no name", i))
			}
			ir.Outputs[i] = o.GetName()
		}
	}
	if err := checkAgainst(info, ir.Inputs, ir.Outputs); err != nil {
		return fail(err)
	}
	ir.checked = len(info.Inputs) > 0
	return ir, nil
}

// grpcTensor checks one input for well-formedness, as inputJSON.tensor
// does, and decodes its values from contents or, when useRaw, from raw;
// with keep (useRaw only) it copies raw into Tensor.Raw unchecked instead
// (the raw fast path: the engine checks the values).
func grpcTensor(i int, in *pb.ModelInferRequest_InferInputTensor, useRaw bool, raw []byte, keep bool) (Tensor, error) {
	where := fmt.Sprintf("inputs[%d]", i)
	if in.GetName() == "" {
		return Tensor{}, badInput("%s has no name", where)
	}
	where = fmt.Sprintf("input %q", in.GetName())
	dt := in.GetDatatype()
	_, ok := datatypes[dt]
	switch {
	case dt == "":
		return Tensor{}, badInput("%s has no datatype; use one of %s", where, knownDatatypes)
	case dt == "BYTES":
		return Tensor{}, badInput("%s: datatype BYTES is not supported by atoll; send numeric tensors (%s)", where, knownDatatypes)
	case !ok:
		return Tensor{}, badInput("%s: unknown datatype %q; use one of %s", where, dt, knownDatatypes)
	}
	shape := in.GetShape()
	if len(shape) > maxRank {
		return Tensor{}, badInput("%s has rank %d; at most %d dimensions are accepted", where, len(shape), maxRank)
	}
	n := int64(1)
	for d, s := range shape {
		if s < 0 {
			return Tensor{}, badInput("%s: shape[%d] is %d; dimensions must be >= 0", where, d, s)
		}
		if s != 0 && n > math.MaxInt32/s {
			return Tensor{}, badInput("%s: shape %v has more than %d elements", where, shape, math.MaxInt32)
		}
		n *= s
	}
	var data []float64
	var err error
	if useRaw {
		if in.GetContents() != nil {
			return Tensor{}, badInput("%s has contents and the request has raw_input_contents; send every input one way", where)
		}
		if keep {
			size := rawSize[dt]
			if int64(len(raw)) != n*size {
				return Tensor{}, badInput("%s: shape needs %d values of %d bytes (%d bytes), raw_input_contents has %d bytes", where, n, size, n*size, len(raw))
			}
			if shape == nil {
				shape = []int64{}
			}
			return Tensor{Name: in.GetName(), Datatype: dt, Shape: shape, Raw: ownRaw(raw)}, nil
		}
		data, err = decodeRaw(dt, n, raw, true)
	} else {
		data, err = decodeContents(dt, n, in.GetContents())
	}
	if err != nil {
		return Tensor{}, badInput("%s: %v", where, err)
	}
	if !useRaw { // decodeRaw checked raw values already
		if err := checkValues(dt, data); err != nil {
			return Tensor{}, badInput("%s: %v", where, err)
		}
	}
	if shape == nil {
		shape = []int64{}
	}
	return Tensor{Name: in.GetName(), Datatype: dt, Shape: shape, Data: data}, nil
}

// contentsField names the InferTensorContents field each datatype uses.
var contentsField = map[string]string{
	"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
	"INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
	"UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents",
}

// decodeContents reads n values of datatype dt from c's field for dt; any
// other field holding values is an error.
func decodeContents(dt string, n int64, c *pb.InferTensorContents) ([]float64, error) {
	want, ok := contentsField[dt]
	if !ok {
		return nil, fmt.Errorf("datatype %s has no contents field; send it in raw_input_contents (little-endian)", dt)
	}
	lens := map[string]int{
		"bool_contents": len(c.GetBoolContents()), "int_contents": len(c.GetIntContents()),
		"int64_contents": len(c.GetInt64Contents()), "uint_contents": len(c.GetUintContents()),
		"uint64_contents": len(c.GetUint64Contents()), "fp32_contents": len(c.GetFp32Contents()),
		"fp64_contents": len(c.GetFp64Contents()), "bytes_contents": len(c.GetBytesContents()),
	}
	for _, f := range []string{"bool_contents", "int_contents", "int64_contents", "uint_contents", "uint64_contents", "fp32_contents", "fp64_contents", "bytes_contents"} {
		if f != want && lens[f] > 0 {
			return nil, fmt.Errorf("the datatype is %s but the values are in contents.%s; send them in contents.%s", dt, f, want)
		}
	}
	if got := int64(lens[want]); got != n {
		return nil, fmt.Errorf("shape needs %d values, contents.%s has %d", n, want, got)
	}
	out := make([]float64, n)
	switch want {
	case "bool_contents":
		for i, v := range c.GetBoolContents() {
			if v {
				out[i] = 1
			}
		}
	case "int_contents":
		widen(out, c.GetIntContents())
	case "int64_contents":
		widen(out, c.GetInt64Contents())
	case "uint_contents":
		widen(out, c.GetUintContents())
	case "uint64_contents":
		widen(out, c.GetUint64Contents())
	case "fp32_contents":
		widen(out, c.GetFp32Contents())
	case "fp64_contents":
		copy(out, c.GetFp64Contents())
	}
	return out, nil
}

// widen converts the typed contents vs into out, element by element.
func widen[T int32 | int64 | uint32 | uint64 | float32](out []float64, vs []T) {
	for i, v := range vs {
		out[i] = float64(v)
	}
}

// encodeOutputs puts outs into resp: as raw_output_contents when the
// request sent raw inputs or an output's datatype has no contents field
// (FP16, BF16), as InferTensorContents otherwise. A value the datatype
// cannot hold is an ErrInternal error (an engine bug, never the client's).
func encodeOutputs(resp *pb.ModelInferResponse, outs []Tensor, raw bool) error {
	for _, t := range outs {
		if _, ok := contentsField[t.Datatype]; !ok {
			raw = true
		}
	}
	resp.Outputs = make([]*pb.ModelInferResponse_InferOutputTensor, len(outs))
	if raw {
		resp.RawOutputContents = make([][]byte, len(outs))
	}
	for i, t := range outs {
		shape := t.Shape
		if shape == nil {
			shape = []int64{int64(len(t.Data))}
		}
		o := &pb.ModelInferResponse_InferOutputTensor{Name: t.Name, Datatype: t.Datatype, Shape: shape}
		if err := checkOutput(t); err != nil {
			return err
		}
		if raw {
			b, err := encodeRaw(t.Datatype, t.Data)
			if err != nil {
				return fmt.Errorf("%w: output %q: %v", ErrInternal, t.Name, err)
			}
			resp.RawOutputContents[i] = b
		} else {
			o.Contents = encodeContents(t.Datatype, t.Data)
		}
		resp.Outputs[i] = o
	}
	return nil
}

// encodeContents puts data into the contents field for dt (one
// contentsField names; integral values were checked in range).
func encodeContents(dt string, data []float64) *pb.InferTensorContents {
	c := &pb.InferTensorContents{}
	switch contentsField[dt] {
	case "bool_contents":
		c.BoolContents = convert(data, func(v float64) bool { return v != 0 })
	case "int_contents":
		c.IntContents = convert(data, func(v float64) int32 { return int32(v) })
	case "int64_contents":
		c.Int64Contents = convert(data, saturateInt64)
	case "uint_contents":
		c.UintContents = convert(data, func(v float64) uint32 { return uint32(v) })
	case "uint64_contents":
		c.Uint64Contents = convert(data, saturateUint64)
	case "fp32_contents":
		c.Fp32Contents = convert(data, func(v float64) float32 { return float32(v) })
	case "fp64_contents":
		c.Fp64Contents = append([]float64(nil), data...)
	}
	return c
}

// saturateInt64 converts v, already checked integral and in range, to
// int64: float64(MaxInt64) is 2^63, which int64 cannot hold.
func saturateInt64(v float64) int64 {
	if v >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

func saturateUint64(v float64) uint64 {
	if v >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(v)
}

// convert maps each value of data through f.
func convert[T any](data []float64, f func(float64) T) []T {
	out := make([]T, len(data))
	for i, v := range data {
		out[i] = f(v)
	}
	return out
}
