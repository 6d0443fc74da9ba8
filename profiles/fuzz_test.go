package profiles_test

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"

	"atoll/profiles"
)

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o644) }

// FuzzParse: Parse never panics, and anything it accepts writes out and
// parses back to an equal profile, written identically.
func FuzzParse(f *testing.F) {
	text := baseText(f)
	f.Add(text)
	f.Add(strings.Replace(text, `"durationUs": 7.25`, `"durationUs": -3`, 1))
	f.Add(strings.Replace(text, `"registers": 97`, `"registers": 97, "registers": 98`, 1))
	f.Add(`{"apiVersion":"atoll/v1","gpu":"H200","model":"m","batch":1,"phase":"training","source":"ncu","kernels":[{"name":"a\u00e9\"","kernel":"k","grid":[1,1,1],"block":[1,1,1],"registers":0,"sharedMem":0,"durationUs":1e-300,"flops":0,"bytes":-0,"computePct":100,"memoryPct":0,"class":"memory","smsNeeded":132,"notes":null}]}`)
	f.Add(`{"apiVersion":"atoll/v1","gpu":"A100-SXM","model":"x","batch":7,"phase":"inference","source":"estimated","notes":{"":"", "k":"v"},"kernels":[]}`)
	f.Add(``)
	f.Add(`[`)
	f.Add(`{"kernels":[{"grid":[1,2,3,4]}]}`)
	// Small committed profiles.
	if data, err := os.ReadFile("H100-SXM/vgg19-bs1.json"); err == nil {
		f.Add(string(data))
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := profiles.Parse(strings.NewReader(in))
		if err != nil {
			if p != nil {
				t.Fatal("Parse returned a profile with an error")
			}
			return
		}
		var first bytes.Buffer
		if err := profiles.Write(&first, p); err != nil {
			t.Fatalf("Write of an accepted profile: %v", err)
		}
		q, err := profiles.Parse(bytes.NewReader(first.Bytes()))
		if err != nil {
			t.Fatalf("re-parse: %v\n%s", err, first.String())
		}
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("round trip differs:\n%+v\n%+v", p, q)
		}
		var second bytes.Buffer
		if err := profiles.Write(&second, q); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first.Bytes(), second.Bytes()) {
			t.Fatalf("Write is not stable")
		}
	})
}
