package server

// SetCUDAGPUName replaces how the engine learns the CUDA GPU's name; the
// returned func restores it.
func SetCUDAGPUName(f func(ordinal int) (string, error)) (restore func()) {
	old := cudaGPUName
	cudaGPUName = f
	return func() { cudaGPUName = old }
}
