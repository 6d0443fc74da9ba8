package server

import "atoll/profiles"

// SetCUDAGPUName replaces how the engine learns the CUDA GPU's name; the
// returned func restores it.
func SetCUDAGPUName(f func(ordinal int) (string, error)) (restore func()) {
	old := cudaGPUName
	cudaGPUName = f
	return func() { cudaGPUName = old }
}

// SetProfileLookup replaces how the engine finds profiles; the returned
// func restores it.
func SetProfileLookup(f func(gpu, model string, batch int, phase string) (*profiles.Profile, error)) (restore func()) {
	old := lookupProfile
	lookupProfile = f
	return func() { lookupProfile = old }
}
