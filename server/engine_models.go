package server

import (
	"fmt"
	"math"
	"strings"

	"atoll/gpu"
	"atoll/kernels"
	"atoll/models"
	"atoll/profiler"
	"atoll/profiles"
	"atoll/sched"
)

// describe fills m's metadata — its inputs and outputs as the API speaks
// them, and the bounds of its integer inputs — from its graph, or from
// the file's own input and output for an imported model.
func (m *engModel) describe(mc EngineModel, src models.Model) {
	g := m.graph
	m.info = ModelInfo{Name: mc.Name, Versions: []string{"1"}, Platform: "atoll", DefaultClass: mc.DefaultClass, Ready: true}
	for _, in := range g.Inputs {
		t, _ := g.Tensor(in)
		m.info.Inputs = append(m.info.Inputs, TensorInfo{Name: in, Datatype: engDatatype(t.DType), Shape: engShape(t.Shape)})
		if t.DType == kernels.I32 {
			bound, ok := g.IntRange(in)
			if !ok {
				bound = math.MaxInt32 // any non-negative integer
			}
			m.intMax[in] = bound
		}
	}
	out, _ := g.Tensor(g.Output)
	m.info.Outputs = []TensorInfo{{Name: g.Output, Datatype: engDatatype(out.DType), Shape: engShape(out.Shape)}}
	if io := src.ONNXIO(); io != nil {
		// An imported model speaks its file's input and output:
		// float32 NCHW images (check transposes them) or INT64 token
		// ids in, float32 out in the file's shape.
		m.onnx = io
		m.info.Inputs = []TensorInfo{{Name: io.Input, Datatype: "FP32", Shape: []int64{int64(mc.Batch), int64(io.C), int64(io.H), int64(io.W)}}}
		if io.Tokens {
			m.info.Inputs = []TensorInfo{{Name: io.Input, Datatype: "INT64", Shape: []int64{int64(mc.Batch), int64(io.Seq)}}}
			m.intMax[io.Input] = io.Vocab
		}
		m.info.Outputs[0].Name, m.info.Outputs[0].Datatype = io.Output, "FP32"
		if io.OutShape != nil {
			m.info.Outputs[0].Shape = append([]int64{int64(mc.Batch)}, engShape(io.OutShape)...)
		}
	}
}

// addModel checks served model mc (config entry where), makes its metadata
// and its two clients — HP, and BE for BE-class requests (one iteration a
// request) — in ocfg, and registers it.
func (e *engineImpl) addModel(cfg *EngineConfig, spec gpu.Spec, ocfg *sched.OnlineConfig, where string, mc EngineModel) error {
	if mc.Zoo == "" {
		return fmt.Errorf("%w: %s: no zoo model; use one of %s", ErrConfig, where, strings.Join(models.Names(), ", "))
	}
	given := mc.Zoo // a zoo name, or an .onnx path
	zm, err := models.Get(mc.Zoo)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrConfig, where, err)
	}
	if zm.Phase() != models.PhaseInference {
		return fmt.Errorf("%w: %s: %s is a %s model; serve an inference model and run training as a BE job", ErrConfig, where, mc.Zoo, zm.Phase())
	}
	if zm.Weights() != nil {
		// An imported model (a .onnx path): its profiles, and by
		// default its API name, go by its model name.
		if mc.Name == "" || mc.Name == mc.Zoo {
			mc.Name = zm.Name()
		}
		mc.Zoo = zm.Name()
	}
	if mc.Name == "" {
		mc.Name = mc.Zoo
	}
	if _, dup := e.byName[mc.Name]; dup {
		return fmt.Errorf("%w: %s: model name %q given twice", ErrConfig, where, mc.Name)
	}
	if mc.Batch <= 0 {
		mc.Batch = 1
	}
	if mc.MaxQueue <= 0 {
		mc.MaxQueue = 64
	}
	switch mc.DefaultClass {
	case "":
		mc.DefaultClass = HP
	case HP, BE:
	default:
		return fmt.Errorf("%w: %s: default class %q; use HP or BE", ErrConfig, where, mc.DefaultClass)
	}
	src := zm
	if mc.Model != nil {
		if cfg.Backend != "sim" {
			return fmt.Errorf("%w: %s: a replacement model only works on the simulator", ErrConfig, where)
		}
		src = *mc.Model
	}
	g, prof, err := modelAt(cfg, spec, zm, src, mc.Batch, mc.Model != nil, given)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrConfig, where, err)
	}
	switch {
	case mc.Streams == 0:
		mc.Streams = 1
	case mc.Streams < 0 || mc.Streams > MaxStreams:
		return fmt.Errorf("%w: %s: streams %d; must be in 1..%d", ErrConfig, where, mc.Streams, MaxStreams)
	}
	m := &engModel{graph: g, maxQueue: mc.MaxQueue, intMax: map[string]int{}, streams: mc.Streams}
	m.describe(mc, src)
	var batched []*profiles.Profile
	if mc.MaxBatch < 0 || len(sched.BatchSizes(mc.MaxBatch)) > sched.MaxBatched {
		return fmt.Errorf("%w: %s: max_batch %d; must be in 1..%d", ErrConfig, where, mc.MaxBatch, 1<<sched.MaxBatched)
	}
	for _, n := range sched.BatchSizes(mc.MaxBatch) {
		bg, bp, err := modelAt(cfg, spec, zm, src, n*mc.Batch, mc.Model != nil, given)
		if err != nil {
			return fmt.Errorf("%w: %s: max_batch %d serves passes of %d requests: %w", ErrConfig, where, mc.MaxBatch, n, err)
		}
		batched = append(batched, bp)
		m.batched = append(m.batched, bg)
	}
	m.hp = len(ocfg.HP)
	for i := range mc.Streams {
		c := sched.OnlineClient{Name: mc.Name, Profile: prof, Batched: batched}
		if mc.Streams > 1 {
			c.Name, c.Group = fmt.Sprintf("%s#%d", mc.Name, i), mc.Name
		}
		ocfg.HP = append(ocfg.HP, c)
	}
	m.be = len(ocfg.BE)
	ocfg.BE = append(ocfg.BE, sched.OnlineClient{Name: mc.Name + "/be", Profile: prof})
	m.own = src.Weights()
	if cfg.Backend == "sim" && !cfg.Instances {
		w := m.own
		if w == nil {
			w = models.InitWeights(g, cfg.Seed)
		}
		if m.ref, err = models.Prepare(g, w, true); err != nil {
			return fmt.Errorf("%w: model %s: %w", ErrConfig, mc.Name, err)
		}
	}
	e.models = append(e.models, m)
	e.byName[mc.Name] = m
	return nil
}

