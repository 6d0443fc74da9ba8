package policies_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
	"atoll/policies"
	"atoll/profiles"
)

func TestNamesOrder(t *testing.T) {
	want := []string{"dedicated", "timeslice", "streams", "priority", "orion", "reef", "atoll"}
	if got := policies.Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, n := range want {
		p, err := policies.ByName(n)
		if err != nil {
			t.Fatal(err)
		}
		if p.Name() != n {
			t.Errorf("ByName(%q).Name() = %q", n, p.Name())
		}
		q, _ := policies.ByName(n)
		if p == q {
			t.Errorf("ByName(%q) returned the same value twice; policies keep per-run state", n)
		}
	}
	if p, err := policies.ByName(" Atoll "); err != nil || p.Name() != "atoll" {
		t.Errorf("ByName is not case- and space-tolerant: %v", err)
	}
}

func TestByNameUnknown(t *testing.T) {
	_, err := policies.ByName("tgs")
	if !errors.Is(err, policies.ErrUnknown) {
		t.Fatalf("got %v, want ErrUnknown", err)
	}
	for _, n := range policies.Names() {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not list %q", err, n)
		}
	}
}

func TestFormRule(t *testing.T) {
	spec := gpu.H100SXM
	k := func(dur float64, grid int) *profiles.Kernel {
		return &profiles.Kernel{DurationUs: dur, Grid: [3]int{grid, 1, 1}, Block: [3]int{256, 1, 1}}
	}
	for _, c := range []struct {
		k    *profiles.Kernel
		want gpu.Form
	}{
		{k(20, 100000), gpu.Plain},    // short: cheaper to wait for
		{k(31.6, 100000), gpu.Plain},  // at the bound
		{k(500, 1056), gpu.Plain},     // one wave (132 SMs x 8 blocks)
		{k(500, 1057), gpu.Resumable}, // two waves
		{k(40, 5000), gpu.Resumable},
	} {
		if got := policies.Form(spec, c.k, policies.DefaultPlainBound); got != c.want {
			t.Errorf("Form(%vus, grid %d) = %s, want %s", c.k.DurationUs, c.k.Grid[0], got, c.want)
		}
	}
	if got := policies.Form(spec, k(40, 5000), 50*time.Microsecond); got != gpu.Plain {
		t.Errorf("a larger bound should make a 40us kernel plain, got %s", got)
	}
}
