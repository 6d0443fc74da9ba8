package profiler_test

import (
	"compress/gzip"
	"errors"
	"os"
	"strings"
	"testing"

	"atoll/profiler"
	"atoll/profiles"
)

// vendorPass reads a committed Nsight Compute CSV of one pass
// (results/vendor-launches-h200) and the built-in H200 profile of the
// same model and batch, its launches cleared.
func vendorPass(t *testing.T, name string) (*profiles.Profile, []profiler.NCULaunch) {
	t.Helper()
	f, err := os.Open("../results/vendor-launches-h200/" + name + ".csv.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := profiler.ParseNCU(z)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profiles.Load("../profiles/H200/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.Kernels {
		p.Kernels[i].Launches = nil
	}
	return p, ls
}

// Every vendor call of a pass gets its own launches: one product each,
// the gathers before it and the split-K reductions after it, with the
// geometry ncu saw (less the driver's reserved shared memory) and shares
// that add up to one; atoll's own kernels get none, and the profile is
// still valid.
func TestApplyLaunches(t *testing.T) {
	for _, c := range []struct {
		name          string
		calls, launch int
	}{{"vgg19-bs1", 19, 43}, {"resnet50-bs1", 54, 78}, {"bert-base-bs1", 48, 60}, {"resnet50-train-bs32", 171, 245}} {
		p, ls := vendorPass(t, c.name)
		if err := profiler.ApplyLaunches(p, ls, c.name+".csv"); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		calls, n := 0, 0
		for _, k := range p.Kernels {
			if !k.HasTag(profiles.TagBLAS) {
				if len(k.Launches) > 0 {
					t.Errorf("%s %s: atoll's own kernel got launches %v", c.name, k.Name, k.Launches)
				}
				continue
			}
			calls++
			n += len(k.Launches)
			products, sum := 0, 0.0
			for _, l := range k.Launches {
				sum += l.Share
				if profiler.LaunchRole(l.Function) == profiler.RoleProduct {
					products++
					if l.Block != 384 || l.SharedMem > 227<<10 || l.SharedMem < 100<<10 || strings.Contains(l.Function, "(") {
						t.Errorf("%s %s: product %+v: want cuBLASLt's 384-thread whole-SM blocks, shared memory without the driver's 1 KiB", c.name, k.Name, l)
					}
				}
			}
			if products != 1 || sum < 0.99 || sum > 1.01 {
				t.Errorf("%s %s: %d products, shares add up to %v: want one, 1", c.name, k.Name, products, sum)
			}
			first, last := k.Launches[0].Function, k.Launches[len(k.Launches)-1].Function
			if k.HasTag(profiles.TagBLASConv) && profiler.LaunchRole(first) != profiler.RoleBefore && !strings.HasPrefix(last, "atoll_") {
				t.Errorf("%s %s: a vendor convolution's launches run %s to %s, want its gather first or its scatter last", c.name, k.Name, first, last)
			}
		}
		if calls != c.calls || n != c.launch {
			t.Errorf("%s: %d calls, %d launches; want %d, %d", c.name, calls, n, c.calls, c.launch)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !strings.Contains(p.Notes["launches"], c.name+".csv") {
			t.Errorf("%s: notes[launches] = %q, want the CSV named", c.name, p.Notes["launches"])
		}
	}
}

// A CSV that is not one pass of the profile's model as the profile ran it
// is refused with the line to look at, and the profile is left as it was.
func TestApplyLaunchesRefuses(t *testing.T) {
	p, ls := vendorPass(t, "vgg19-bs1")
	untagged, _ := vendorPass(t, "vgg19-bs1")
	for i := range untagged.Kernels {
		untagged.Kernels[i].Tags = nil
	}
	other, _ := vendorPass(t, "resnet50-bs1")
	var own profiler.NCULaunch // a launch of atoll's own kernel (a pooling)
	for _, l := range ls {
		if profiler.LaunchRole(l.Func()) == profiler.RoleOwn {
			own = l
			break
		}
	}
	var reduce, gather profiler.NCULaunch // a split-K reduction and a gather
	for _, l := range ls {
		switch r := profiler.LaunchRole(l.Func()); {
		case r == profiler.RoleAfter && reduce.Kernel == "":
			reduce = l
		case r == profiler.RoleBefore && gather.Kernel == "":
			gather = l
		}
	}
	helperFirst := append([]profiler.NCULaunch{ls[0], reduce}, ls[1:]...) // after features.0's first gather
	gatherLast := append(append([]profiler.NCULaunch(nil), ls...), gather)
	noGrid := append([]profiler.NCULaunch(nil), ls...)
	noGrid[3].Has = map[string]bool{profiler.MetricDuration: true}
	for _, c := range []struct {
		name string
		p    *profiles.Profile
		ls   []profiler.NCULaunch
		want string
	}{
		{"cut short", p, ls[:len(ls)-3], "not one pass"},
		{"two passes", p, append(append([]profiler.NCULaunch(nil), ls...), ls...), "not one pass"},
		{"a pass and an own kernel", p, append(append([]profiler.NCULaunch(nil), ls...), own), "more than one pass"},
		{"without cuBLASLt", untagged, ls, "measured without cuBLASLt"},
		{"another model", other, ls, "not one pass"},
		{"a helper before any product", p, helperFirst, "none precedes it"},
		{"a gather without its product", p, gatherLast, "does not follow"},
		{"no geometry", p, noGrid, profiler.MetricGrid},
	} {
		before := len(c.p.Kernels[0].Launches)
		err := profiler.ApplyLaunches(c.p, c.ls, "x.csv")
		if !errors.Is(err, profiler.ErrNCU) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrNCU saying %q", c.name, err, c.want)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
		if len(c.p.Kernels[0].Launches) != before {
			t.Errorf("%s: the profile changed", c.name)
		}
	}
}
