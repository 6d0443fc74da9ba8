// Package scenario holds kernel-level experiments written against
// gpu.Device, so that one experiment runs on the GPU (gpu/cuda) and on the
// simulator (gpu/sim) alike and the two can be compared figure by figure.
// Their kernels only spin (no memory traffic): what they measure is the
// launch path and the block dispatcher, not co-run interference.
package scenario

import (
	"context"
	"fmt"
	"strings"
	"time"

	"atoll/gpu"
)

// Spin is a module with the one kernel the scenarios run: every thread of
// a block spins on the GPU's global timer for its argument's nanoseconds.
var Spin = gpu.ModuleSource{Name: "scenario-spin", CUDA: `
extern "C" __global__ void spin(unsigned long long ns) {
	unsigned long long t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
`}

// Held is what a profile of a kernel would hold beyond the kernel: the
// simulator takes it off a launch's Cost (a GPU ignores Cost).
type Held struct {
	Record time.Duration // its event record, launched on its own (sim.Config.EventCost)
	Turn   time.Duration // the turn to the next kernel (sim.Config.KernelGap)
}

// Shape is the blocks of a spin kernel: Blocks of Threads threads, each
// holding SharedMem bytes of dynamic shared memory it does not use (so
// that the dispatcher places fewer of them on an SM). Blocks 0: as many as
// fit on every SM at once.
type Shape struct{ Blocks, Threads, SharedMem int }

// spinLaunch is a launch of spin: blocks of shape s each spinning d. Its
// Cost says the same as a profile would (one wave: the grid fits the
// device at once).
func spinLaunch(f gpu.Func, s Shape, d time.Duration, h Held) *gpu.Launch {
	l := &gpu.Launch{Name: "spin", Func: f, Grid: gpu.D1(s.Blocks), Block: gpu.D1(s.Threads), SharedMem: s.SharedMem,
		Cost: gpu.Cost{Duration: d + h.Record + h.Turn, GraphDuration: d + h.Turn}}
	l.Args.U64(uint64(d.Nanoseconds()))
	return l
}

// BEGraphsRow is one run of BEGraphsBesideHP.
type BEGraphsRow struct {
	BlockUs int           // BE's blocks spin this long
	Mode    string        // how BE is queued: singles, graphs or events
	Trial   int           //
	HPPass  time.Duration // HP's mean pass
	Ratio   float64       // HPPass over the pass alone
	BEPerMs float64       // BE kernels completed per ms over the passes
}

// BEGraphs is what BEGraphsBesideHP (or WholeSMBesideWaves) measured.
type BEGraphs struct {
	HP, BE Shape         // the kernels' blocks (BE's grid: a wave)
	Alone  time.Duration // HP's mean pass with the GPU to itself
	Rows   []BEGraphsRow
}

// BEGraphsModes are the ways BEGraphsBesideHP queues BE, in its order:
// four launches then an event record; a graph of the four with its event;
// four launches each with an event record.
var BEGraphsModes = []string{"singles", "graphs", "events"}

// BEGraphsBesideHP asks whether a least-priority stream of full-device
// kernels slows a greatest-priority pass more when its kernels are queued
// as graphs than one launch at a time (atoll's scheduler queues BE in
// graphs). BE: one wave of 256-thread spin blocks, as many on every SM as
// fit, each spinning B µs (for each B of blockUs), kept 256 kernels deep
// in groups of four in each of BEGraphsModes. HP: a graph of 20 kernels of
// 32 one-warp blocks spinning 10 µs, sent 300 µs after the previous pass
// completed, timed from a start event recorded before it; 40 passes a run,
// trials runs of every B and mode, interleaved. held is what the
// kernels' costs hold beyond their spin (for the simulator).
func BEGraphsBesideHP(ctx context.Context, dev gpu.Device, blockUs []int, trials int, held Held) (*BEGraphs, error) {
	return beside(ctx, dev, Shape{Blocks: 32, Threads: 32}, Shape{Threads: 256}, BEGraphsModes, blockUs, trials, held)
}

// WholeSMHP is the shape of HP's kernels in WholeSMBesideWaves: 96 blocks
// of 384 threads, one per SM by their 220 KB of shared memory, as
// cuBLASLt's GEMMs hold the whole SM (results/vendor-launches-h200: 384
// threads, 168 registers, 165–233 KB of shared memory).
var WholeSMHP = Shape{Blocks: 96, Threads: 384, SharedMem: 220 << 10}

