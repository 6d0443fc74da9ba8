package sched

import (
	"fmt"
	"time"

	"atoll/gpu"
	"atoll/profiles"
)

// BlocksPerSM is how many blocks of k fit on one SM of spec at once (at
// least 1, so a profile recorded on a larger GPU still yields an answer).
func BlocksPerSM(spec gpu.Spec, k *profiles.Kernel) int {
	b, _, err := spec.Occupancy(k.BlockDim().Count(), k.Registers, k.SharedMem)
	if err != nil || b < 1 {
		return 1
	}
	return b
}

// SMsNeeded is Orion's SMs needed by k: the profile's figure when it has
// one, else ceil(grid / blocks per SM), capped at the device's SMs.
func SMsNeeded(spec gpu.Spec, k *profiles.Kernel) int {
	if k.SMsNeeded > 0 {
		return min(k.SMsNeeded, spec.SMs)
	}
	return spec.SMsNeeded(k.GridDim().Count(), BlocksPerSM(spec, k))
}

// Workers is the worker grid of k's Resumable form: one persistent block
// per resident slot on the whole device, no more than its logical blocks.
func Workers(spec gpu.Spec, k *profiles.Kernel) int {
	return max(1, min(k.GridDim().Count(), spec.SMs*BlocksPerSM(spec, k)))
}

// DurationOn is k's solo duration confined to sms SMs: interpolated
// between its partition points (profiles.Kernel.Partition, measured on SM
// partitions; the last is the whole GPU) where it has them, linear in SMs
// below the first; else its profiled duration scaled by the waves its grid
// takes on sms SMs against the whole device (a grid that fits in one wave
// on sms SMs is not slowed). A vendor kernel (tagged blas) without points
// is taken to use every SM, its duration growing as SMs / sms: its launch
// geometry is the library's, not the profile's grid.
func DurationOn(spec gpu.Spec, k *profiles.Kernel, sms int) time.Duration {
	if sms >= spec.SMs || sms <= 0 {
		return k.Duration()
	}
	scale := func(num, den float64) time.Duration { return time.Duration(float64(k.Duration()) * num / den) }
	if len(k.Partition) > 0 {
		if d, ok := k.Cost().PartitionDuration(sms); ok {
			return d
		}
		return k.Duration()
	}
	if k.HasTag(profiles.TagBLAS) {
		return scale(float64(spec.SMs), float64(sms))
	}
	return scale(float64(wavesOn(spec, k, sms)), float64(Waves(spec, k)))
}

// Waves is how many rounds of resident blocks k's grid takes alone.
func Waves(spec gpu.Spec, k *profiles.Kernel) int { return max(wavesOn(spec, k, spec.SMs), 1) }

// wavesOn is how many rounds of resident blocks k's grid takes on sms SMs.
func wavesOn(spec gpu.Spec, k *profiles.Kernel, sms int) int {
	slots := sms * BlocksPerSM(spec, k)
	return (k.GridDim().Count() + slots - 1) / slots
}

// ValidateProfile checks the fields the scheduler relies on.
func ValidateProfile(p *profiles.Profile) error {
	if p == nil {
		return fmt.Errorf("%w: nil profile", ErrConfig)
	}
	if len(p.Kernels) == 0 {
		return fmt.Errorf("%w: profile %q has no kernels; profile the model again", ErrConfig, p.Model)
	}
	for i := range p.Kernels {
		k := &p.Kernels[i]
		switch {
		case k.GridDim().Count() < 1:
			return fmt.Errorf("%w: profile %q kernel %d (%s): grid %v has no blocks", ErrConfig, p.Model, i, k.Name, k.Grid)
		case k.BlockDim().Count() < 1:
			return fmt.Errorf("%w: profile %q kernel %d (%s): block %v has no threads", ErrConfig, p.Model, i, k.Name, k.Block)
		case !(k.DurationUs > 0):
			return fmt.Errorf("%w: profile %q kernel %d (%s): durationUs %v must be positive", ErrConfig, p.Model, i, k.Name, k.DurationUs)
		}
	}
	return nil
}
