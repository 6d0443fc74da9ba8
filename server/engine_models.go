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
	g, err := src.Graph(mc.Batch)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrConfig, where, err)
	}
	prof, err := profiler.Lookup(spec, zm, mc.Batch, lookupProfile)
	if err != nil && cfg.Backend == "sim" {
		return fmt.Errorf("%w: %s: the simulator times %s from its profile: %w", ErrConfig, where, mc.Zoo, err)
	}
	if prof != nil && cfg.Backend == "cuda" && prof.Source == profiles.SourceEstimated {
		return fmt.Errorf("%w: %s: the only profile of %s at batch %d for %s is a roofline estimate; measure it on this GPU first: atoll profile --model %s --batch %d", ErrConfig, where, mc.Zoo, mc.Batch, spec.Name, given, mc.Batch)
	}
	if prof == nil {
		// The scheduler needs the kernel sequence on cuda too.
		return fmt.Errorf("%w: %s: no profile of %s at batch %d for %s; run `atoll profile` first: %w", ErrConfig, where, mc.Zoo, mc.Batch, spec.Name, err)
	}
	if mc.Model != nil && cfg.Instances {
		// The instances launch the replacement's own kernels: time
		// them with its roofline estimate, not the zoo's profile.
		if prof, err = profiler.Estimate(spec, g.Model, g.Batch, g.Layers); err != nil {
			return fmt.Errorf("%w: %s: estimating a profile of %s: %w", ErrConfig, where, g.Model, err)
		}
	}
	if (cfg.Instances || cfg.Backend == "cuda") && len(prof.Kernels) != len(g.Layers) {
		return fmt.Errorf("%w: %s: the profile of %s has %d kernels but the model launches %d; re-profile it", ErrConfig, where, mc.Zoo, len(prof.Kernels), len(g.Layers))
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
		b := n * mc.Batch
		bg, err := src.Graph(b)
		if err != nil {
			return fmt.Errorf("%w: %s: max_batch %d: %w", ErrConfig, where, mc.MaxBatch, err)
		}
		bp, err := profiler.Lookup(spec, zm, b, lookupProfile)
		switch {
		case err != nil:
			return fmt.Errorf("%w: %s: max_batch %d serves passes of %d requests and needs %s's profile at batch %d: %w", ErrConfig, where, mc.MaxBatch, n, mc.Zoo, b, err)
		case cfg.Backend == "cuda" && bp.Source == profiles.SourceEstimated:
			return fmt.Errorf("%w: %s: the only profile of %s at batch %d for %s is a roofline estimate; measure it on this GPU first: atoll profile --model %s --batch %d", ErrConfig, where, mc.Zoo, b, spec.Name, given, b)
		case mc.Model != nil && cfg.Instances:
			if bp, err = profiler.Estimate(spec, bg.Model, bg.Batch, bg.Layers); err != nil {
				return fmt.Errorf("%w: %s: estimating a profile of %s at batch %d: %w", ErrConfig, where, bg.Model, b, err)
			}
		}
		batched = append(batched, bp)
		m.batched, m.passReqs = append(m.batched, bg), append(m.passReqs, n)
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
