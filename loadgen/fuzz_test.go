package loadgen

import (
	"errors"
	"math"
	"testing"
)

// ParseMix never panics; what it accepts has unique names, priorities from
// 1 and shares that sum to 1; what it refuses wraps ErrConfig.
func FuzzParseMix(f *testing.F) {
	for _, s := range [][2]string{{"hp=0.8,be=0.2", ""}, {"x=1", "x=3"}, {"hp=1e308,be=1e308", ""}, {"hp=,=", "hp=-1"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, mix, prios string) {
		cs, err := ParseMix(mix, prios)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error without ErrConfig: %v", err)
			}
			return
		}
		sum := 0.0
		seen := map[string]bool{}
		for _, c := range cs {
			if seen[c.Name] || c.Priority < 1 || !(c.Weight > 0) {
				t.Fatalf("bad class %+v from %q %q", c, mix, prios)
			}
			seen[c.Name] = true
			sum += c.Weight
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Fatalf("shares sum to %v", sum)
		}
	})
}
