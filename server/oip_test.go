package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
)

// FuzzParseInfer: any body either parses into tensors whose data length is
// the product of their shape, or fails with ErrBadInput; nothing panics.
func FuzzParseInfer(f *testing.F) {
	for _, s := range []string{
		goodInfer,
		`{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[[1,2],[3,4]]}]}`,
		`{"inputs":[{"name":"b","shape":[2],"datatype":"BOOL","data":[true,false]}]}`,
		`{"inputs":[{"name":"i","shape":[0],"datatype":"INT8","data":[]}]}`,
		`{"parameters":{"priority":2},"inputs":[{"name":"x","shape":[1],"datatype":"UINT64","data":[1e3]}]}`,
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP16","data":[-1.5e-3]}]}`,
		`{"inputs":[`, `[]`, `null`, `{"inputs":[{"data":[[[[]]]]}]}`,
	} {
		f.Add([]byte(s))
	}
	info := ModelInfo{Name: "any", DefaultClass: BE}
	prio := PriorityConfig{Levels: 3, HPMax: 1}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _, _, err := parseInfer(body, info, prio)
		if err != nil {
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("error does not wrap ErrBadInput: %v", err)
			}
			return
		}
		if req.Class != HP && req.Class != BE {
			t.Fatalf("class %q", req.Class)
		}
		for _, in := range req.Inputs {
			n := int64(1)
			for _, d := range in.Shape {
				if d < 0 {
					t.Fatalf("negative dimension accepted: %v", in.Shape)
				}
				n *= d
			}
			if int64(len(in.Data)) != n {
				t.Fatalf("input %q: shape %v but %d values", in.Name, in.Shape, len(in.Data))
			}
		}
	})
}