// WholeSMBE is the shape of BE's blocks beside WholeSMHP: 256 threads and
// 16 KB of shared memory, eight on an SM (by warps), so that an SM takes
// one of HP's blocks only once none of BE's is left on it, and none of
// BE's while HP's is there.
var WholeSMBE = Shape{Threads: 256, SharedMem: 16 << 10}

// WholeSMBesideWaves is BEGraphsBesideHP with HP's kernels shaped as
// cuBLASLt's GEMMs (WholeSMHP) and BE's waves of WholeSMBE blocks queued
// in graphs: how long does a kernel that needs whole SMs wait for a
// stream of BE waves to leave them, on the GPU and on the simulator?
func WholeSMBesideWaves(ctx context.Context, dev gpu.Device, blockUs []int, trials int, held Held) (*BEGraphs, error) {
	return beside(ctx, dev, WholeSMHP, WholeSMBE, []string{"graphs"}, blockUs, trials, held)
}

// beside runs passes of a graph of 20 kernels of hp shape spinning 10 µs
// on the greatest priority, alone and beside least-priority waves of be
// shape spinning each of blockUs queued in each of modes (see
// BEGraphsBesideHP).
func beside(ctx context.Context, dev gpu.Device, hpShape, beShape Shape, modes []string, blockUs []int, trials int, held Held) (*BEGraphs, error) {
	const group, depth, passes, gap = 4, 64, 40, 300 * time.Microsecond
	d, ok := dev.(graphDevice)
	if !ok {
		return nil, fmt.Errorf("scenario: %s does not run graphs", dev.Info().Name)
	}
	in := d.Info()
	mod, err := d.LoadModule(Spin)
	if err != nil {
		return nil, err
	}
	spin, err := mod.Function("spin")
	if err != nil {
		return nil, err
	}
	e := &errs{}
	lo := e.stream(d, in.Priorities.Least)
	hi := e.stream(d, in.Priorities.Greatest)
	start, end := e.event(d), e.event(d)
	hpSteps := make([]gpu.GraphStep, 20)
	for i := range hpSteps {
		hpSteps[i].Launch = spinLaunch(spin, hpShape, 10*time.Microsecond, held)
	}
	hpSteps[len(hpSteps)-1].Event = end
	if e.err != nil {
		return nil, e.err
	}
	hp, err := d.NewGraph(hi, hpSteps)
	if err != nil {
		return nil, err
	}
	defer d.DestroyGraph(hp)
	perSM, _, err := in.Spec.Occupancy(beShape.Threads, 0, beShape.SharedMem)
	if err != nil {
		return nil, err
	}
	beShape.Blocks = in.Spec.SMs * perSM
	be := func(us int) *gpu.Launch {
		return spinLaunch(spin, beShape, time.Duration(us)*time.Microsecond, held)
	}

	// A feed keeps depth groups of BE queued on lo.
	type feed struct {
		evs       []gpu.Event
		head, n   int // oldest group in flight, groups in flight
		completed int
		send      func(slot int) error
	}
	top := func(f *feed) error {
		for f.n > 0 {
			ok, err := d.Query(f.evs[f.head])
			if err != nil || !ok {
				return err
			}
			f.head, f.n, f.completed = (f.head+1)%depth, f.n-1, f.completed+1
		}
		for f.n < depth {
			if err := f.send((f.head + f.n) % depth); err != nil {
				return err
			}
			f.n++
		}
		return nil
	}
	var graphs []gpu.Graph
	defer func() {
		for _, g := range graphs {
			d.DestroyGraph(g)
		}
	}()
	newFeed := func(mode string, us int) (*feed, error) {
		f := &feed{evs: make([]gpu.Event, depth)}
		for i := range f.evs {
			f.evs[i] = e.event(d)
		}
		if e.err != nil {
			return nil, e.err
		}
		switch mode {
		case "singles", "events":
			f.send = func(slot int) error {
				for i := range group {
					if err := d.Launch(lo, be(us)); err != nil {
						return err
					}
					if mode == "events" || i == group-1 {
						if err := d.Record(f.evs[slot], lo); err != nil {
							return err
						}
					}
				}
				return nil
			}
		case "graphs":
			gs := make([]gpu.Graph, depth)
			for slot := range gs {
				steps := make([]gpu.GraphStep, group)
				for i := range steps {
					steps[i].Launch = be(us)
				}
				steps[group-1].Event = f.evs[slot]
				g, err := d.NewGraph(lo, steps)
				if err != nil {
					return nil, err
				}
				gs[slot] = g
				graphs = append(graphs, g)
			}
			f.send = func(slot int) error { return d.LaunchGraph(gs[slot], lo) }
		default:
			return nil, fmt.Errorf("scenario: unknown BE mode %q", mode)
		}
		return f, nil
	}
	// run sends the passes beside f (nil: alone): HP's mean pass and BE's
	// kernels per ms over them.
	run := func(f *feed) (time.Duration, float64, error) {
		busy := func(until time.Duration) error {
			for {
				if f != nil {
					if err := top(f); err != nil {
						return err
					}
				}
				now := d.Now()
				if now >= until {
					return nil
				}
				if err := d.Wait(ctx, min(until, now+2*time.Microsecond)); err != nil {
					return err
				}
			}
		}
		if f != nil {
			if err := busy(d.Now() + 2*time.Millisecond); err != nil {
				return 0, 0, err
			}
		}
		var sum time.Duration
		t0, done0 := d.Now(), 0
		if f != nil {
			done0 = f.completed
		}
		for range passes {
			if err := d.Record(start, hi); err != nil {
				return 0, 0, err
			}
			if err := d.LaunchGraph(hp, hi); err != nil {
				return 0, 0, err
			}
			for {
				ok, err := d.Query(end)
				if err != nil {
					return 0, 0, err
				}
				if ok {
					break
				}
				if err := busy(d.Now() + 2*time.Microsecond); err != nil {
					return 0, 0, err
				}
			}
			a, err := d.Time(start)
			if err != nil {
				return 0, 0, err
			}
			b, err := d.Time(end)
			if err != nil {
				return 0, 0, err
			}
			sum += b - a
			if err := busy(d.Now() + gap); err != nil {
				return 0, 0, err
			}
		}
		rate := 0.0
		if f != nil {
			rate = float64((f.completed-done0)*group) / (float64(d.Now()-t0) / float64(time.Millisecond))
			// Let what is queued drain before the next run.
			for f.n > 0 {
				ok, err := d.Query(f.evs[f.head])
				if err != nil {
					return 0, 0, err
				}
				if ok {
					f.head, f.n = (f.head+1)%depth, f.n-1
				} else if err := d.Wait(ctx, d.Now()+100*time.Microsecond); err != nil {
					return 0, 0, err
				}
			}
		}
		return sum / passes, rate, nil
	}
	alone, _, err := run(nil)
	if err != nil {
		return nil, err
	}
	r := &BEGraphs{Alone: alone, HP: hpShape, BE: beShape}
	for _, us := range blockUs {
		for trial := range trials {
			for _, mode := range modes {
				f, err := newFeed(mode, us)
				if err != nil {
					return nil, err
				}
				pass, rate, err := run(f)
				if err != nil {
					return nil, fmt.Errorf("scenario: BE %d µs, %s: %w", us, mode, err)
				}
				r.Rows = append(r.Rows, BEGraphsRow{BlockUs: us, Mode: mode, Trial: trial, HPPass: pass, Ratio: float64(pass) / float64(alone), BEPerMs: rate})
			}
		}
	}
	return r, nil
}

