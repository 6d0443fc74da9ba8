package server_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"atoll/kernels"
	"atoll/models"
	"atoll/server"
)

// rawRequest is req with every input as raw bytes in its datatype, as the
// protocol layer's raw fast path builds it.
func rawRequest(t testing.TB, req *server.InferRequest) *server.InferRequest {
	t.Helper()
	r := *req
	r.Inputs = slices.Clone(req.Inputs)
	dts := map[string]kernels.DType{"BF16": kernels.BF16, "FP16": kernels.F16, "FP32": kernels.F32, "INT32": kernels.I32}
	for i, in := range r.Inputs {
		dt, ok := dts[in.Datatype]
		if !ok {
			t.Fatalf("input %s: datatype %s", in.Name, in.Datatype)
		}
		r.Inputs[i].Raw, r.Inputs[i].Data = kernels.Encode(dt, in.Data), nil
	}
	return &r
}

// The daemon's engine takes raw inputs: the simulator's CPU reference
// (which decodes the bundle's bytes itself) computes the same outputs from
// them as from float64 values, for BF16 images and INT32 token ids, HP and
// BE; NaN and out-of-vocabulary ids are refused.
func TestEngineRawInputs(t *testing.T) {
	leakCheck(t)
	e := newTestEngine(t, nil)
	if ri, ok := e.(server.RawInputs); !ok || !ri.AcceptsRaw() {
		t.Fatal("the engine does not take raw inputs")
	}
	for _, tc := range []struct {
		name  string
		model models.Model
		class server.Class
	}{
		{"tiny", tinyResNet(t), server.HP},
		{"tiny", tinyResNet(t), server.BE},
		{"tinybert", tinyBERT(t), server.HP},
	} {
		req, want := request(t, tc.model, modelInfo(t, e, tc.name), 1)
		req.Class = tc.class
		res, err := e.Infer(context.Background(), rawRequest(t, req))
		if err != nil {
			t.Fatalf("%s %s: %v", tc.name, tc.class, err)
		}
		if len(res.Outputs) != 1 || !slices.Equal(res.Outputs[0].Data, want) {
			t.Fatalf("%s %s: outputs from raw inputs differ from the CPU reference", tc.name, tc.class)
		}
	}
	req, _ := request(t, tinyResNet(t), modelInfo(t, e, "tiny"), 1)
	raw := rawRequest(t, req)
	raw.Inputs[0].Raw[2*5+1] = 0x7f // value 5: 0x7f80 | low byte = +Inf or NaN
	raw.Inputs[0].Raw[2*5] = 0x80
	if _, err := e.Infer(context.Background(), raw); !errors.Is(err, server.ErrBadInput) || !strings.Contains(err.Error(), "value 5 is +Inf; send finite values") {
		t.Fatalf("BF16 +Inf: %v", err)
	}
	raw = rawRequest(t, req)
	raw.Inputs[0].Raw = raw.Inputs[0].Raw[:len(raw.Inputs[0].Raw)-2]
	if _, err := e.Infer(context.Background(), raw); !errors.Is(err, server.ErrBadInput) {
		t.Fatalf("a short raw input: %v", err)
	}
	breq, _ := request(t, tinyBERT(t), modelInfo(t, e, "tinybert"), 1)
	raw = rawRequest(t, breq)
	raw.Inputs[0].Raw[4*2] = 50 // tinyBERT's vocabulary is 50
	if _, err := e.Infer(context.Background(), raw); !errors.Is(err, server.ErrBadInput) || !strings.Contains(err.Error(), "value 2 is 50; it must be an integer in [0, 50)") {
		t.Fatalf("token id 50: %v", err)
	}
}
