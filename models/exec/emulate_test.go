package exec_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
)

// emulate runs a forward pass of in "as the GPU would" on the simulator,
// whose memory holds bytes but whose kernels compute nothing: each runnable
// layer's operands are read from the device buffers its launch would use
// (Instance.Buffers), computed with the kernel's CPU reference and written
// back to its output buffers; glue layers go through the host as in
// RunHybrid. Any wiring mistake — an operand bound to the wrong buffer, a
// residual from the wrong block — changes the output.
func emulate(t *testing.T, dev gpu.Device, in *exec.Instance) {
	t.Helper()
	for i := range in.Graph().Layers {
		emulateLayer(t, dev, in, i)
	}
}

// emulateLayer is emulate's step for layer i.
func emulateLayer(t *testing.T, dev gpu.Device, in *exec.Instance, i int) {
	t.Helper()
	g := in.Graph()
	l := g.Layers[i]
	bufs, err := in.Buffers(i)
	if err != nil {
		vals := models.Activations{}
		for _, n := range slices.Concat(l.In, l.W) {
			if vals[n], err = in.Read(n); err != nil {
				t.Fatal(err)
			}
		}
		outs, err := models.ReferenceLayer(g, l, vals)
		if err != nil {
			t.Fatalf("layer %s: %v", l.Name, err)
		}
		for j, n := range l.Out {
			tt, _ := g.Tensor(n)
			p, _ := in.Ptr(n)
			if err := dev.CopyToDevice(p, kernels.Encode(tt.DType, outs[j])); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	for j := range bufs.T {
		tb := &bufs.T[j]
		if tb.Role == kernels.Output {
			continue
		}
		raw := make([]byte, tb.Bytes())
		if err := dev.CopyFromDevice(raw, tb.Ptr); err != nil {
			t.Fatal(err)
		}
		tb.Host = kernels.Decode(tb.DType, raw)
	}
	outs, err := kernels.Reference(in.Op(i), bufs)
	if err != nil {
		t.Fatalf("layer %s: %v", l.Name, err)
	}
	for j, o := range bufs.Outputs() {
		if err := dev.CopyToDevice(o.Ptr, kernels.Encode(o.DType, outs[j])); err != nil {
			t.Fatal(err)
		}
	}
}

// The device buffers, as bound, compute what the CPU reference computes,
// with and without substitutions.
func TestEmulatedForward(t *testing.T) {
	for _, c := range []struct {
		name  string
		model func() (models.Model, error)
		batch int
		opt   exec.Options
		subst []string // layers substituted
	}{
		{"resnet", func() (models.Model, error) { return models.NewResNet("tiny-resnet", tinyResNet) }, 2, exec.Options{}, nil},
		{"vgg", func() (models.Model, error) { return models.NewVGG("tiny-vgg", tinyVGG) }, 3, exec.Options{}, nil},
		{"bert", func() (models.Model, error) { return models.NewBERT("tiny-bert", tinyBERT) }, 2, exec.Options{}, nil},
		{"resnet-substituted", func() (models.Model, error) {
			c := tinyResNet
			c.Image = 64 // a 2x2 final feature map
			return models.NewResNet("tiny-resnet", c)
		}, 2, exec.Options{Substitute: true}, []string{"avgpool"}},
		{"bert-substituted", func() (models.Model, error) { return models.NewBERT("tiny-bert", tinyBERT) }, 2, exec.Options{Substitute: true}, []string{"embeddings.add"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := newSim(t)
			m, err := c.model()
			in := instanceWith(t, dev, kernels.New(dev), m, err, c.batch, c.opt)
			var subst []string
			for _, s := range in.Substitutions() {
				subst = append(subst, s[:strings.IndexByte(s, ':')])
			}
			if !slices.Equal(subst, c.subst) {
				t.Errorf("substitutions %v, want %v", in.Substitutions(), c.subst)
			}
			if c.opt.Substitute && strings.HasPrefix(c.name, "resnet") && in.Runnable() != len(in.Graph().Layers) {
				t.Errorf("substituted ResNet: runnable %d of %d: %v", in.Runnable(), len(in.Graph().Layers), in.Err(in.Runnable()))
			}
			g := in.Graph()
			emulate(t, dev, in)
			got, err := in.Output()
			if err != nil {
				t.Fatal(err)
			}
			ref, err := models.Reference(g, models.InitWeights(g, 1), models.InitInputs(g, 2))
			if err != nil {
				t.Fatal(err)
			}
			if e := models.RelErr(got, ref[g.Output]); e > 1e-5 {
				t.Errorf("output: relative error %.3g between the emulated device and the CPU reference", e)
			}
			// New inputs through SetInputs change the output.
			if err := in.SetInputs(models.InitInputs(g, 9)); err != nil {
				t.Fatal(err)
			}
			emulate(t, dev, in)
			again, _ := in.Output()
			if e := models.RelErr(again, got); e < 1e-3 {
				t.Errorf("other inputs changed the output by only %.3g", e)
			}
		})
	}
}

// RunHybrid on the simulator runs the GPU segments and does the layers the
// library lacks on the host, naming them: in BERT only the embedding add
// (its attention and pooler glue launch the strided GEMM).
func TestRunHybrid(t *testing.T) {
	dev := newSim(t)
	m, err := models.NewBERT("tiny-bert", tinyBERT)
	in := instance(t, dev, kernels.New(dev), m, err, 2)
	host, err := in.RunHybrid(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"embeddings.add"}
	if !slices.Equal(host, want) {
		t.Errorf("host layers %v, want %v", host, want)
	}
}
