package cuda

import (
	"fmt"
	"unsafe"
)

// DeviceInfo is one GPU as NVML reports it, with the SM count from the CUDA
// driver (NVML cannot report it for a non-MIG GPU).
type DeviceInfo struct {
	Index       int
	Name        string
	Driver      string // display driver version, e.g. "580.159.04"
	UUID        string
	MemoryTotal uint64  // bytes
	MemoryUsed  uint64  // bytes
	SMClock     uint32  // MHz, current
	SMClockMax  uint32  // MHz
	MemClock    uint32  // MHz, current
	MemClockMax uint32  // MHz
	UtilGPU     uint32  // percent of time a kernel ran, last sample period
	UtilMemory  uint32  // percent of time memory was read or written
	PowerDraw   float64 // watts
	PowerLimit  float64 // watts, enforced
	Temperature uint32  // degrees C
	SMs         int     // 0 when the CUDA driver could not be asked
}

// smCounts maps NVML-style UUIDs ("GPU-xxxxxxxx-...") to the SM count the CUDA
// driver reports. It returns nil when the driver or cuDeviceGetUuid is missing.
func smCounts() map[string]int {
	drv, err := loadDriver()
	if err != nil {
		return nil
	}
	getUUID := uintptr(0)
	for _, n := range []string{"cuDeviceGetUuid_v2", "cuDeviceGetUuid"} {
		if f, err := dlsym(drv.lib, n); err == nil {
			getUUID = f
			break
		}
	}
	if getUUID == 0 {
		return nil
	}
	var count int32
	if drv.call(drv.cuDeviceGetCount, uintptr(unsafe.Pointer(&count))) != resultSuccess {
		return nil
	}
	out := make(map[string]int)
	for i := range count {
		var dev int32
		if drv.call(drv.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(i)) != resultSuccess {
			continue
		}
		var u [16]byte
		if drv.call(getUUID, uintptr(unsafe.Pointer(&u[0])), uintptr(dev)) != resultSuccess {
			continue
		}
		var sms int32
		if drv.call(drv.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&sms)), attrMultiprocessorCount, uintptr(dev)) != resultSuccess {
			continue
		}
		out[formatUUID(u)] = int(sms)
	}
	return out
}

// formatUUID writes a CUDA device UUID the way NVML does.
func formatUUID(u [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
