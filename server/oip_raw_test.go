package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"

	"atoll/kernels"
	"atoll/models"
	pb "atoll/server/inferencepb"
)

// slowEngine hides an engine's RawInputs: the protocol layer then decodes
// every input to float64 (the path before the raw fast path).
type slowEngine struct{ Engine }

// serveBinary sends one binary-extension request for model through h and
// returns the status and body.
func serveBinary(h *Handler, model string, body []byte, header string) (int, string) {
	req := httptest.NewRequest("POST", "/v2/models/"+model+"/infer", bytes.NewReader(body))
	req.Header.Set(inferHeaderLength, header)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// bundleBytes is each tensor's raw bytes by name.
func bundleBytes(b *models.Bundle) map[string][]byte {
	out := map[string][]byte{}
	for _, d := range b.Tensors() {
		out[d.Name] = d.Raw
	}
	return out
}

func sameBundles(t *testing.T, what string, got, want *models.Bundle) {
	t.Helper()
	if got == nil || want == nil {
		t.Fatalf("%s: bundle missing (got %v, want %v)", what, got, want)
	}
	g, w := bundleBytes(got), bundleBytes(want)
	if len(g) != len(w) {
		t.Fatalf("%s: %d tensors, want %d", what, len(g), len(w))
	}
	for name, wb := range w {
		if !bytes.Equal(g[name], wb) {
			t.Fatalf("%s: input %q: device bytes differ (%d vs %d bytes)", what, name, len(g[name]), len(wb))
		}
	}
}

// The raw fast path hands the engine the same device bytes the decoding
// path builds, for the real resnet50 (BF16) and distilbert (INT32) inputs,
// over REST and gRPC; and the fast path really is taken (Tensor.Raw set).
func TestRawFastPathSameDeviceInputs(t *testing.T) {
	c := newCheckEngine(t, "resnet50", "distilbert")
	fast := NewHandler(c, Options{})
	slow := NewHandler(slowEngine{c}, Options{})
	if !fast.rawIn || slow.rawIn {
		t.Fatalf("rawIn: engine %v, wrapped %v; want true, false", fast.rawIn, slow.rawIn)
	}
	for _, m := range c.models {
		name := m.info.Name
		body, header, in := modelBinaryBody(t, m, 7)
		code, msg := serveBinary(fast, name, body, header)
		if code != 200 {
			t.Fatalf("%s fast: %d %s", name, code, msg)
		}
		gotFast := c.last
		code, msg = serveBinary(slow, name, body, header)
		if code != 200 {
			t.Fatalf("%s slow: %d %s", name, code, msg)
		}
		gotSlow := c.last
		sameBundles(t, name+" REST fast vs slow", gotFast, gotSlow)
		sameBundles(t, name+" REST fast vs InitInputs", gotFast, in)

		req, _, _, _, err := parseInferBinaryRaw(body, header, m.info, DefaultConfig().Priority, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range req.Inputs {
			if tn.Raw == nil || tn.Data != nil {
				t.Fatalf("%s input %q: Raw %d bytes, Data %d values; want the raw fast path", name, tn.Name, len(tn.Raw), len(tn.Data))
			}
		}

		greq := grpcRawRequest(m, in)
		if _, err := NewGRPCService(fast).ModelInfer(context.Background(), greq); err != nil {
			t.Fatalf("%s gRPC fast: %v", name, err)
		}
		grpcFast := c.last
		if _, err := NewGRPCService(slow).ModelInfer(context.Background(), greq); err != nil {
			t.Fatalf("%s gRPC slow: %v", name, err)
		}
		sameBundles(t, name+" gRPC fast vs slow", grpcFast, c.last)
		sameBundles(t, name+" gRPC fast vs InitInputs", grpcFast, in)
	}
}

// grpcRawRequest is a gRPC request for m with in's tensors as
// raw_input_contents.
func grpcRawRequest(m *engModel, in *models.Bundle) *pb.ModelInferRequest {
	req := &pb.ModelInferRequest{ModelName: m.info.Name}
	for _, ti := range m.info.Inputs {
		d, _ := in.Get(ti.Name)
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: ti.Name, Datatype: ti.Datatype, Shape: ti.Shape})
		req.RawInputContents = append(req.RawInputContents, bytes.Clone(d.Raw))
	}
	return req
}

// For every storage float type, raw bytes of finite values are what the
// decoding path's float64 round trip (decodeRaw, then the device encoding)
// gives back, bit for bit: random bit patterns, subnormals and -0
// included. So the fast path cannot change what the device gets.
func TestRawBytesEqualTheRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		dt string
		kd kernels.DType
	}{{"BF16", kernels.BF16}, {"FP16", kernels.F16}, {"FP32", kernels.F32}, {"INT32", kernels.I32}} {
		size := int(rawSize[tc.dt])
		const n = 4096
		raw := make([]byte, n*size)
		for i := range n {
			for {
				for j := range size {
					raw[i*size+j] = byte(rnd.Uint32())
				}
				if tc.dt == "INT32" || firstNonFinite(tc.dt, raw[i*size:(i+1)*size]) < 0 {
					break
				}
			}
		}
		vals, err := decodeRaw(tc.dt, n, raw, true)
		if err != nil {
			t.Fatalf("%s: %v", tc.dt, err)
		}
		if got := kernels.Encode(tc.kd, vals); !bytes.Equal(got, raw) {
			t.Fatalf("%s: the float64 round trip changes the bytes", tc.dt)
		}
	}
}

