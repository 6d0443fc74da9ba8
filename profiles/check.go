package profiles

import (
	"fmt"
	"strconv"
	"strings"

	"atoll/gpu"
	"atoll/kernels"
)

// Check refuses a profile that does not describe the launches it is about
// to be used for: a profile made for another GPU, or whose kernels differ
// from ops (the model's launches, in order) in count, kernel function,
// grid, block or — where the profile records it — shape. The error is a
// *MismatchError (wrapping ErrMismatch) naming the first difference, or an
// *Error when the profile itself is invalid. Orion matched profile rows to
// launches by position alone, so a stale profile hung its scheduler; atoll
// checks once, up front, instead.
func Check(p *Profile, ops []kernels.Op, spec gpu.Spec) error {
	if err := p.Validate(); err != nil {
		return err
	}
	mismatch := func(i int, field, want, got string) error {
		e := &MismatchError{Model: p.Model, GPU: p.GPU, Batch: p.Batch, Kernel: i, Field: field, Want: want, Got: got}
		if i >= 0 {
			e.Name = p.Kernels[i].Name
		}
		return e
	}
	if !strings.EqualFold(p.GPU, spec.Name) {
		return mismatch(-1, "gpu", strconv.Quote(spec.Name), strconv.Quote(p.GPU))
	}
	n := min(len(ops), len(p.Kernels))
	for i := range n {
		op, k := ops[i], &p.Kernels[i]
		if op == nil {
			return fmt.Errorf("%w: op %d is nil", ErrMismatch, i)
		}
		if op.Kernel() != k.Kernel {
			return mismatch(i, "kernel", strconv.Quote(op.Kernel()), strconv.Quote(k.Kernel))
		}
		g := op.Geometry()
		if want := dims(g.Grid); want != k.Grid {
			return mismatch(i, "grid", fmtDims(want), fmtDims(k.Grid))
		}
		if want := dims(g.Block); want != k.Block {
			return mismatch(i, "block", fmtDims(want), fmtDims(k.Block))
		}
		if k.Shape != "" && k.Shape != op.Shape() {
			return mismatch(i, "shape", strconv.Quote(op.Shape()), strconv.Quote(k.Shape))
		}
	}
	if len(ops) != len(p.Kernels) {
		return mismatch(-1, "kernels", fmt.Sprintf("%d launches", len(ops)), fmt.Sprintf("%d kernels", len(p.Kernels)))
	}
	return nil
}

// dims is a Dim3 as a profile stores it (zero Y or Z meaning 1).
func dims(d gpu.Dim3) [3]int {
	return [3]int{d.X, max(d.Y, 1), max(d.Z, 1)}
}

func fmtDims(d [3]int) string { return fmt.Sprintf("%dx%dx%d", d[0], d[1], d[2]) }
