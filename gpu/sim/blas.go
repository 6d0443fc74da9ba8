package sim

import (
	"errors"
	"fmt"

	"atoll/gpu"
)

var _ gpu.BLAS = (*Device)(nil)

// Matmul implements gpu.BLAS when Config.BLAS is set: the same m gives the
// same Func, named after m, timed by its launches' Cost.
func (d *Device) Matmul(m gpu.Matmul) (gpu.Func, error) {
	return d.blasFunc(m.Check, gpu.VendorMatmulPrefix+m.String())
}

// Conv implements gpu.BLAS when Config.BLAS is set, as Matmul does.
func (d *Device) Conv(c gpu.Conv) (gpu.Func, error) {
	return d.blasFunc(c.Check, gpu.VendorConvPrefix+c.String())
}

// blasFunc is the Func named name for a vendor call that check accepts.
func (d *Device) blasFunc(check func() error, name string) (gpu.Func, error) {
	if d.closed {
		return 0, errClosed
	}
	if !d.cfg.BLAS {
		return 0, fmt.Errorf("%w: sim: no BLAS (Config.BLAS is off)", errors.ErrUnsupported)
	}
	if err := check(); err != nil {
		return 0, err
	}
	return (&module{d: d}).Function(name)
}

// BLASName implements gpu.BLAS.
func (d *Device) BLASName() string {
	if !d.cfg.BLAS {
		return "none (simulator without BLAS)"
	}
	return "simulated BLAS"
}
