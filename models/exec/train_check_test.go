package exec_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"atoll/gpu"
	"atoll/gpu/cuda"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
)

// This file holds the per-layer checks of a training step (each layer's
// device outputs against the CPU computed from that layer's device
// inputs), the measure of how sensitive a whole step is to one bf16 ulp
// (the CPU against itself), and the driver of the GPU step tests, which
// TestGPUTrainStep and TestGPUBERTTrainStep use and the simulator tests
// exercise.

// layerErr is one output of one layer against the CPU from the layer's
// device inputs.
type layerErr struct {
	layer, output, kernel string
	err                   float64
}

func (e layerErr) String() string {
	return fmt.Sprintf("%s.%s (%s) %.3g", e.layer, e.output, e.kernel, e.err)
}

// refFn computes op's outputs on the CPU from bufs (every non-output's Host
// filled with the device's values) and compares them with got (the
// device's outputs, in bufs.Outputs order): one relative error per output.
type refFn func(op kernels.Op, bufs kernels.Buffers, got [][]float64) ([]float64, error)

// fullRef compares every output element with kernels.Reference.
func fullRef(op kernels.Op, bufs kernels.Buffers, got [][]float64) ([]float64, error) {
	ref, err := kernels.Reference(op, bufs)
	if err != nil {
		return nil, err
	}
	e := make([]float64, len(got))
	for j := range got {
		e[j] = models.RelErr(got[j], ref[j])
	}
	return e, nil
}

// sampledConv compares n sampled output elements of a convolution —
// forward (no activation or ReLU; bias and residual), data gradient
// (BackwardData) or weight gradient (BackwardFilter, split or not) — with
// sums computed here, so that a full-size layer costs n times one output's
// multiply-adds. Layouts (kernels): X [N][H][W][C], W [R][S][C][OutC],
// Y [N][OH][OW][OutC], the split weight gradient's partials
// [Split][R][S][C][OutC], each over N/Split consecutive images.
func sampledConv(n int) refFn {
	return func(op kernels.Op, bufs kernels.Buffers, got [][]float64) ([]float64, error) {
		c, ok := op.(kernels.Conv2D)
		if !ok || len(got) != 1 || (c.Act != kernels.ActNone && c.Act != kernels.ActReLU) {
			return nil, fmt.Errorf("sampledConv: %s %s: not a convolution this samples", op.Kernel(), op.Shape())
		}
		get := func(name string) []float64 {
			t, _ := bufs.Get(name)
			return t.Host
		}
		oh, ow := c.Out()
		st := max(c.Stride, 1)
		out := bufs.Outputs()[0]
		rng := rand.New(rand.NewPCG(uint64(len(got[0])), uint64(c.R*c.S*c.C*c.OutC)))
		xAt := func(img, iy, ix, ch int) int { return ((img*c.H+iy)*c.W+ix)*c.C + ch }
		yAt := func(img, oy, ox, o int) int { return ((img*oh+oy)*ow+ox)*c.OutC + o }
		wAt := func(ry, sx, ch, o int) int { return ((ry*c.S+sx)*c.C+ch)*c.OutC + o }
		var one func(i int) float64
		switch {
		case c.BackwardFilter:
			x, dy := get("X"), get("dY")
			split := max(c.Split, 1)
			per, imgs := c.R*c.S*c.C*c.OutC, c.N/split
			one = func(i int) float64 {
				part, k := i/per, i%per
				o, ch, tap := k%c.OutC, k/c.OutC%c.C, k/c.OutC/c.C
				ry, sx := tap/c.S, tap%c.S
				sum := 0.0
				for img := part * imgs; img < (part+1)*imgs; img++ {
					for oy := range oh {
						iy := oy*st - c.Pad + ry
						if iy < 0 || iy >= c.H {
							continue
						}
						for ox := range ow {
							if ix := ox*st - c.Pad + sx; ix >= 0 && ix < c.W {
								sum += x[xAt(img, iy, ix, ch)] * dy[yAt(img, oy, ox, o)]
							}
						}
					}
				}
				return sum
			}
		case c.BackwardData:
			dy, w := get("dY"), get("W")
			one = func(i int) float64 {
				ch, ix, iy, img := i%c.C, i/c.C%c.W, i/c.C/c.W%c.H, i/c.C/c.W/c.H
				sum := 0.0
				for ry := range c.R {
					for sx := range c.S {
						ny, nx := iy+c.Pad-ry, ix+c.Pad-sx
						if ny < 0 || nx < 0 || ny%st != 0 || nx%st != 0 || ny/st >= oh || nx/st >= ow {
							continue
						}
						for o := range c.OutC {
							sum += dy[yAt(img, ny/st, nx/st, o)] * w[wAt(ry, sx, ch, o)]
						}
					}
				}
				return sum
			}
		default:
			x, w, bias, resid := get("X"), get("W"), get("bias"), get("resid")
			one = func(i int) float64 {
				o, ox, oy, img := i%c.OutC, i/c.OutC%ow, i/c.OutC/ow%oh, i/c.OutC/ow/oh
				sum := 0.0
				for ry := range c.R {
					for sx := range c.S {
						iy, ix := oy*st-c.Pad+ry, ox*st-c.Pad+sx
						if iy < 0 || iy >= c.H || ix < 0 || ix >= c.W {
							continue
						}
						for ch := range c.C {
							sum += x[xAt(img, iy, ix, ch)] * w[wAt(ry, sx, ch, o)]
						}
					}
				}
				if bias != nil {
					sum += bias[o]
				}
				if resid != nil {
					sum += resid[i]
				}
				if c.Act == kernels.ActReLU {
					sum = max(sum, 0)
				}
				return sum
			}
		}
		var gs, rs []float64
		for range n {
			i := rng.IntN(len(got[0]))
			gs = append(gs, got[0][i])
			rs = append(rs, one(i))
		}
		models.Round(out.DType, rs)
		return []float64{models.RelErr(gs, rs)}, nil
	}
}

