package loadgen

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// decodeTestRaw reads n values of dt in the binary extension's layout.
func decodeTestRaw(t *testing.T, dt string, raw []byte) []float64 {
	t.Helper()
	le := binary.LittleEndian
	var out []float64
	for len(raw) > 0 {
		switch dt {
		case "BOOL":
			out, raw = append(out, float64(raw[0])), raw[1:]
		case "FP16":
			h := le.Uint16(raw)
			exp, frac := int(h>>10&0x1f), float64(h&0x3ff)
			v := 0.0
			if exp != 0 {
				v = math.Ldexp(1024+frac, exp-25)
			} else {
				v = math.Ldexp(frac, -24)
			}
			if h&0x8000 != 0 {
				v = -v
			}
			out, raw = append(out, v), raw[2:]
		case "BF16":
			out, raw = append(out, float64(math.Float32frombits(uint32(le.Uint16(raw))<<16))), raw[2:]
		case "FP32":
			out, raw = append(out, float64(math.Float32frombits(le.Uint32(raw)))), raw[4:]
		case "FP64":
			out, raw = append(out, math.Float64frombits(le.Uint64(raw))), raw[8:]
		case "INT8":
			out, raw = append(out, float64(int8(raw[0]))), raw[1:]
		case "UINT16":
			out, raw = append(out, float64(le.Uint16(raw))), raw[2:]
		case "INT32":
			out, raw = append(out, float64(int32(le.Uint32(raw)))), raw[4:]
		case "INT64":
			out, raw = append(out, float64(int64(le.Uint64(raw)))), raw[8:]
		default:
			t.Fatalf("no test decoder for %s", dt)
		}
	}
	return out
}

// A binary body carries exactly the values the JSON body of the same seed
// carries, as the extension lays them out, and asks for binary outputs.
func TestNewBodyBinaryMatchesJSON(t *testing.T) {
	dts := []string{"FP16", "BF16", "FP32", "FP64", "INT8", "UINT16", "INT32", "INT64", "BOOL"}
	m := &Metadata{Name: "m"}
	for _, dt := range dts {
		m.Inputs = append(m.Inputs, TensorMeta{Name: "in_" + dt, Datatype: dt, Shape: []int64{-1, 5}})
	}
	jb, err := NewBody(m, 3, 2, 7, DataJSON)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := NewBody(m, 3, 2, 7, DataBinary)
	if err != nil {
		t.Fatal(err)
	}
	if jb.Binary() || !bb.Binary() {
		t.Fatalf("Binary(): json %v, binary %v", jb.Binary(), bb.Binary())
	}
	type tensor struct {
		Name       string           `json:"name"`
		Shape      []int64          `json:"shape"`
		Datatype   string           `json:"datatype"`
		Parameters map[string]int64 `json:"parameters"`
		Data       json.RawMessage  `json:"data"`
	}
	type request struct {
		ID         string         `json:"id"`
		Parameters map[string]any `json:"parameters"`
		Inputs     []tensor       `json:"inputs"`
	}
	var jr, br request
	if err := json.Unmarshal(jb.Bytes(12), &jr); err != nil {
		t.Fatal(err)
	}
	whole := bb.Bytes(12)
	if len(whole) != bb.Len(12) {
		t.Fatalf("Len %d, body %d bytes", bb.Len(12), len(whole))
	}
	js, raw := whole[:bb.JSONLen(12)], whole[bb.JSONLen(12):]
	if err := json.Unmarshal(js, &br); err != nil {
		t.Fatalf("JSON part: %v\n%s", err, js)
	}
	if br.ID != "12" || br.Parameters["priority"] != 2.0 || br.Parameters["binary_data_output"] != true {
		t.Errorf("binary request header %s", js)
	}
	if _, ok := jr.Parameters["binary_data_output"]; ok {
		t.Errorf("JSON body asks for binary outputs: %v", jr.Parameters)
	}
	for i, in := range br.Inputs {
		size, ok := in.Parameters["binary_data_size"]
		if !ok || in.Data != nil {
			t.Fatalf("input %s: parameters %v data %s", in.Name, in.Parameters, in.Data)
		}
		if int(size) > len(raw) {
			t.Fatalf("input %s: binary_data_size %d, %d bytes left", in.Name, size, len(raw))
		}
		got := decodeTestRaw(t, in.Datatype, raw[:size])
		raw = raw[size:]
		var want []float64
		if in.Datatype == "BOOL" {
			var bs []bool
			json.Unmarshal(jr.Inputs[i].Data, &bs)
			for _, b := range bs {
				want = append(want, map[bool]float64{false: 0, true: 1}[b])
			}
		} else if err := json.Unmarshal(jr.Inputs[i].Data, &want); err != nil {
			t.Fatal(err)
		}
		if in.Datatype == "FP16" || in.Datatype == "BF16" || in.Datatype == "FP32" {
			// JSON carries float32's shortest decimal form: equal as float32.
			for j := range want {
				want[j] = float64(float32(want[j]))
			}
		}
		if len(got) != 15 || !reflect.DeepEqual(got, want) {
			t.Errorf("input %s: binary %v, JSON %v", in.Name, got, want)
		}
		if !reflect.DeepEqual(in.Shape, []int64{3, 5}) {
			t.Errorf("input %s: shape %v", in.Name, in.Shape)
		}
	}
	if len(raw) != 0 {
		t.Errorf("%d bytes after the last input", len(raw))
	}
	if _, err := ParseDataFormat("protobuf"); !errors.Is(err, ErrConfig) {
		t.Errorf("ParseDataFormat(protobuf): %v", err)
	}
	if _, err := NewBody(m, 1, 0, 1, "xml"); !errors.Is(err, ErrConfig) {
		t.Errorf("NewBody format xml: %v", err)
	}
}