// Table is r as text: the pass alone, then a line a run.
func (r *BEGraphs) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HP pass alone %v (20 × 10 µs kernels of %d blocks of %d threads, %d B of shared memory each; BE waves of %d blocks of %d threads, %d B)\n",
		r.Alone.Round(100*time.Nanosecond), r.HP.Blocks, r.HP.Threads, r.HP.SharedMem, r.BE.Blocks, r.BE.Threads, r.BE.SharedMem)
	fmt.Fprintf(&b, "%-6s %-8s %-6s %-10s %-7s %s\n", "BE µs", "mode", "trial", "HP pass", "ratio", "BE kernels/ms")
	for _, x := range r.Rows {
		fmt.Fprintf(&b, "%-6d %-8s %-6d %-10v %-7.3f %.1f\n", x.BlockUs, x.Mode, x.Trial, x.HPPass.Round(100*time.Nanosecond), x.Ratio, x.BEPerMs)
	}
	return b.String()
}

// graphDevice is a device that runs graphs.
type graphDevice interface {
	gpu.Device
	gpu.Grapher
}

// errs keeps the first error of a run of calls that make handles.
type errs struct{ err error }

func (e *errs) stream(d gpu.Device, prio int) gpu.Stream {
	if e.err != nil {
		return 0
	}
	s, err := d.NewStream(gpu.StreamOptions{Priority: prio})
	e.err = err
	return s
}

func (e *errs) event(d gpu.Device) gpu.Event {
	if e.err != nil {
		return 0
	}
	ev, err := d.NewEvent()
	e.err = err
	return ev
}
