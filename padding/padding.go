package padding

import (
	"sort"
	"time"

	"atoll/gpu"
	"atoll/profiles"
	"atoll/sched"
)

// Choice is the selector's answer.
type Choice struct {
	Index   int           // index of the chosen candidate
	SMs     int           // SM share the BE body gets
	Blocks  int           // BE worker blocks in the padded launch
	Latency time.Duration // the BE kernel's estimated latency at that share
}

// Share is the SM share a BE body gets beside hp: the SMs hp does not need.
func Share(spec gpu.Spec, hp *profiles.Kernel) int {
	return spec.SMs - sched.SMsNeeded(spec, hp)
}

// LatencyAt estimates k's latency when confined to sms SMs, from its
// profile's scaling points: linear interpolation between points, the
// largest point's duration beyond it, and below the smallest point that
// point's duration scaled by pointSMs/sms. Without points the
// kernel is assumed to scale linearly below the SMs it needs:
// solo × max(1, need/sms). sms < 1 yields a very large latency.
func LatencyAt(spec gpu.Spec, k *profiles.Kernel, sms int) time.Duration {
	const never = time.Duration(1<<62 - 1)
	if sms < 1 {
		return never
	}
	solo := k.Duration()
	need := sched.SMsNeeded(spec, k)
	pts := validPoints(k.Scaling)
	if len(pts) == 0 {
		if sms >= need {
			return solo
		}
		return time.Duration(float64(solo) * float64(need) / float64(sms))
	}
	us := func(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }
	first, last := pts[0], pts[len(pts)-1]
	switch {
	case sms < first.SMs:
		return us(first.DurationUs * float64(first.SMs) / float64(sms))
	case sms >= last.SMs:
		return us(last.DurationUs)
	}
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		if sms <= b.SMs {
			f := float64(sms-a.SMs) / float64(b.SMs-a.SMs)
			return us(a.DurationUs + f*(b.DurationUs-a.DurationUs))
		}
	}
	return us(last.DurationUs)
}

// validPoints returns the points with positive SMs and durations, sorted by
// SMs, keeping the first of equal SM counts.
func validPoints(in []profiles.Point) []profiles.Point {
	var pts []profiles.Point
	for _, p := range in {
		if p.SMs > 0 && p.DurationUs > 0 {
			pts = append(pts, p)
		}
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].SMs < pts[j].SMs })
	out := pts[:0]
	for i, p := range pts {
		if i > 0 && p.SMs == out[len(out)-1].SMs {
			continue
		}
		out = append(out, p)
	}
	return out
}

// Select picks, among cands (nil entries are skipped), the BE kernel to pad
// hp with: the one whose latency at the SM share left by hp is no longer
// than hp's solo latency, the longest such (it fills the most of the HP
// kernel's time); ties go to the lowest index. ok is false when hp leaves
// no SMs or nothing fits. Blocks is the BE body's worker blocks: the share
// times the blocks of it that fit per SM, at most its logical blocks.
func Select(spec gpu.Spec, hp *profiles.Kernel, cands []*profiles.Kernel) (c Choice, ok bool) {
	share := Share(spec, hp)
	if share < 1 {
		return Choice{}, false
	}
	limit := hp.Duration()
	for i, k := range cands {
		if k == nil {
			continue
		}
		lat := LatencyAt(spec, k, share)
		if lat > limit || (ok && lat <= c.Latency) {
			continue
		}
		c, ok = Choice{Index: i, SMs: share, Latency: lat}, true
	}
	if ok {
		k := cands[c.Index]
		c.Blocks = max(1, min(share*sched.BlocksPerSM(spec, k), k.GridDim().Count()))
	}
	return c, ok
}

// Try pads c's next kernel with the best-fitting head kernel among the BE
// clients that may pad it now (State.CanPad) and that keep passes (nil:
// all). It reports whether a padded launch was made.
func Try(st *sched.State, c *sched.HPClient, keep func(hp, be *profiles.Kernel) bool) bool {
	hk, _ := c.Next()
	if hk == nil {
		return false
	}
	be := st.BE()
	cands := make([]*profiles.Kernel, len(be))
	any := false
	for i, b := range be {
		if !st.CanPad(c, b) {
			continue
		}
		if k, _ := b.Head(); keep == nil || keep(hk, k) {
			cands[i], any = k, true
		}
	}
	if !any {
		return false
	}
	ch, ok := Select(st.Spec(), hk, cands)
	if !ok {
		return false
	}
	_, ok = st.PadHP(c, be[ch.Index], ch.Blocks)
	return ok
}