// firstNonFinite finds exactly the element decodeRaw refuses, with the
// same words, wherever it sits (the SWAR blocks and the scalar tail).
func TestFirstNonFiniteMatchesDecodeRaw(t *testing.T) {
	specials := map[string][]uint64{
		"BF16": {0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff},
		"FP16": {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xffff},
		"FP32": {0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffffffff},
	}
	// Finite neighbours of the specials: the largest exponents.
	finite := map[string][]uint64{
		"BF16": {0x7f7f, 0xff7f, 0x0000, 0x8000, 0x0001, 0x7f00},
		"FP16": {0x7bff, 0xfbff, 0x0000, 0x8000, 0x0001, 0x7800},
		"FP32": {0x7f7fffff, 0xff7fffff, 0, 0x80000000, 1, 0x7f000000},
	}
	rnd := rand.New(rand.NewPCG(5, 6))
	for dt, sp := range specials {
		size := int(rawSize[dt])
		put := func(b []byte, i int, v uint64) {
			if size == 2 {
				binary.LittleEndian.PutUint16(b[i*size:], uint16(v))
			} else {
				binary.LittleEndian.PutUint32(b[i*size:], uint32(v))
			}
		}
		for _, n := range []int{0, 1, 3, 15, 16, 17, 100, 1001} {
			b := make([]byte, n*size)
			for i := range n {
				put(b, i, finite[dt][rnd.IntN(len(finite[dt]))])
			}
			if i := firstNonFinite(dt, b); i != -1 {
				t.Fatalf("%s n=%d all finite: index %d", dt, n, i)
			}
			if n == 0 {
				continue
			}
			for trial := 0; trial < 20; trial++ {
				c := bytes.Clone(b)
				at := rnd.IntN(n)
				put(c, at, sp[rnd.IntN(len(sp))])
				if rnd.IntN(2) == 0 && at+1 < n { // a second one later must not matter
					put(c, at+1+rnd.IntN(n-at-1), sp[0])
				}
				i := firstNonFinite(dt, c)
				_, want := decodeRaw(dt, int64(n), c, true)
				if i != at || want == nil {
					t.Fatalf("%s n=%d: index %d, want %d (decodeRaw: %v)", dt, n, i, at, want)
				}
				if got := nonFinite(i, rawValue(dt, c, i)); got.Error() != want.Error() {
					t.Fatalf("%s: %q, decodeRaw says %q", dt, got, want)
				}
			}
		}
	}
}

// A NaN or infinity in a raw input is refused with the decoding path's
// 400 and exactly its message, over REST and gRPC; so is a token id out of
// the vocabulary (INT32, checked by the engine on both paths).
func TestRawFastPathRefusesWhatTheSlowPathRefuses(t *testing.T) {
	c := newCheckEngine(t, "resnet50", "distilbert")
	fast, slow := NewHandler(c, Options{}), NewHandler(slowEngine{c}, Options{})
	resnet, bert := c.byName["resnet50"], c.byName["distilbert"]
	vocab := bert.intMax[bert.info.Inputs[0].Name]
	cases := []struct {
		name  string
		m     *engModel
		index int
		bits  uint32
		want  string
	}{
		{"bf16 NaN", resnet, 1000, 0x7fc0, "value 1000 is NaN; send finite values"},
		{"bf16 +Inf", resnet, 150527, 0x7f80, "value 150527 is +Inf; send finite values"},
		{"bf16 -Inf", resnet, 0, 0xff80, "value 0 is -Inf; send finite values"},
		{"int32 negative", bert, 3, 0xffffffff, "value 3 is -1; it must be an integer in [0, "},
		{"int32 = vocab", bert, 0, uint32(vocab), "it must be an integer in [0, "},
		{"int32 min", bert, 5, 0x80000000, "value 5 is -2.147483648e+09; it must be"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body, header, in := modelBinaryBody(t, tc.m, 11)
			ti := tc.m.info.Inputs[0]
			d, _ := in.Get(ti.Name)
			size := d.DType.Size()
			start := bytes.Index(body, d.Raw)
			if start < 0 {
				t.Fatal("input bytes not found in the body")
			}
			if size == 2 {
				binary.LittleEndian.PutUint16(body[start+tc.index*size:], uint16(tc.bits))
			} else {
				binary.LittleEndian.PutUint32(body[start+tc.index*size:], tc.bits)
			}
			fc, fm := serveBinary(fast, tc.m.info.Name, body, header)
			sc, sm := serveBinary(slow, tc.m.info.Name, body, header)
			if fc != 400 || sc != 400 {
				t.Fatalf("status fast %d, slow %d; want 400 (%s | %s)", fc, sc, fm, sm)
			}
			if fm != sm || !strings.Contains(fm, tc.want) {
				t.Fatalf("fast %s\nslow %s\nwant both to contain %q", fm, sm, tc.want)
			}
			// gRPC, raw_input_contents.
			in.Add(&models.Data{Name: ti.Name, DType: d.DType, Shape: d.Shape, Raw: body[start : start+len(d.Raw)]})
			greq := grpcRawRequest(tc.m, in)
			_, fe := NewGRPCService(fast).ModelInfer(context.Background(), greq)
			_, se := NewGRPCService(slow).ModelInfer(context.Background(), greq)
			if fe == nil || se == nil || fe.Error() != se.Error() || !strings.Contains(fe.Error(), tc.want) {
				t.Fatalf("gRPC fast %v\ngRPC slow %v\nwant the same InvalidArgument containing %q", fe, se, tc.want)
			}
		})
	}
}

