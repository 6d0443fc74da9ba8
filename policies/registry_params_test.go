package policies

import (
	"errors"
	"testing"
	"time"

	"atoll/orion"
)

func TestByNameParameters(t *testing.T) {
	p, err := ByName("atoll:hp-window=16,plain-bound=50us,padding=true,preempt=true,reserve=24")
	if err != nil {
		t.Fatal(err)
	}
	a := p.(*Atoll)
	if a.HPWindow != 16 || a.PlainBound != 50*time.Microsecond || !a.Padding || !a.Preempt || a.Admission || a.Reserve != 24 {
		t.Errorf("parameters not applied: %+v", a)
	}
	for params, want := range map[string][2]bool{ // Admission, Confined
		"atoll":                    {false, false},
		"atoll:admission=confined": {false, true},
		"atoll:admission=true":     {true, false},
		"atoll:admission=confined,admission=true": {true, false},
		"atoll:admission=true,admission=confined": {false, true},
		"atoll:admission=true,admission=false":    {false, false},
	} {
		p, err := ByName(params)
		if err != nil {
			t.Fatalf("%s: %v", params, err)
		}
		if a := p.(*Atoll); a.Admission != want[0] || a.Confined != want[1] {
			t.Errorf("%s: Admission %v Confined %v, want %v", params, a.Admission, a.Confined, want)
		}
	}
	if p, err := ByName("atoll:split=true,reserve=68"); err != nil || !p.(*Atoll).Split || p.(*Atoll).Reserve != 68 {
		t.Errorf("atoll:split=true,reserve=68: %+v, %v", p, err)
	}
	if p, err := ByName("orion:chunks=true"); err != nil || !p.(*orion.Policy).Chunks {
		t.Errorf("orion:chunks=true: %+v, %v", p, err)
	}
	for params, want := range map[string]time.Duration{"atoll:be-queue=50us": 50 * time.Microsecond, "atoll:be-queue=off": -1} {
		if p, err := ByName(params); err != nil || p.(*Atoll).BEQueue != want {
			t.Errorf("%s: %+v, %v; want BEQueue %v", params, p, err, want)
		}
	}
	for _, bad := range []string{"atoll:split=maybe", "atoll:be-queue=0s", "atoll:be-queue=-5us", "atoll:be-queue=soon", "atoll:hp-window", "atoll:window=3", "atoll:hp-window=-1", "atoll:padding=maybe", "atoll:admission=maybe", "atoll:reserve=-8", "atoll:reserve=x", "orion:hp-window=3", "orion:chunks=maybe", "reef:chunks=true"} {
		if _, err := ByName(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: %v, want ErrConfig", bad, err)
		}
	}
}

func TestSplitList(t *testing.T) {
	got := SplitList("dedicated,atoll:split=true,reserve=100,orion,atoll:resume-after=1us,reserve=x=y")
	want := []string{"dedicated", "atoll:split=true,reserve=100", "orion", "atoll:resume-after=1us,reserve=x=y"}
	if len(got) != len(want) {
		t.Fatalf("SplitList: %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("SplitList[%d] = %q, want %q", i, got[i], want[i])
		}
	}
	if got := SplitList("reserve=8,atoll"); len(got) != 2 || got[0] != "reserve=8" {
		t.Errorf("a leading parameter has no policy to join: %q", got)
	}
}