// checkedStep runs one step of in layer by layer through step(i) (on a GPU,
// RunLayers(i, i+1)). For each layer that pick gives a refFn, it reads the
// layer's operands from the device before step (in-place layers, SGD,
// overwrite them) and its outputs after, and compares them. Layers pick
// skips run unchecked.
func checkedStep(dev gpu.Device, in *exec.Instance, step func(i int) error, pick func(i int) refFn) ([]layerErr, error) {
	g := in.Graph()
	var errs []layerErr
	for i, l := range g.Layers {
		ref := pick(i)
		var bufs kernels.Buffers
		if ref != nil {
			var err error
			if bufs, err = in.Buffers(i); err != nil {
				return nil, fmt.Errorf("layer %s: %w", l.Name, err)
			}
			bufs.T = slices.Clone(bufs.T)
			for j := range bufs.T {
				tb := &bufs.T[j]
				if tb.Role == kernels.Output {
					continue
				}
				if tb.Host, _, err = kernels.Read(dev, *tb); err != nil {
					return nil, fmt.Errorf("layer %s: reading %s: %w", l.Name, tb.Name, err)
				}
			}
		}
		if err := step(i); err != nil {
			return nil, fmt.Errorf("layer %s: %w", l.Name, err)
		}
		if ref == nil {
			continue
		}
		outs := bufs.Outputs()
		got := make([][]float64, len(outs))
		for j, o := range outs {
			var err error
			if got[j], _, err = kernels.Read(dev, o); err != nil {
				return nil, fmt.Errorf("layer %s: reading %s: %w", l.Name, o.Name, err)
			}
		}
		e, err := ref(in.Op(i), bufs, got)
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", l.Name, err)
		}
		for j, o := range outs {
			errs = append(errs, layerErr{layer: l.Name, output: o.Name, kernel: in.Op(i).Kernel(), err: e[j]})
		}
	}
	return errs, nil
}

