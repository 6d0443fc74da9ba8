package backend

import (
	"fmt"

	"atoll/gpu"
	"atoll/gpu/cuda"
	"atoll/gpu/sim"
)

// Names are the backends Open knows.
var Names = []string{"sim", "cuda"}

// Config says which device to open.
type Config struct {
	// Backend is "sim" or "cuda".
	Backend string
	// Sim configures the simulator.
	Sim sim.Config
	// Ordinal is the CUDA device number.
	Ordinal int
}

// Open opens the device. On cuda it locks the calling goroutine to its OS
// thread (cuda.Open); the device belongs to that goroutine until Close.
func Open(c Config) (gpu.Device, error) {
	switch c.Backend {
	case "sim":
		return sim.New(c.Sim)
	case "cuda":
		return cuda.Open(c.Ordinal)
	}
	return nil, fmt.Errorf("backend %q: want sim (the simulated GPU) or cuda (the real one)", c.Backend)
}

// Opener is Open as a function to call later, on the goroutine that will
// own the device (a scheduler loop opens its device itself, and again after
// a failure).
func Opener(c Config) func() (gpu.Device, error) {
	return func() (gpu.Device, error) { return Open(c) }
}

// CUDAName names CUDA device ordinal: NVML's inventory where it answers,
// else the driver's name, opening the device briefly.
func CUDAName(ordinal int) (string, error) {
	if inv, err := cuda.Inventory(); err == nil && ordinal < len(inv) {
		return inv[ordinal].Name, nil
	}
	dev, err := cuda.Open(ordinal)
	if err != nil {
		return "", err
	}
	defer dev.Close()
	return dev.Info().Name, nil
}