// Run sends what Config.Data says: binary by default (every request with
// the extension's header, all answered), JSON when asked.
func TestRunDataFormats(t *testing.T) {
	for _, tc := range []struct {
		data       DataFormat
		wantBinary bool
	}{{"", true}, {DataBinary, true}, {DataJSON, false}} {
		t.Run(string(tc.data), func(t *testing.T) {
			f := &fakeOIP{}
			c := f.start(t, ClientOptions{})
			cfg := cfgFor(uniform(20, time.Millisecond))
			cfg.Data = tc.data
			res, err := Run(context.Background(), c, cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res.Records {
				if r.Kind != KindOK {
					t.Errorf("request %d: %s", i, r.Kind)
				}
			}
			want := int64(0)
			if tc.wantBinary {
				want = 20
			}
			if got := f.binaryReqs.Load(); got != want {
				t.Errorf("%d binary requests, want %d", got, want)
			}
			if rep := Summarize(res); rep.Data != map[bool]DataFormat{true: DataBinary, false: DataJSON}[tc.wantBinary] {
				t.Errorf("report data %q", rep.Data)
			}
		})
	}
	cfg := cfgFor(uniform(2, time.Millisecond))
	cfg.Data = "yaml"
	if _, err := Run(context.Background(), (&fakeOIP{}).start(t, ClientOptions{}), cfg); !errors.Is(err, ErrConfig) {
		t.Errorf("data yaml: %v", err)
	}
}

// validResponse accepts JSON and well-formed binary responses and refuses
// binary ones whose sizes do not add up.
func TestValidResponse(t *testing.T) {
	js := `{"outputs":[{"name":"y","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}},{"name":"z","datatype":"FP32","shape":[1],"data":[1]}]}`
	n := strconv.Itoa(len(js))
	cases := []struct {
		body   string
		header []string
		ok     bool
	}{
		{`{"outputs":[{"name":"y","data":[1]}]}`, nil, true},
		{`{"outputs":[]}`, nil, false},
		{`{"outputs":[{"name":"y"}]}`, nil, false},
		{js + "12345678", []string{n}, true},
		{js + "1234567", []string{n}, false},
		{js + "123456789", []string{n}, false},
		{js + "12345678", []string{"x"}, false},
		{js + "12345678", []string{"100000"}, false},
		{js + "12345678", []string{n, n}, false},
		{js + "12345678", nil, false},
	}
	for i, tc := range cases {
		if got := validResponse([]byte(tc.body), tc.header); got != tc.ok {
			t.Errorf("case %d: valid %v, want %v", i, got, tc.ok)
		}
	}
}
