package server

import (
	"fmt"
	"slices"
	"strings"

	"atoll/gpu"
	"atoll/gpu/backend"
	"atoll/gpu/cuda"
	"atoll/kernels"
	"atoll/models"
	"atoll/models/exec"
	"atoll/profiles"
	"atoll/sched"
)

// engOnlyBatch is the batch of the only embedded profile of zoo on gpuName
// (0 when there are none or several: Lookup then says what exists).
func engOnlyBatch(gpuName, zoo string) int {
	b := 0
	for _, en := range profiles.List() {
		if en.Model == zoo && strings.EqualFold(en.GPU, gpuName) {
			if b != 0 {
				return 0
			}
			b = en.Batch
		}
	}
	return b
}

// cudaGPUName is the name of CUDA device ordinal. Tests replace it.
var cudaGPUName = backend.CUDAName

// cudaUUIDs are NVML's GPU UUIDs by ordinal (none where NVML does not
// answer).
func cudaUUIDs() []string {
	inv, _ := cuda.Inventory()
	out := make([]string, len(inv))
	for i, d := range inv {
		out[i] = d.UUID
	}
	return out
}

// bindInstances runs in the owner goroutine once the device is open: it
// loads an instance per client (HP and BE request instances of each
// served model, and one per job model) and binds them. Layers the kernel
// library runs only through a substitute (ResNet's NHWC global average
// pool) are bound to it (exec.Options.Substitute); a model with a layer no
// kernel runs is refused, naming the layer.
func (e *engineImpl) bindInstances(dev gpu.Device, seed uint64) (sched.Binder, error) {
	lib := kernels.New(dev)
	load := func(g *models.Graph, own *models.Bundle) (*exec.Instance, error) {
		w := own
		if w == nil {
			w = models.InitWeights(g, seed)
		}
		in, err := exec.NewWith(dev, lib, g, w, models.InitInputs(g, seed), exec.Options{Substitute: true})
		if err != nil {
			return nil, fmt.Errorf("load %s bs%d: %w", g.Model, g.Batch, err)
		}
		if in.Runnable() < len(g.Layers) {
			err := in.Err(in.Runnable())
			_ = in.Close()
			return nil, fmt.Errorf("%w: %s bs%d cannot run on the device from layer %d (serve another model, or use the simulator): %w", ErrConfig, g.Model, g.Batch, in.Runnable(), err)
		}
		return in, nil
	}
	hp := make([]*exec.Instance, e.hpClients)
	var be []*exec.Instance
	for _, m := range e.models {
		var err error
		m.hpInst = make([]*exec.Instance, m.streams)
		m.batchInst = make([][]*exec.Instance, m.streams)
		for i := range m.hpInst {
			if m.hpInst[i], err = load(m.graph, m.own); err != nil {
				return nil, err
			}
			hp[m.hp+i] = m.hpInst[i]
			for _, bg := range m.batched {
				in, err := load(bg, m.own)
				if err != nil {
					return nil, err
				}
				m.batchInst[i] = append(m.batchInst[i], in)
			}
		}
		if m.beInst, err = load(m.graph, m.own); err != nil {
			return nil, err
		}
		be = append(be, nil)
		be[m.be] = m.beInst
	}
	for _, j := range e.jobsM {
		zm, _ := models.Get(j.zoo)
		g, err := zm.Graph(j.batch)
		if err != nil {
			return nil, err
		}
		if j.inst, err = load(g, nil); err != nil {
			return nil, err
		}
		for len(be) <= j.be {
			be = append(be, nil)
		}
		be[j.be] = j.inst
	}
	b, err := exec.NewInstanceBinder(lib, hp, be)
	if err != nil {
		return nil, err
	}
	for _, m := range e.models {
		for i, ins := range m.batchInst {
			if err := b.AddBatched(m.hp+i, ins...); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

func (e *engineImpl) releaseCUDA() {
	for _, m := range e.models {
		all := append(slices.Clone(m.hpInst), m.beInst)
		for _, ins := range m.batchInst {
			all = append(all, ins...)
		}
		for _, in := range all {
			if in != nil {
				_ = in.Close()
			}
		}
	}
	for _, j := range e.jobsM {
		if j.inst != nil {
			_ = j.inst.Close()
		}
	}
}
