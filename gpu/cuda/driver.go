package cuda

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/ebitengine/purego"

	"atoll/gpu"
)

// driverLibs are the names tried, in order, to load the CUDA driver. Tests
// replace it to simulate a machine without a driver.
var driverLibs = []string{"libcuda.so.1", "libcuda.so"}

// driver holds the entry points of libcuda, resolved by their real ABI names
// (the _v2 names cuda.h maps the plain ones to).
type driver struct {
	lib uintptr

	cuInit                      uintptr
	cuDriverGetVersion          uintptr
	cuDeviceGet                 uintptr
	cuDeviceGetCount            uintptr
	cuDeviceGetName             uintptr
	cuDeviceGetAttribute        uintptr
	cuDeviceTotalMem            uintptr // cuDeviceTotalMem_v2
	cuDevicePrimaryCtxRetain    uintptr
	cuDevicePrimaryCtxRelease   uintptr // _v2
	cuCtxSetCurrent             uintptr
	cuCtxGetCurrent             uintptr
	cuCtxSynchronize            uintptr
	cuCtxGetStreamPriorityRange uintptr
	cuCtxDestroy                uintptr // _v2
	cuCtxCreateV2               uintptr // optional: cuCtxCreate_v2(ctx*, flags, dev)
	cuCtxCreateV4               uintptr // optional: cuCtxCreate_v4(ctx*, params*, flags, dev)
	cuStreamCreateWithPriority  uintptr
	cuStreamDestroy             uintptr // _v2
	cuStreamSynchronize         uintptr
	cuEventCreate               uintptr
	cuEventDestroy              uintptr // _v2
	cuEventRecord               uintptr
	cuEventQuery                uintptr
	cuEventSynchronize          uintptr
	cuEventElapsedTime          uintptr // plain name; _v2 where only that exists
	cuMemAlloc                  uintptr // _v2
	cuMemFree                   uintptr // _v2
	cuMemcpyHtoDAsync           uintptr // _v2
	cuMemcpyDtoHAsync           uintptr // _v2
	cuMemsetD32Async            uintptr
	cuMemHostAlloc              uintptr
	cuMemFreeHost               uintptr
	cuMemHostGetDevicePointer   uintptr // _v2
	cuModuleLoadData            uintptr
	cuModuleUnload              uintptr
	cuModuleGetFunction         uintptr
	cuFuncGetAttribute          uintptr
	cuFuncSetAttribute          uintptr
	cuLaunchKernel              uintptr
	cuGetErrorName              uintptr // optional
	cuFuncGetParamInfo          uintptr // optional (CUDA 12.4+): exact kernel parameter sizes
	part                        partitionDriver
	graph                       graphDriver

	ctxCreateName string // which context-creation entry point NewContext uses
}

var (
	drvOnce sync.Once
	drv     *driver
	drvErr  error
)

// loadDriver opens libcuda once per process and calls cuInit(0).
func loadDriver() (*driver, error) {
	drvOnce.Do(func() { drv, drvErr = openDriver(driverLibs) })
	return drv, drvErr
}

