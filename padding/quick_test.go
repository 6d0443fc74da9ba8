package padding

import (
	"math/rand"
	"reflect"
	"sort"
	"testing"
	"testing/quick"
	"time"

	"atoll/gpu"
	"atoll/profiles"
	"atoll/sched"
)

// randKernel makes a kernel with random geometry, duration and (sometimes)
// scaling points.
func randKernel(r *rand.Rand) *profiles.Kernel {
	k := &profiles.Kernel{
		Name:       "k",
		Grid:       [3]int{1 + r.Intn(4000), 1, 1},
		Block:      [3]int{32 << r.Intn(6), 1, 1},
		Registers:  16 * (1 + r.Intn(8)),
		DurationUs: 1 + float64(r.Intn(400)),
		Class:      []string{profiles.ClassCompute, profiles.ClassMemory, profiles.ClassUnknown}[r.Intn(3)],
	}
	if r.Intn(3) == 0 {
		k.SMsNeeded = 1 + r.Intn(132)
	}
	for n := r.Intn(4); n > 0; n-- {
		k.Scaling = append(k.Scaling, profiles.Point{SMs: 1 + r.Intn(132), DurationUs: 1 + float64(r.Intn(800))})
	}
	return k
}

type selectCase struct {
	HP    *profiles.Kernel
	Cands []*profiles.Kernel
}

func (selectCase) Generate(r *rand.Rand, _ int) reflect.Value {
	c := selectCase{HP: randKernel(r)}
	for n := r.Intn(6); n > 0; n-- {
		if r.Intn(5) == 0 {
			c.Cands = append(c.Cands, nil)
			continue
		}
		c.Cands = append(c.Cands, randKernel(r))
	}
	return reflect.ValueOf(c)
}

// naiveSelect is the rule spelled out: list every candidate that fits,
// sort by latency descending then index ascending, take the first.
func naiveSelect(spec gpu.Spec, hp *profiles.Kernel, cands []*profiles.Kernel) (Choice, bool) {
	share := spec.SMs - sched.SMsNeeded(spec, hp)
	if share < 1 {
		return Choice{}, false
	}
	var fits []Choice
	for i, k := range cands {
		if k == nil {
			continue
		}
		if lat := LatencyAt(spec, k, share); lat <= hp.Duration() {
			fits = append(fits, Choice{Index: i, SMs: share, Latency: lat})
		}
	}
	if len(fits) == 0 {
		return Choice{}, false
	}
	sort.SliceStable(fits, func(a, b int) bool {
		if fits[a].Latency != fits[b].Latency {
			return fits[a].Latency > fits[b].Latency
		}
		return fits[a].Index < fits[b].Index
	})
	c := fits[0]
	k := cands[c.Index]
	blocks := share * sched.BlocksPerSM(spec, k)
	if g := k.GridDim().Count(); blocks > g {
		blocks = g
	}
	c.Blocks = blocks
	return c, true
}

func TestSelectMatchesNaive(t *testing.T) {
	spec := gpu.H100SXM
	f := func(c selectCase) bool {
		got, gok := Select(spec, c.HP, c.Cands)
		want, wok := naiveSelect(spec, c.HP, c.Cands)
		if gok != wok || got != want {
			t.Logf("hp %+v cands %d: got %+v %v, want %+v %v", *c.HP, len(c.Cands), got, gok, want, wok)
			return false
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 50000}); err != nil {
		t.Fatal(err)
	}
}

// LatencyAt passes through every scaling point and stays between its
// neighbours' durations in between.
func TestLatencyAtInterpolates(t *testing.T) {
	spec := gpu.H100SXM
	f := func(seed int64) bool {
		r := rand.New(rand.NewSource(seed))
		k := randKernel(r)
		pts := validPoints(k.Scaling)
		for _, p := range pts {
			if got := LatencyAt(spec, k, p.SMs); got != time.Duration(p.DurationUs*float64(time.Microsecond)) {
				t.Logf("at point %+v got %v", p, got)
				return false
			}
		}
		for i := 1; i < len(pts); i++ {
			a, b := pts[i-1], pts[i]
			for s := a.SMs; s <= b.SMs; s++ {
				got := float64(LatencyAt(spec, k, s)) / float64(time.Microsecond)
				lo, hi := min(a.DurationUs, b.DurationUs), max(a.DurationUs, b.DurationUs)
				if got < lo-1e-3 || got > hi+1e-3 {
					t.Logf("at %d SMs got %v, outside [%v, %v]", s, got, lo, hi)
					return false
				}
			}
		}
		return LatencyAt(spec, k, 0) > time.Hour
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

func TestLatencyAtWithoutPoints(t *testing.T) {
	spec := gpu.H100SXM
	k := &profiles.Kernel{Grid: [3]int{1320, 1, 1}, Block: [3]int{256, 1, 1}, DurationUs: 100, SMsNeeded: 132}
	if got := LatencyAt(spec, k, 132); got != 100*time.Microsecond {
		t.Errorf("at all SMs: %v, want the solo 100µs", got)
	}
	if got := LatencyAt(spec, k, 66); got != 200*time.Microsecond {
		t.Errorf("at half the SMs: %v, want 200µs (linear)", got)
	}
}

func TestSelectEdges(t *testing.T) {
	spec := gpu.H100SXM
	full := &profiles.Kernel{Grid: [3]int{1056, 1, 1}, Block: [3]int{256, 1, 1}, DurationUs: 50, SMsNeeded: 132}
	small := &profiles.Kernel{Grid: [3]int{66, 1, 1}, Block: [3]int{256, 1, 1}, DurationUs: 10, SMsNeeded: 9}
	if _, ok := Select(spec, full, []*profiles.Kernel{small}); ok {
		t.Error("an HP kernel needing every SM left room for padding")
	}
	hp := &profiles.Kernel{Grid: [3]int{132, 1, 1}, Block: [3]int{256, 1, 1}, DurationUs: 50, SMsNeeded: 17}
	long := &profiles.Kernel{Grid: [3]int{1056, 1, 1}, Block: [3]int{256, 1, 1}, DurationUs: 80, SMsNeeded: 132}
	c, ok := Select(spec, hp, []*profiles.Kernel{long, small, nil})
	if !ok || c.Index != 1 {
		t.Fatalf("got %+v %v, want the small kernel (index 1)", c, ok)
	}
	if c.Blocks != 66 || c.SMs != 115 {
		t.Errorf("blocks %d on %d SMs, want all 66 logical blocks on 115 SMs", c.Blocks, c.SMs)
	}
}
