package cuda

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"atoll/gpu"
)

// CUdevResource as cuda.h lays it out (CUDA 12.4 to 13): a 4-byte type, 92
// bytes of driver-internal padding, then a union whose SM member starts
// with smCount. The driver writes whole structs, so each buffer here is
// larger than any layout it might use.
const (
	devResourceBytes    = 1024
	devResourceTypeSM   = 1
	devResourceSMCount  = 96 // offset of sm.smCount
	greenCtxDefaultStrm = 0x1
)

// partitionDriver holds the green-context entry points (CUDA 12.4+), all
// optional: a driver without them cannot partition.
type partitionDriver struct {
	cuDeviceGetDevResource      uintptr
	cuDevSmResourceSplitByCount uintptr
	cuDevResourceGenerateDesc   uintptr
	cuGreenCtxCreate            uintptr
	cuGreenCtxDestroy           uintptr
	cuCtxFromGreenCtx           uintptr
}

func (p *partitionDriver) ok() bool {
	return p.cuDeviceGetDevResource != 0 && p.cuDevSmResourceSplitByCount != 0 && p.cuDevResourceGenerateDesc != 0 &&
		p.cuGreenCtxCreate != 0 && p.cuGreenCtxDestroy != 0 && p.cuCtxFromGreenCtx != 0
}

// NewPartition makes a green context of sms SMs (cuDevSmResourceSplitByCount
// on the device's SM resource, cuGreenCtxCreate) and returns it as a
// context: streams made in it run on those SMs only, concurrently with the
// primary context's streams. It shares the primary context's memory and
// host words; modules load into it when a launch first needs them there;
// events work across it. sms must be a multiple of Spec.PartitionStep.
// Asking again for a size already made returns the same context.
func (d *Device) NewPartition(sms int) (gpu.Context, error) {
	return d.partition(sms, false)
}

// NewPartitionRest makes a green context of the SMs the split of
// NewPartition(sms) leaves (the split's remaining resource): the driver's
// split is made the same way for both, so the two share no SM
// (TestGPUPartitionRest checks it with SM ids).
func (d *Device) NewPartitionRest(sms int) (gpu.Context, error) {
	return d.partition(sms, true)
}

// partition makes the green context of a split of sms SMs, or of what it
// leaves.
func (d *Device) partition(sms int, rest bool) (gpu.Context, error) {
	if err := d.live(); err != nil {
		return 0, err
	}
	if err := gpu.CheckPartition(d.info.Spec, sms); err != nil {
		return 0, err
	}
	// A partition holds no state but its SMs: one of each size is made
	// and shared, so that runs on one device do not pile up contexts.
	for c, cr := range d.ctxs {
		if cr.green != 0 && cr.sms == sms && cr.rest == rest {
			return gpu.Context(c), nil
		}
	}
	pd := &d.drv.part
	if !pd.ok() {
		return 0, fmt.Errorf("%w: cuda: this driver (%s) has no green contexts (cuGreenCtxCreate needs CUDA 12.4 or newer)", gpu.ErrDriver, d.info.Driver)
	}
	if len(d.ctxs) >= maxContexts {
		return 0, fmt.Errorf("%w: cuda: at most %d contexts per device", gpu.ErrDriver, maxContexts)
	}
	buf := make([]byte, 3*devResourceBytes) // all, result, remaining
	all := unsafe.Pointer(&buf[0])
	res := unsafe.Pointer(&buf[devResourceBytes])
	rem := unsafe.Pointer(&buf[2*devResourceBytes])
	if err := check("cuDeviceGetDevResource", d.drv.call(pd.cuDeviceGetDevResource, d.dev, uintptr(all), devResourceTypeSM)); err != nil {
		return 0, err
	}
	if have := int(binary.LittleEndian.Uint32(buf[devResourceSMCount:])); have != d.info.Spec.SMs {
		return 0, fmt.Errorf("%w: cuda: the device's SM resource reports %d SMs, the device %d (unknown CUdevResource layout?)", gpu.ErrDriver, have, d.info.Spec.SMs)
	}
	groups := uint32(1)
	if err := check("cuDevSmResourceSplitByCount", d.drv.call(pd.cuDevSmResourceSplitByCount,
		uintptr(res), uintptr(unsafe.Pointer(&groups)), uintptr(all), uintptr(rem), 0, uintptr(sms))); err != nil {
		return 0, err
	}
	if got := int(binary.LittleEndian.Uint32(buf[devResourceBytes+devResourceSMCount:])); groups != 1 || got != sms {
		return 0, fmt.Errorf("%w: cuda: asked the driver for one group of %d SMs, got %d group(s) of %d", gpu.ErrDriver, sms, groups, got)
	}
	use := res
	if rest {
		use = rem
		if left := int(binary.LittleEndian.Uint32(buf[2*devResourceBytes+devResourceSMCount:])); left != d.info.Spec.SMs-sms {
			return 0, fmt.Errorf("%w: cuda: a split of %d SMs left %d of the device's %d", gpu.ErrDriver, sms, left, d.info.Spec.SMs)
		}
	}
	var desc, green, h uintptr
	if err := check("cuDevResourceGenerateDesc", d.drv.call(pd.cuDevResourceGenerateDesc, uintptr(unsafe.Pointer(&desc)), uintptr(use), 1)); err != nil {
		return 0, err
	}
	if err := check("cuGreenCtxCreate", d.drv.call(pd.cuGreenCtxCreate, uintptr(unsafe.Pointer(&green)), desc, d.dev, greenCtxDefaultStrm)); err != nil {
		return 0, err
	}
	if err := check("cuCtxFromGreenCtx", d.drv.call(pd.cuCtxFromGreenCtx, uintptr(unsafe.Pointer(&h)), green)); err != nil {
		_ = d.drv.call(pd.cuGreenCtxDestroy, green)
		return 0, err
	}
	c := int32(len(d.ctxs))
	d.ctxs = append(d.ctxs, ctxRec{h: h, green: green, sms: sms, rest: rest})
	if err := d.initContext(c); err != nil {
		return 0, err
	}
	if err := d.use(0); err != nil {
		return 0, err
	}
	return gpu.Context(c), nil
}