// modelAt is a served model's graph at batch b (src's: the zoo model zm
// or its replacement) and the profile that times it: zm's at b, measured
// on cuda; a replacement's roofline estimate where instances launch its
// own kernels. given is the name the user gave, for the command to run.
func modelAt(cfg *EngineConfig, spec gpu.Spec, zm, src models.Model, b int, replaced bool, given string) (*models.Graph, *profiles.Profile, error) {
	g, err := src.Graph(b)
	if err != nil {
		return nil, nil, err
	}
	prof, err := profiler.Lookup(spec, zm, b, lookupProfile)
	switch {
	case err != nil && cfg.Backend == "sim":
		return nil, nil, fmt.Errorf("the simulator times %s from its profile: %w", zm.Name(), err)
	case prof == nil:
		// The scheduler needs the kernel sequence on cuda too.
		return nil, nil, fmt.Errorf("no profile of %s at batch %d for %s; run `atoll profile` first: %w", zm.Name(), b, spec.Name, err)
	case cfg.Backend == "cuda" && prof.Source == profiles.SourceEstimated:
		return nil, nil, fmt.Errorf("the only profile of %s at batch %d for %s is a roofline estimate; measure it on this GPU first: atoll profile --model %s --batch %d", zm.Name(), b, spec.Name, given, b)
	case replaced && cfg.Instances:
		// The instances launch the replacement's own kernels: time
		// them with its roofline estimate, not the zoo's profile.
		if prof, err = profiler.Estimate(spec, g.Model, g.Batch, g.Layers); err != nil {
			return nil, nil, fmt.Errorf("estimating a profile of %s: %w", g.Model, err)
		}
	}
	if (cfg.Instances || cfg.Backend == "cuda") && len(prof.Kernels) != len(g.Layers) {
		return nil, nil, fmt.Errorf("the profile of %s at batch %d has %d kernels but the model launches %d; re-profile it", zm.Name(), b, len(prof.Kernels), len(g.Layers))
	}
	return g, prof, nil
}

// addJobModel checks job model jc (config entry where) and gives it a BE
// client in ocfg.
func (e *engineImpl) addJobModel(cfg *EngineConfig, spec gpu.Spec, ocfg *sched.OnlineConfig, where string, jc EngineJobModel) error {
	if _, err := models.Get(jc.Zoo); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrConfig, where, err)
	}
	if jc.Batch <= 0 {
		jc.Batch = engOnlyBatch(spec.Name, jc.Zoo)
	}
	prof, err := lookupProfile(spec.Name, jc.Zoo, jc.Batch, "")
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrConfig, where, err)
	}
	if cfg.Backend == "cuda" && prof.Source == profiles.SourceEstimated {
		return fmt.Errorf("%w: %s: the only profile of %s at batch %d for %s is a roofline estimate; measure it on this GPU first: atoll profile --model %s --batch %d", ErrConfig, where, jc.Zoo, jc.Batch, spec.Name, jc.Zoo, jc.Batch)
	}
	for _, o := range e.jobsM {
		if o.zoo == jc.Zoo && o.batch == jc.Batch {
			return fmt.Errorf("%w: %s: %s at batch %d given twice", ErrConfig, where, jc.Zoo, jc.Batch)
		}
	}
	e.jobsM = append(e.jobsM, &engJobModel{zoo: jc.Zoo, batch: jc.Batch, be: len(ocfg.BE)})
	ocfg.BE = append(ocfg.BE, sched.OnlineClient{Name: fmt.Sprintf("job:%s-bs%d", jc.Zoo, jc.Batch), Profile: prof})
	return nil
}
