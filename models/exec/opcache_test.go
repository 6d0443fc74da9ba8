package exec_test

import (
	"reflect"
	"testing"

	"atoll/models"
)

// TestZooOpsAreCacheable: kernels.Library caches each op's launch spec in a
// map keyed by the op value, so every op the zoo launches must be a
// comparable value (no slices, maps or funcs inside, even behind an
// interface) — else it is rebuilt on every launch (and a non-comparable
// value behind an interface field would panic as a map key).
func TestZooOpsAreCacheable(t *testing.T) {
	for _, name := range models.Names() {
		m, _ := models.Get(name)
		layers, err := m.Ops(1)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			if !reflect.ValueOf(l.Op).Comparable() {
				t.Errorf("%s: layer %s: op %T is not comparable", name, l.Name, l.Op)
			}
		}
	}
}
