package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"atoll/models"
	"atoll/profiles"
)

const modelsHelp = `
Usage: atoll models [FILE.onnx ...]

Lists the profiles atoll can use: for each GPU, model, batch size and phase,
how many kernels one request (or training step) launches, their summed solo
duration, where the numbers came from (estimated by roofline, or measured on
a GPU), and where the profile lives: built into atoll, or in the profile
store that 'atoll profile' writes to (which takes precedence). Use these
names with --hp and --be.

With ONNX files, imports each and shows what atoll will run: the layers it
maps the graph onto (fused convolutions, pools, linear layers), their
kernels and parameters — or the node it cannot map and why. The file's path
works wherever a model is named (--hp, --model, a served model's zoo:), as
the model named after the file ("net.onnx" is "net"), with the file's own
weights:

  atoll models resnet50.onnx
  atoll profile --model resnet50.onnx          # on the GPU: a measured profile, into the store
  atoll bench --hp resnet50.onnx --be resnet50-train
  atoll serve --model resnet50.onnx

atoll maps image models (Conv with BatchNormalization, Relu, Clip(0, 6) and
residual Add fused; depthwise Conv; MaxPool, AveragePool, GlobalAveragePool;
Flatten; Gemm/MatMul) exported with a dynamic or unit batch, and BERT-family
encoders whose one input is token ids (BERT, DistilBERT as torch.onnx.export
writes them, either exporter: export without attention_mask and with one
output, e.g. the pooler's or the last hidden states; it prints where it
approximates the file):

  atoll models bert.onnx                       # 12 layers, hidden 768, ... or the node it cannot map
  atoll serve --model bert.onnx                # takes the file's INT64 input_ids
`

func init() {
	register(command{name: "models", summary: "list the model zoo's profiles (use the names with --hp/--be)", run: runModels})
}

func runModels(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "models", modelsHelp)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return showImported(e, fs.Args())
	}
	t := tablewriter.NewTable(e.stdout, tablewriter.WithRenderer(renderer.NewBlueprint()), tablewriter.WithHeaderAutoFormat(tw.Off))
	t.Header([]string{"gpu", "model", "batch", "phase", "kernels", "solo ms", "source", "where"})
	for _, en := range profiles.List() {
		p, err := profiles.Lookup(en.GPU, en.Model, en.Batch, en.Phase)
		if err != nil {
			return err
		}
		where := "built in"
		if en.Stored {
			where = "store"
		}
		if err := t.Append([]string{en.GPU, en.Model, fmt.Sprint(en.Batch), en.Phase, fmt.Sprint(len(p.Kernels)),
			fmt.Sprintf("%.3f", float64(p.Total().Microseconds())/1000), p.Source, where}); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "profile store: %s (set %s to move it)\n", profileStoreText(), profiles.StoreEnv)
	return nil
}

func profileStoreText() string {
	if d := profiles.StoreDir(); d != "" {
		return d
	}
	return "none"
}

// showImported prints what each ONNX file maps onto.
func showImported(e *env, paths []string) error {
	for _, p := range paths {
		if !strings.HasSuffix(strings.ToLower(p), ".onnx") {
			return fmt.Errorf("%s: not an .onnx file (atoll models lists the zoo without arguments)", p)
		}
		m, err := models.Get(p)
		if err != nil {
			return err
		}
		g, err := m.Graph(1)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s: model %q, %s\n", p, m.Name(), m.Description())
		t := tablewriter.NewTable(e.stdout, tablewriter.WithRenderer(renderer.NewBlueprint()), tablewriter.WithHeaderAutoFormat(tw.Off))
		t.Header([]string{"layer", "kernel", "output (bs1)", "params"})
		for _, l := range g.Layers {
			out, _ := g.Tensor(l.Out[0])
			if err := t.Append([]string{l.Name, l.Op.Kernel(), fmt.Sprint(out.Shape), fmt.Sprint(l.Params)}); err != nil {
				return err
			}
		}
		if err := t.Render(); err != nil {
			return err
		}
		io := m.ONNXIO()
		if io.Tokens {
			fmt.Fprintf(e.stdout, "%d layers, %d parameters (weights from the file), %.2f GFLOP per sequence; served input %q INT64 [N %d] (token ids in [0, %d)), output %q FP32 [N %v]\n",
				len(g.Layers), models.Params(g.Layers), models.FLOPs(g.Layers)/1e9, io.Input, io.Seq, io.Vocab, io.Output, strings.Trim(fmt.Sprint(io.OutShape), "[]"))
		} else {
			fmt.Fprintf(e.stdout, "%d layers, %d parameters (weights from the file), %.2f GFLOP per image; served input %q FP32 [N %d %d %d] (NCHW, as in the file), output %q FP32\n",
				len(g.Layers), models.Params(g.Layers), models.FLOPs(g.Layers)/1e9, io.Input, io.C, io.H, io.W, io.Output)
		}
		for _, n := range io.Notes {
			fmt.Fprintf(e.stdout, "note: %s\n", n)
		}
	}
	return nil
}
