package sim

import (
	"math"
	"slices"
)

// SM classes: sets of SMs in the same state, split when blocks are placed
// on some of them (or at a partition's first SM) and merged back when
// their states meet again, so that the work per event stays small.

func (d *Device) newGroup() *group {
	if n := len(d.gpool); n > 0 {
		g := d.gpool[n-1]
		d.gpool = d.gpool[:n-1]
		return g
	}
	return new(group)
}

func (d *Device) newClass() *smClass {
	if n := len(d.cpool); n > 0 {
		c := d.cpool[n-1]
		d.cpool = d.cpool[:n-1]
		c.gone = false
		return c
	}
	return &smClass{}
}

// splitLow moves the n lowest SMs of c into a new class with copies of c's
// groups, and returns it. The caller restores the class order.
func (d *Device) splitLow(m *machine, c *smClass, n int) *smClass {
	nc := d.newClass()
	nc.ids = append(nc.ids[:0], c.ids[:n]...)
	copy(c.ids, c.ids[n:])
	c.ids = c.ids[:len(c.ids)-n]
	nc.free, nc.csum = c.free, c.csum
	for _, g := range c.groups {
		ng := d.newGroup()
		*ng = *g
		ng.cls, ng.mi = nc, len(m.groups)
		m.groups = append(m.groups, ng)
		nc.groups = append(nc.groups, ng)
	}
	m.classes = append(m.classes, nc)
	return nc
}

// splitAt splits every class holding both SMs below lo and SMs from lo on,
// so that each class lies wholly on one side of lo (an SM partition's first
// SM).
func (d *Device) splitAt(m *machine, lo int16) {
	split := false
	for i, n := 0, len(m.classes); i < n; i++ {
		c := m.classes[i]
		if c.ids[0] >= lo || c.ids[len(c.ids)-1] < lo {
			continue
		}
		k := 0
		for c.ids[k] < lo {
			k++
		}
		d.splitLow(m, c, k)
		split = true
	}
	if split {
		sortClasses(m)
	}
}

// sortClasses restores ascending ids[0] order (insertion sort: the order is
// nearly right).
func sortClasses(m *machine) {
	cs := m.classes
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].ids[0] < cs[j-1].ids[0]; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}

// mergeTouched merges each touched class with any class now in the same
// state, and (with Coalesce) groups of one part within a class that are
// nearly in step, so the number of classes and groups stays small.
func (d *Device) mergeTouched(m *machine) {
	tol := max(float64(d.cfg.Coalesce), eps)
	for _, c := range d.touched {
		if c.gone {
			continue
		}
		if d.cfg.Coalesce > 0 {
			d.coalesceGroups(m, c, tol)
		}
		for i := 0; i < len(m.classes); i++ {
			o := m.classes[i]
			if o == c || !sameState(c, o, tol) {
				continue
			}
			d.mergeClass(m, c, o)
			i--
		}
	}
	d.touched = d.touched[:0] // stale pointers name pooled classes only
}

func sameState(a, b *smClass, tol float64) bool {
	if a.free != b.free || len(a.groups) != len(b.groups) {
		return false
	}
	for i, g := range a.groups {
		h := b.groups[i]
		if g.part != h.part || g.k != h.k || g.exit != h.exit || math.Abs(g.w-h.w) > tol ||
			g.reading != h.reading || math.Abs(g.wait-h.wait) > tol {
			return false
		}
	}
	return true
}

// mergeClass folds o into c (same state), averaging remaining work by SM
// count so the total work is kept.
func (d *Device) mergeClass(m *machine, c, o *smClass) {
	nc, no := float64(len(c.ids)), float64(len(o.ids))
	for i, g := range c.groups {
		h := o.groups[i]
		if g.w != h.w {
			g.w = (nc*g.w + no*h.w) / (nc + no)
		}
		if g.wait != h.wait {
			g.wait = (nc*g.wait + no*h.wait) / (nc + no)
		}
	}
	for len(o.groups) > 0 {
		d.removeGroup(m, o.groups[0])
	}
	// Merge the sorted id lists.
	ids := append(c.ids, o.ids...)
	d.mergeBuf = mergeSorted(ids, len(c.ids), d.mergeBuf)
	c.ids = ids
	o.ids, o.gone = o.ids[:0], true
	if i := slices.Index(m.classes, o); i >= 0 {
		m.classes = slices.Delete(m.classes, i, i+1) // clears the freed slot
	}
	sortClasses(m)
	d.cpool = append(d.cpool, o)
	m.dirty = true
}

// mergeSorted sorts ids whose halves [0,n) and [n,len) are each sorted,
// in one linear merge (the left half copied into buf, which it returns
// for reuse); halves already in order are left alone.
func mergeSorted(ids []int16, n int, buf []int16) []int16 {
	if n == 0 || n == len(ids) || ids[n-1] <= ids[n] {
		return buf
	}
	buf = append(buf[:0], ids[:n]...)
	i, j, k := 0, n, 0
	for i < len(buf) && j < len(ids) {
		if ids[j] < buf[i] {
			ids[k], j = ids[j], j+1
		} else {
			ids[k], i = buf[i], i+1
		}
		k++
	}
	copy(ids[k:], buf[i:]) // what is left of the right half is in place
	return buf
}

// coalesceGroups merges groups of one part in c whose remaining work differs
// by at most tol, averaging by block count.
func (d *Device) coalesceGroups(m *machine, c *smClass, tol float64) {
	for i := 0; i < len(c.groups); i++ {
		g := c.groups[i]
		for j := i + 1; j < len(c.groups); j++ {
			h := c.groups[j]
			if h.part != g.part || h.exit != g.exit || math.Abs(g.w-h.w) > tol ||
				g.reading != h.reading || math.Abs(g.wait-h.wait) > tol {
				continue
			}
			g.w = (float64(g.k)*g.w + float64(h.k)*h.w) / float64(g.k+h.k)
			g.wait = (float64(g.k)*g.wait + float64(h.k)*h.wait) / float64(g.k+h.k)
			g.k += h.k
			d.removeGroup(m, h)
			j--
			m.dirty = true
		}
	}
}
