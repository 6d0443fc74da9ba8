//go:build !cgo

package cuda

import (
	"fmt"

	"atoll/gpu"
)

// Inventory needs NVML through go-nvml, which needs cgo. This binary was
// built with CGO_ENABLED=0, so Inventory reports no device; the driver
// backend (Open) works regardless.
func Inventory() ([]DeviceInfo, error) {
	return nil, fmt.Errorf("%w: cuda: Inventory needs NVML, and this binary was built without cgo (CGO_ENABLED=0): rebuild with cgo, or use Open for the driver view", gpu.ErrNoDevice)
}
