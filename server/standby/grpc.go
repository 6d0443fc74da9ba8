package standby

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "atoll/server/inferencepb"
)

// The gRPC API through the supervisor: every call of the inference service
// is forwarded, message bytes as they are, to the serving worker's gRPC
// socket. Every method of the service is idempotent, so a call the serving
// worker fails under (Unavailable, Internal or Unknown from a worker that
// is no longer live, or no answer) goes to the next worker after the
// failover; a refusal (Unavailable) goes to the idle standby, and within a
// takeover is sent again, as for HTTP. A stalled worker's new calls go to
// the standby; the calls it holds wait for its failure (no hedging here).
// ServerLive is answered by the supervisor.

// frame is a gRPC message's bytes.
type frame struct{ b []byte }

// rawCodec passes messages through as bytes. It keeps proto's name, so the
// calls it makes are the ones a proto client makes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.(*frame).b, nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	f := v.(*frame)
	f.b = append(f.b[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

const liveMethod = "/inference.GRPCInferenceService/ServerLive"

// grpcConn is the client connection to wk's gRPC socket, made once.
func (s *Supervisor) grpcConn(wk *Worker) (*grpc.ClientConn, error) {
	wk.grpcOnce.Do(func() {
		if wk.GRPCTarget == "" {
			wk.grpcErr = errors.New("the worker serves no gRPC")
			return
		}
		wk.grpcConn, wk.grpcErr = grpc.NewClient(wk.GRPCTarget,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallRecvMsgSize(1<<31-1), grpc.MaxCallSendMsgSize(1<<31-1)))
	})
	return wk.grpcConn, wk.grpcErr
}

// grpcForward is the gRPC server's handler for every method.
func (s *Supervisor) grpcForward(_ any, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "standby: a call without a method")
	}
	var in frame
	if err := ss.RecvMsg(&in); err != nil {
		return err
	}
	if method == liveMethod {
		s.mu.Lock()
		live := s.gaveUp == nil
		s.mu.Unlock()
		b, err := proto.Marshal(&pb.ServerLiveResponse{Live: live})
		if err != nil {
			return err
		}
		return ss.SendMsg(&frame{b: b})
	}
	ctx := ss.Context()
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opt.RequestTimeout)
		defer cancel()
	}
	var lastErr error
	for sends := 0; sends < maxSends; {
		wk, err := s.serving(ctx)
		if err != nil {
			return status.Error(codes.Unavailable, err.Error())
		}
		target := wk
		if wk.stalledNow() {
			if sb := s.readyStandby(); sb != nil {
				s.hedged.Add(1)
				target = sb
			}
		}
		out, hdr, trl, err := s.invoke(ctx, target, method, &in)
		if status.Code(err) == codes.Unavailable && target == wk {
			// A refusal by the serving worker: the idle standby takes it.
			if sb := s.readyStandby(); sb != nil {
				s.overflow.Add(1)
				target = sb
				out, hdr, trl, err = s.invoke(ctx, sb, method, &in)
			}
		}
		if err == nil {
			_ = ss.SetHeader(hdr)
			ss.SetTrailer(trl)
			s.answered(target)
			return ss.SendMsg(out)
		}
		lastErr = err
		switch status.Code(err) {
		case codes.Unavailable, codes.Internal, codes.Unknown:
		default:
			return err // the worker's answer (bad input, unknown model…)
		}
		again, why := s.again(ctx, wk, status.Code(err) == codes.Unavailable)
		if !again {
			return err
		}
		if why != "" {
			sends++
		}
	}
	return lastErr
}

// invoke makes one call on wk, counted in its progress.
func (s *Supervisor) invoke(ctx context.Context, wk *Worker, method string, in *frame) (*frame, metadata.MD, metadata.MD, error) {
	conn, err := s.grpcConn(wk)
	if err != nil {
		return nil, nil, nil, status.Error(codes.Unavailable, err.Error())
	}
	var out frame
	var hdr, trl metadata.MD
	wk.begin()
	err = conn.Invoke(ctx, method, in, &out, grpc.Header(&hdr), grpc.Trailer(&trl))
	if wk.end(err == nil) {
		s.log.Info("standby: the stalled worker answers again", "worker", wk.Gen)
	}
	return &out, hdr, trl, err
}

// grpcServer is the supervisor's gRPC server, with the restrictions' guard
// and extra options (TLS).
func (s *Supervisor) grpcServer(guard grpc.StreamServerInterceptor, extra ...grpc.ServerOption) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.UnknownServiceHandler(s.grpcForward),
		grpc.ForceServerCodec(rawCodec{}),
		grpc.MaxRecvMsgSize(int(min(s.opt.BodyLimit, 1<<31-1))),
		grpc.MaxSendMsgSize(1<<31 - 1),
		grpc.StreamInterceptor(guard),
	}
	return grpc.NewServer(append(opts, extra...)...)
}
