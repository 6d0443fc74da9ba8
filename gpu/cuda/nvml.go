//go:build cgo

package cuda

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"atoll/gpu"
)

// Inventory lists the GPUs NVML sees: name, UUID, memory, clocks,
// utilization, power and temperature, plus the SM count from the CUDA driver.
// Without the NVIDIA driver it returns an error wrapping gpu.ErrNoDevice.
// Fields NVML cannot report on a GPU stay zero.
func Inventory() ([]DeviceInfo, error) {
	if r := nvml.Init(); r != nvml.SUCCESS {
		if r == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, fmt.Errorf("%w: no NVIDIA driver found (libnvidia-ml.so.1): run with the simulator, or install the driver", gpu.ErrNoDevice)
		}
		return nil, fmt.Errorf("%w: nvml: nvmlInit: %s", gpu.ErrNoDevice, nvml.ErrorString(r))
	}
	defer nvml.Shutdown()
	n, r := nvml.DeviceGetCount()
	if r != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: nvml: nvmlDeviceGetCount: %s", gpu.ErrDriver, nvml.ErrorString(r))
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the NVIDIA driver sees no GPU: run with the simulator", gpu.ErrNoDevice)
	}
	driver, _ := nvml.SystemGetDriverVersion()
	sms := smCounts()
	out := make([]DeviceInfo, 0, n)
	for i := range n {
		h, r := nvml.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return nil, fmt.Errorf("%w: nvml: nvmlDeviceGetHandleByIndex(%d): %s", gpu.ErrDriver, i, nvml.ErrorString(r))
		}
		di := DeviceInfo{Index: i, Driver: driver}
		di.Name, _ = h.GetName()
		di.UUID, _ = h.GetUUID()
		if m, r := h.GetMemoryInfo(); r == nvml.SUCCESS {
			di.MemoryTotal, di.MemoryUsed = m.Total, m.Used
		}
		di.SMClock, _ = h.GetClockInfo(nvml.CLOCK_SM)
		di.SMClockMax, _ = h.GetMaxClockInfo(nvml.CLOCK_SM)
		di.MemClock, _ = h.GetClockInfo(nvml.CLOCK_MEM)
		di.MemClockMax, _ = h.GetMaxClockInfo(nvml.CLOCK_MEM)
		if u, r := h.GetUtilizationRates(); r == nvml.SUCCESS {
			di.UtilGPU, di.UtilMemory = u.Gpu, u.Memory
		}
		if p, r := h.GetPowerUsage(); r == nvml.SUCCESS {
			di.PowerDraw = float64(p) / 1000
		}
		if p, r := h.GetEnforcedPowerLimit(); r == nvml.SUCCESS {
			di.PowerLimit = float64(p) / 1000
		}
		di.Temperature, _ = h.GetTemperature(nvml.TEMPERATURE_GPU)
		di.SMs = sms[di.UUID]
		out = append(out, di)
	}
	return out, nil
}