// TestAppendResponse checks the hand-written encoder against encoding/json:
// the bytes must be valid JSON and decode to the same values (FP32 values
// after rounding to float32), integers must be integers, BOOL booleans.
func TestAppendResponse(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		var outs []Tensor
		for k := range 1 + rnd.IntN(3) {
			dt := []string{"FP32", "FP64", "FP16", "INT32", "INT64", "UINT8", "BOOL"}[rnd.IntN(7)]
			n := rnd.IntN(20)
			data := make([]float64, n)
			for i := range data {
				switch dt {
				case "BOOL":
					data[i] = float64(rnd.IntN(2))
				case "INT32", "INT64", "UINT8":
					data[i] = float64(rnd.IntN(255))
					if dt != "UINT8" && rnd.IntN(2) == 0 {
						data[i] = -float64(rnd.Int64N(1 << 40))
					}
				default:
					data[i] = rnd.NormFloat64() * math.Pow(10, float64(rnd.IntN(50)-25))
				}
			}
			outs = append(outs, Tensor{Name: fmt.Sprintf("o%d\"\\é", k), Datatype: dt, Shape: []int64{int64(n)}, Data: data})
		}
		resp := inferResponseJSON{ModelName: "m", ID: fmt.Sprintf("id-%d\n", iter), Parameters: responseParams{Class: BE, QueueNs: 5, ServiceNs: 7}}
		b, err := appendResponse(nil, &resp, outs)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			ModelName  string         `json:"model_name"`
			ID         string         `json:"id"`
			Parameters responseParams `json:"parameters"`
			Outputs    []struct {
				Name     string            `json:"name"`
				Shape    []int64           `json:"shape"`
				Datatype string            `json:"datatype"`
				Data     []json.RawMessage `json:"data"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, b)
		}
		if got.ModelName != "m" || got.ID != resp.ID || got.Parameters != resp.Parameters || len(got.Outputs) != len(outs) {
			t.Fatalf("header fields wrong: %s", b)
		}
		for k, o := range got.Outputs {
			want := outs[k]
			if o.Name != want.Name || o.Datatype != want.Datatype || len(o.Data) != len(want.Data) {
				t.Fatalf("output %d: %s", k, b)
			}
			for i, raw := range o.Data {
				v := want.Data[i]
				switch want.Datatype {
				case "BOOL":
					if string(raw) != fmt.Sprint(v != 0) {
						t.Fatalf("BOOL %v encoded %s", v, raw)
					}
				case "INT32", "INT64", "UINT8":
					if n, err := strconv.ParseInt(string(raw), 10, 64); err != nil || float64(n) != v {
						t.Fatalf("%s %v encoded %s", want.Datatype, v, raw)
					}
				default:
					f, err := strconv.ParseFloat(string(raw), 64)
					w := v
					if want.Datatype != "FP64" {
						w = float64(float32(v))
						f = float64(float32(f))
					}
					if err != nil || f != w {
						t.Fatalf("%s %v encoded %s", want.Datatype, v, raw)
					}
				}
			}
		}
	}
	if _, err := appendResponse(nil, &inferResponseJSON{}, []Tensor{{Name: "x", Datatype: "FP32", Data: []float64{math.Inf(1)}}}); err == nil {
		t.Error("Inf encoded without an error")
	}
}

// fastSeeds are bodies near the fast path's edges.
var fastSeeds = []string{
	goodInfer,
	`{"id":"x","parameters":{"priority":1,"other":{"a":[1,"b",true]}},"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[[1,2],[3,4e-3]],"parameters":{}}],"outputs":[{"name":"sum","parameters":{"x":1}}]}`,
	`{"inputs":[{"name":"b","shape":[2],"datatype":"BOOL","data":[true,false]}]}`,
	`{"inputs":[{"name":"b","shape":[2],"datatype":"BOOL","data":[true,0]}]}`,
	`{"inputs":[{"name":"i","shape":[0],"datatype":"INT8","data":[]}]}`,
	`{"inputs":[{"name":"i","shape":[0],"datatype":"INT8"}]}`,
	`{"inputs":[{"name":"i","shape":[],"datatype":"UINT64","data":[18446744073709551615]}]}`,
	`{"inputs":[{"name":"i","shape":[1],"datatype":"INT32","data":[1.0]}]}`,
	`{"inputs":[{"name":"i","shape":[-0],"datatype":"INT32","data":[]}]}`,
	`{"inputs":[{"name":"i","shape":[1],"datatype":"FP64","data":[-0.0e+00]}]}`,
	`{"inputs":[{"name":"i","shape":[1],"datatype":"FP64","data":[1e400]}]}`,
	`{"inputs":[{"name":"i","shape":[1],"datatype":"FP64","data":[01]}]}`,
	`{"inputs":[{"name":"i","shape":[1],"datatype":"FP64","data":5}]}`,
	`{"Inputs":[{"name":"i","shape":[1],"datatype":"FP64","data":[5]}]}`,
	`{"id":"a","id":"b","inputs":[{"name":"i","shape":[1],"datatype":"FP64","data":[5]}]}`,
	`{"id":"\u00e9\n","inputs":[{"name":"i","shape":[1],"datatype":"FP64","data":[5]}]}`,
	"{\"id\":\"\xff\",\"inputs\":[{\"name\":\"i\",\"shape\":[1],\"datatype\":\"FP64\",\"data\":[5]}]}",
	` {"inputs":[{"name":"i","shape":[1],"datatype":"FP16","data":[ 5 ]}]} ` + "\n",
	`{"inputs":[{"name":"i","shape":[1],"datatype":"FP16","data":[5]}]}{}`,
	`{"parameters":{"priority":null},"inputs":[{"name":"i","shape":[1],"datatype":"FP16","data":[5]}]}`,
	`{"parameters":{"priority":2},"inputs":[{"name":"i","shape":[1],"datatype":"FP16","data":[5]},{"name":"i","shape":[1],"datatype":"FP16","data":[5]}]}`,
}

// FuzzFastDecode checks the fast path against encoding/json: whatever the
// fast path accepts, the slow path accepts too and decodes the same.
func FuzzFastDecode(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	info := ModelInfo{Name: "any", DefaultClass: BE}
	prio := PriorityConfig{Levels: 3, HPMax: 1}
	f.Fuzz(func(t *testing.T, body []byte) {
		rj, vals, ok := fastDecode(body)
		if !ok {
			return
		}
		fast, fid, fclass, ferr := buildInfer(rj, vals, info, prio)
		slow, sid, sclass, serr := parseInferSlow(body, info, prio)
		if ferr != nil {
			return // parseInfer takes the slow path then
		}
		if serr != nil {
			t.Fatalf("fast path accepted what encoding/json refuses (%v): %q", serr, body)
		}
		if fid != sid || fclass != sclass || !reflect.DeepEqual(fast, slow) {
			t.Fatalf("fast and slow paths differ on %q:\nfast %+v\nslow %+v", body, fast, slow)
		}
	})
}

// TestFastPathTaken: the usual request takes the fast path, and the seeds
// agree with the slow path (the fuzz target's seed corpus runs in go test
// too; this names the ones that must be fast).
func TestFastPathTaken(t *testing.T) {
	for _, body := range []string{goodInfer, fastSeeds[1], fastSeeds[2], benchBody(64)} {
		rj, vals, ok := fastDecode([]byte(body))
		if !ok {
			t.Errorf("fast path declined %.80s", body)
			continue
		}
		if _, _, _, err := buildInfer(rj, vals, ModelInfo{Name: "m"}, PriorityConfig{Levels: 2, HPMax: 1}); err != nil {
			t.Errorf("fast build of %.80s: %v", body, err)
		}
	}
	for _, body := range []string{fastSeeds[13], fastSeeds[14], fastSeeds[15], fastSeeds[18]} {
		if _, _, ok := fastDecode([]byte(body)); ok {
			t.Errorf("fast path accepted %q, which it must leave to encoding/json", body)
		}
	}
}