// worstLayers sorts errs worst first (NaN first) and returns the summary
// lines TestGPUTrainStep prints: the n worst outputs and the worst output of
// every kernel, and the outputs above tol.
func worstLayers(errs []layerErr, n int, tol float64) (summary string, bad []layerErr) {
	errs = slices.Clone(errs)
	key := func(e layerErr) float64 {
		if math.IsNaN(e.err) {
			return math.Inf(1)
		}
		return e.err
	}
	slices.SortStableFunc(errs, func(a, b layerErr) int {
		switch ka, kb := key(a), key(b); {
		case ka > kb:
			return -1
		case ka < kb:
			return 1
		}
		return 0
	})
	for _, e := range errs {
		if !(e.err <= tol) {
			bad = append(bad, e)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "    worst outputs:")
	for _, e := range errs[:min(n, len(errs))] {
		fmt.Fprintf(&b, "\n      %v", e)
	}
	fmt.Fprintf(&b, "\n    worst per kernel:")
	seen := map[string]int{}
	for _, e := range errs {
		seen[e.kernel]++
	}
	done := map[string]bool{}
	for _, e := range errs {
		if done[e.kernel] {
			continue
		}
		done[e.kernel] = true
		fmt.Fprintf(&b, "\n      %-34s %2d outputs, worst %.3g (%s.%s)", e.kernel, seen[e.kernel], e.err, e.layer, e.output)
	}
	return b.String(), bad
}

// perturbUlp returns inputs with every nonzero element of each bf16 input
// moved one bf16 ulp up or down at random (seeded): the smallest change
// the device's storage can represent.
func perturbUlp(inputs *models.Bundle, seed uint64) *models.Bundle {
	rng := rand.New(rand.NewPCG(seed, 0x756c70)) // "ulp"
	p := &models.Bundle{Metadata: inputs.Metadata}
	for _, d := range inputs.Tensors() {
		if d.DType == kernels.BF16 {
			v := d.Values()
			for i, x := range v {
				b := kernels.F32ToBF16(float32(x))
				if b&0x7fff == 0 {
					continue
				}
				if rng.IntN(2) == 0 {
					b++
				} else {
					b--
				}
				v[i] = float64(kernels.BF16ToF32(b))
			}
			d = models.NewData(d.Name, d.DType, d.Shape, v)
		}
		p.Add(d)
	}
	return p
}

// stepErr is a training step's distance from the reference step: the
// loss's relative error and the momenta's (after one step, the gradients),
// median and worst over the momentum tensors.
type stepErr struct {
	loss, median, worst float64
	worstName           string
}

func (s stepErr) String() string {
	return fmt.Sprintf("loss %.3g; momenta median %.3g worst %.3g (%s)", s.loss, s.median, s.worst, s.worstName)
}

// compareStep measures got (read by name) against ref: the loss, and the
// optimizer state tensors whose names start with state ("" for all of
// them: SGD's momenta; "adam.m:" for Adam's first moments).
func compareStep(g *models.Graph, ref models.Activations, got func(string) ([]float64, error), state string) (stepErr, error) {
	var s stepErr
	out, err := got(g.Output)
	if err != nil {
		return s, err
	}
	s.loss = models.RelErr(out, ref[g.Output])
	var es []float64
	for _, tt := range g.Tensors {
		if tt.Kind != models.KindState || !strings.HasPrefix(tt.Name, state) {
			continue
		}
		v, err := got(tt.Name)
		if err != nil {
			return s, err
		}
		e := models.RelErr(v, ref[tt.Name])
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		es = append(es, e)
		if e > s.worst || s.worstName == "" {
			s.worst, s.worstName = e, tt.Name
		}
	}
	if len(es) == 0 {
		return s, fmt.Errorf("%s has no optimizer state %q", g.Model, state+"*")
	}
	slices.Sort(es)
	s.median = es[len(es)/2]
	return s, nil
}

// ulpSpread is how far the CPU reference's own step moves when what moved
// gives (for seeds 1..runs) moves its weights or inputs by one bf16 ulp
// (perturbUlp): the largest loss, median and worst state errors over the
// runs (compareStep with state). A device step whose kernels are right, but
// round at other points than the CPU (fp32 accumulation order, so an
// occasional bf16 output one ulp apart), cannot be expected to come closer
// to the reference than this.
func ulpSpread(g *models.Graph, ref models.Activations, runs int, state string, moved func(seed uint64) (w, inputs *models.Bundle)) (stepErr, error) {
	var s stepErr
	for seed := range uint64(runs) {
		w, inputs := moved(seed + 1)
		alt, err := models.Reference(g, w, inputs)
		if err != nil {
			return s, err
		}
		e, err := compareStep(g, ref, func(n string) ([]float64, error) { return alt[n], nil }, state)
		if err != nil {
			return s, err
		}
		s.loss, s.median = max(s.loss, e.loss), max(s.median, e.median)
		if e.worst > s.worst {
			s.worst, s.worstName = e.worst, e.worstName
		}
	}
	return s, nil
}

// inputsMoved and weightsMoved are ulpSpread's two perturbations: the
// step's inputs (images) or its weights (BERT's inputs are token ids,
// nothing to move) one bf16 ulp away.
func inputsMoved(w, inputs *models.Bundle) func(uint64) (*models.Bundle, *models.Bundle) {
	return func(seed uint64) (*models.Bundle, *models.Bundle) { return w, perturbUlp(inputs, seed) }
}

func weightsMoved(w, inputs *models.Bundle) func(uint64) (*models.Bundle, *models.Bundle) {
	return func(seed uint64) (*models.Bundle, *models.Bundle) { return perturbUlp(w, seed), inputs }
}

// tinyStep is a reduced training step tinyStepCheck checks: the model and
// batch, the optimizer state compared (compareStep's prefix) and how it is
// named in the summary and the verdict, and what the one-ulp spread moves.
type tinyStep struct {
	model              models.Model
	batch              int
	state, compared    string
	moved              func(w, inputs *models.Bundle) func(uint64) (*models.Bundle, *models.Bundle)
	movedWhat, verdict string
}

// tinyStepCheck runs c's step on dev layer by layer through step(in)(i)
// and checks it: every layer against its kernel's CPU reference from its
// device inputs, then the whole step against models.Reference within the
// CPU's own one-ulp spread (stepVerdict); the summary goes to b.
func tinyStepCheck(dev gpu.Device, lib *kernels.Library, b *strings.Builder, step func(*exec.Instance) func(int) error, c tinyStep) error {
	g, err := c.model.Graph(c.batch)
	if err != nil {
		return err
	}
	w, inputs := models.InitWeights(g, 1), models.InitInputs(g, 2)
	in, err := exec.New(dev, lib, g, w, inputs)
	if err != nil {
		return err
	}
	defer in.Close()
	if in.Runnable() != len(g.Layers) {
		return in.Err(in.Runnable())
	}
	errs, err := checkedStep(dev, in, step(in), func(int) refFn { return fullRef })
	if err != nil {
		return err
	}
	sum, bad := worstLayers(errs, 8, tolTrainSpot)
	fmt.Fprintf(b, "%s batch %d: %d layers on the GPU, run one by one; each vs the CPU from its device inputs: %d outputs, %d above %g\n%s\n",
		g.Model, g.Batch, len(g.Layers), len(errs), len(bad), tolTrainSpot, sum)
	ref, err := models.Reference(g, w, inputs)
	if err != nil {
		return err
	}
	dv, err := compareStep(g, ref, in.Read, c.state)
	if err != nil {
		return err
	}
	spread, err := ulpSpread(g, ref, spreadRuns, c.state, c.moved(w, inputs))
	if err != nil {
		return err
	}
	fmt.Fprintf(b, "  whole step vs CPU reference%s: %v\n  CPU vs itself, %s moved 1 bf16 ulp (%d runs, largest): %v\n", c.compared, dv, c.movedWhat, spreadRuns, spread)
	return stepVerdict(bad, dv, spread, c.verdict)
}

// gpuStepTest runs a training step check on GPU 0: tiny (a reduced step
// run layer by layer), then, when model is named, zoo (the zoo step at full
// size). The summary is printed as it grows and written to $OUT/file, so
// that a check cut off by a timeout leaves what came before it. Skipped
// without a GPU.
func gpuStepTest(t *testing.T, file, tinyName string, tiny func(gpu.Device, *kernels.Library, *strings.Builder, func(*exec.Instance) func(int) error) error,
	model string, zoo func(gpu.Device, *kernels.Library, *strings.Builder) error) {
	var b strings.Builder
	printed := 0
	flush := func() {
		fmt.Print(b.String()[printed:])
		printed = b.Len()
		if out := os.Getenv("OUT"); out != "" {
			if werr := os.WriteFile(filepath.Join(out, file), []byte(b.String()), 0o644); werr != nil {
				t.Errorf("writing the summary: %v", werr)
			}
		}
	}
	err := cuda.Run(0, func(d *cuda.Device) error {
		fmt.Fprintf(&b, "device: %s, driver %s\n", d.Info().Name, d.Info().Driver)
		lib := kernels.New(d)
		gpuRun := func(in *exec.Instance) func(int) error {
			return func(i int) error { return in.RunLayers(context.Background(), i, i+1) }
		}
		if err := tiny(d, lib, &b, gpuRun); err != nil {
			t.Errorf("%s: %v", tinyName, err)
			fmt.Fprintf(&b, "  FAIL %s: %v\n", tinyName, err)
		}
		flush()
		if model != "" {
			if err := zoo(d, lib, &b); err != nil {
				t.Errorf("%s: %v", model, err)
				fmt.Fprintf(&b, "  FAIL %s: %v\n", model, err)
			}
		}
		return nil
	})
	if errors.Is(err, gpu.ErrNoDevice) {
		t.Skipf("no GPU: %v", err)
	}
	flush()
	if err != nil {
		t.Fatal(err)
	}
}