func openDriver(names []string) (*driver, error) {
	lib, _, errs := dlopenFirst(names)
	if lib == 0 {
		return nil, fmt.Errorf("%w: no NVIDIA driver found (%s): run with the simulator, or install the driver (%s)",
			gpu.ErrNoDevice, strings.Join(names, ", "), strings.Join(errs, "; "))
	}
	d := &driver{lib: lib}
	var missing []string
	sym := func(p *uintptr, names ...string) {
		for _, n := range names {
			if f, err := purego.Dlsym(lib, n); err == nil && f != 0 {
				*p = f
				return
			}
		}
		missing = append(missing, names[0])
	}
	opt := func(p *uintptr, name string) {
		if f, err := purego.Dlsym(lib, name); err == nil {
			*p = f
		}
	}
	sym(&d.cuInit, "cuInit")
	sym(&d.cuDriverGetVersion, "cuDriverGetVersion")
	sym(&d.cuDeviceGet, "cuDeviceGet")
	sym(&d.cuDeviceGetCount, "cuDeviceGetCount")
	sym(&d.cuDeviceGetName, "cuDeviceGetName")
	sym(&d.cuDeviceGetAttribute, "cuDeviceGetAttribute")
	sym(&d.cuDeviceTotalMem, "cuDeviceTotalMem_v2")
	sym(&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
	sym(&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")
	sym(&d.cuCtxSetCurrent, "cuCtxSetCurrent")
	sym(&d.cuCtxGetCurrent, "cuCtxGetCurrent")
	sym(&d.cuCtxSynchronize, "cuCtxSynchronize")
	sym(&d.cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange")
	sym(&d.cuCtxDestroy, "cuCtxDestroy_v2")
	opt(&d.cuCtxCreateV2, "cuCtxCreate_v2")
	opt(&d.cuCtxCreateV4, "cuCtxCreate_v4")
	sym(&d.cuStreamCreateWithPriority, "cuStreamCreateWithPriority")
	sym(&d.cuStreamDestroy, "cuStreamDestroy_v2")
	sym(&d.cuStreamSynchronize, "cuStreamSynchronize")
	sym(&d.cuEventCreate, "cuEventCreate")
	sym(&d.cuEventDestroy, "cuEventDestroy_v2")
	sym(&d.cuEventRecord, "cuEventRecord")
	sym(&d.cuEventQuery, "cuEventQuery")
	sym(&d.cuEventSynchronize, "cuEventSynchronize")
	sym(&d.cuEventElapsedTime, "cuEventElapsedTime", "cuEventElapsedTime_v2")
	sym(&d.cuMemAlloc, "cuMemAlloc_v2")
	sym(&d.cuMemFree, "cuMemFree_v2")
	sym(&d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")
	sym(&d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
	sym(&d.cuMemsetD32Async, "cuMemsetD32Async")
	sym(&d.cuMemHostAlloc, "cuMemHostAlloc")
	sym(&d.cuMemFreeHost, "cuMemFreeHost")
	sym(&d.cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2")
	sym(&d.cuModuleLoadData, "cuModuleLoadData")
	sym(&d.cuModuleUnload, "cuModuleUnload")
	sym(&d.cuModuleGetFunction, "cuModuleGetFunction")
	sym(&d.cuFuncGetAttribute, "cuFuncGetAttribute")
	sym(&d.cuFuncSetAttribute, "cuFuncSetAttribute")
	sym(&d.cuLaunchKernel, "cuLaunchKernel")
	opt(&d.cuGetErrorName, "cuGetErrorName")
	opt(&d.cuFuncGetParamInfo, "cuFuncGetParamInfo")
	opt(&d.part.cuDeviceGetDevResource, "cuDeviceGetDevResource")
	opt(&d.part.cuDevSmResourceSplitByCount, "cuDevSmResourceSplitByCount")
	opt(&d.part.cuDevResourceGenerateDesc, "cuDevResourceGenerateDesc")
	opt(&d.part.cuGreenCtxCreate, "cuGreenCtxCreate")
	opt(&d.part.cuGreenCtxDestroy, "cuGreenCtxDestroy")
	opt(&d.part.cuCtxFromGreenCtx, "cuCtxFromGreenCtx")
	d.graph.load(opt)
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: the NVIDIA driver is too old: libcuda lacks %s (need a CUDA 12 or newer driver)",
			gpu.ErrNoDevice, strings.Join(missing, ", "))
	}
	switch {
	case d.cuCtxCreateV2 != 0:
		d.ctxCreateName = "cuCtxCreate_v2"
	case d.cuCtxCreateV4 != 0:
		d.ctxCreateName = "cuCtxCreate_v4"
	}
	if err := check("cuInit", d.call(d.cuInit, 0)); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Hint = "the driver is installed but no GPU can be used: run with the simulator, or check nvidia-smi"
		}
		return nil, err
	}
	return d, nil
}

// call invokes a driver entry point. Arguments that are pointers converted to
// uintptr at the call site are kept alive (and, for stack objects, moved to
// the heap) for the duration of the call by go:uintptrescapes; the hot path
// passes only addresses of memory outside the Go heap, so it does not
// allocate.
//
//go:uintptrescapes
func (d *driver) call(fn uintptr, args ...uintptr) Result {
	r, _, _ := purego.SyscallN(fn, args...)
	return Result(int32(r))
}

func dlsym(lib uintptr, name string) (uintptr, error) { return purego.Dlsym(lib, name) }
