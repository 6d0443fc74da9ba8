package bench

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzReadTrace: never panics; anything accepted is sorted, non-negative
// and non-empty.
func FuzzReadTrace(f *testing.F) {
	for _, s := range []string{"0\n1ms\n", "# c\n5\n", "", "1e309\n", "-1\n", "1\n0\n", "NaN", "2h\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := ReadTrace(strings.NewReader(s))
		if err != nil {
			return
		}
		if len(ts) == 0 {
			t.Fatal("accepted an empty trace")
		}
		for i, d := range ts {
			if d < 0 || (i > 0 && d < ts[i-1]) {
				t.Fatalf("accepted bad times %v", ts)
			}
		}
	})
}

// FuzzReadReport: never panics; an accepted report re-encodes and parses
// back to the same policy and workload.
func FuzzReadReport(f *testing.F) {
	var buf bytes.Buffer
	if err := WriteReport(&buf, sampleReport()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.String())
	f.Add(`{"apiVersion":"atoll/bench/v1","policy":"x"}`)
	f.Add(`{`)
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ReadReport(strings.NewReader(s))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := WriteReport(&out, r); err != nil {
			return // e.g. a NaN smuggled in cannot be encoded; not a crash
		}
		back, err := ReadReport(&out)
		if err != nil {
			t.Fatalf("re-encoded report does not parse: %v\n%s", err, out.String())
		}
		if back.Policy != r.Policy || back.Workload != r.Workload {
			t.Fatal("round trip changed the report")
		}
	})
}