// Raw inputs never alias the request's buffer: mutating the body after
// parsing (the REST API returns it to its pool at once), reusing the pool
// for the next request, or mutating a gRPC request's raw_input_contents
// after the call leaves the bundle the engine holds unchanged.
func TestRawInputsDoNotAliasRequestBuffers(t *testing.T) {
	c := newCheckEngine(t, "resnet50")
	m := c.models[0]
	body, header, in := modelBinaryBody(t, m, 21)
	want, _ := in.Get("input")
	wantRaw := bytes.Clone(want.Raw)

	req, _, _, _, err := parseInferBinaryRaw(body, header, m.info, DefaultConfig().Priority, true)
	if err != nil {
		t.Fatal(err)
	}
	mutated := bytes.Clone(body)
	for i := range mutated {
		mutated[i] ^= 0x5a
	}
	copy(body, mutated)
	if !bytes.Equal(req.Inputs[0].Raw, wantRaw) {
		t.Fatal("Tensor.Raw changed when the body was overwritten after parsing")
	}
	body, _, _ = modelBinaryBody(t, m, 21) // restore

	h := NewHandler(c, Options{})
	if code, msg := serveBinary(h, "resnet50", body, header); code != 200 {
		t.Fatalf("%d %s", code, msg)
	}
	held := c.last
	other, oh, _ := modelBinaryBody(t, m, 22)
	for range 4 { // the pooled body buffer is reused (when the pool keeps it)
		if code, msg := serveBinary(h, "resnet50", other, oh); code != 200 {
			t.Fatalf("%d %s", code, msg)
		}
	}
	buf := pooledBody(int64(len(body)) + 1)
	buf = buf[:cap(buf)]
	for i := range buf {
		buf[i] = 0xff
	}
	got, _ := held.Get("input")
	if !bytes.Equal(got.Raw, wantRaw) {
		t.Fatal("the held bundle changed when the request buffers were reused")
	}

	greq := grpcRawRequest(m, in)
	if _, err := NewGRPCService(h).ModelInfer(context.Background(), greq); err != nil {
		t.Fatal(err)
	}
	held = c.last
	for i := range greq.RawInputContents[0] {
		greq.RawInputContents[0][i] = 0xff
	}
	got, _ = held.Get("input")
	if !bytes.Equal(got.Raw, wantRaw) {
		t.Fatal("the held bundle changed when the gRPC request's raw_input_contents was overwritten")
	}
}

// A raw input of the wrong datatype for the model keeps the decoding path
// (and its error naming both datatypes); an engine given a raw tensor of
// the wrong length refuses it.
func TestRawFastPathEdges(t *testing.T) {
	c := newCheckEngine(t, "resnet50")
	m := c.models[0]
	if rawFast(true, m.info, "input", "FP32") || rawFast(false, m.info, "input", "BF16") || !rawFast(true, m.info, "input", "BF16") || rawFast(true, m.info, "nope", "BF16") {
		t.Fatal("rawFast: wrong decision")
	}
	_, err := m.check(&InferRequest{Model: "resnet50", Inputs: []Tensor{{Name: "input", Datatype: "BF16", Shape: m.info.Inputs[0].Shape, Raw: make([]byte, 10)}}})
	if err == nil || !strings.Contains(err.Error(), "has 10 bytes") {
		t.Fatalf("short raw tensor: %v", err)
	}
	if _, err := models.DataFromRaw("x", kernels.BF16, []int{2, 3}, make([]byte, 11)); err == nil {
		t.Fatal("DataFromRaw took 11 bytes for 6 BF16 values")
	}
	if firstOutOfRange([]byte{1, 0, 0, 0, 9, 0, 0, 0}, 9) != 1 || firstOutOfRange([]byte{8, 0, 0, 0}, 9) != -1 {
		t.Fatal("firstOutOfRange")
	}
	if v := rawValue("FP32", []byte{0, 0, 0x80, 0x7f}, 0); !math.IsInf(v, 1) {
		t.Fatalf("rawValue FP32 +Inf: %v", v)
	}
}
