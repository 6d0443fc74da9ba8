package cuda

import (
	"errors"
	"fmt"

	"atoll/gpu"
)

// ErrNoNVRTC: the NVRTC library (libnvrtc.so) could not be loaded, so CUDA C
// sources cannot be compiled at run time. Ship PTX or a cubin instead, or
// install the CUDA runtime compiler (package cuda-nvrtc).
var ErrNoNVRTC = errors.New("cuda: NVRTC not found (tried libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so): install cuda-nvrtc or load PTX/cubin instead of CUDA C")

// ErrCompile: NVRTC rejected a CUDA C source. The error text carries the
// compiler log.
var ErrCompile = errors.New("cuda: compile failed")

// Result is a CUDA driver API status code (CUresult).
type Result int32

// CUresult values the backend treats specially. The full name table is
// resultNames.
const (
	resultSuccess            Result = 0
	resultInvalidValue       Result = 1
	resultOutOfMemory        Result = 2
	resultNotInitialized     Result = 3
	resultStubLibrary        Result = 34
	resultDeviceUnavailable  Result = 46
	resultNoDevice           Result = 100
	resultInvalidDevice      Result = 101
	resultInvalidContext     Result = 201
	resultInvalidHandle      Result = 400
	resultNotFound           Result = 500
	resultNotReady           Result = 600
	resultLaunchOutOfRes     Result = 701
	resultContextIsDestroyed Result = 709
	resultCoopTooLarge       Result = 720
	resultSystemDriverMism   Result = 803
	resultCompatNotSupported Result = 804
	resultInvalidClusterSize Result = 912
)

// resultNames is cuda.h's CUresult enum (CUDA 13.0).
var resultNames = map[Result]string{
	0:   "CUDA_SUCCESS",
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	4:   "CUDA_ERROR_DEINITIALIZED",
	5:   "CUDA_ERROR_PROFILER_DISABLED",
	6:   "CUDA_ERROR_PROFILER_NOT_INITIALIZED",
	7:   "CUDA_ERROR_PROFILER_ALREADY_STARTED",
	8:   "CUDA_ERROR_PROFILER_ALREADY_STOPPED",
	34:  "CUDA_ERROR_STUB_LIBRARY",
	46:  "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE",
	102: "CUDA_ERROR_DEVICE_NOT_LICENSED",
	200: "CUDA_ERROR_INVALID_IMAGE",
	201: "CUDA_ERROR_INVALID_CONTEXT",
	202: "CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
	205: "CUDA_ERROR_MAP_FAILED",
	206: "CUDA_ERROR_UNMAP_FAILED",
	207: "CUDA_ERROR_ARRAY_IS_MAPPED",
	208: "CUDA_ERROR_ALREADY_MAPPED",
	209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	210: "CUDA_ERROR_ALREADY_ACQUIRED",
	211: "CUDA_ERROR_NOT_MAPPED",
	212: "CUDA_ERROR_NOT_MAPPED_AS_ARRAY",
	213: "CUDA_ERROR_NOT_MAPPED_AS_POINTER",
	214: "CUDA_ERROR_ECC_UNCORRECTABLE",
	215: "CUDA_ERROR_UNSUPPORTED_LIMIT",
	216: "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
	217: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
	218: "CUDA_ERROR_INVALID_PTX",
	219: "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT",
	220: "CUDA_ERROR_NVLINK_UNCORRECTABLE",
	221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
	222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	223: "CUDA_ERROR_JIT_COMPILATION_DISABLED",
	224: "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
	225: "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC",
	226: "CUDA_ERROR_CONTAINED",
	300: "CUDA_ERROR_INVALID_SOURCE",
	301: "CUDA_ERROR_FILE_NOT_FOUND",
	302: "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
	303: "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
	304: "CUDA_ERROR_OPERATING_SYSTEM",
	400: "CUDA_ERROR_INVALID_HANDLE",
	401: "CUDA_ERROR_ILLEGAL_STATE",
	402: "CUDA_ERROR_LOSSY_QUERY",
	500: "CUDA_ERROR_NOT_FOUND",
	600: "CUDA_ERROR_NOT_READY",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT",
	703: "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING",
	704: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
	705: "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
	708: "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
	709: "CUDA_ERROR_CONTEXT_IS_DESTROYED",
	710: "CUDA_ERROR_ASSERT",
	711: "CUDA_ERROR_TOO_MANY_PEERS",
	712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	713: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
	715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
	716: "CUDA_ERROR_MISALIGNED_ADDRESS",
	717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
	718: "CUDA_ERROR_INVALID_PC",
	719: "CUDA_ERROR_LAUNCH_FAILED",
	720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
	721: "CUDA_ERROR_TENSOR_MEMORY_LEAK",
	800: "CUDA_ERROR_NOT_PERMITTED",
	801: "CUDA_ERROR_NOT_SUPPORTED",
	802: "CUDA_ERROR_SYSTEM_NOT_READY",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	805: "CUDA_ERROR_MPS_CONNECTION_FAILED",
	806: "CUDA_ERROR_MPS_RPC_FAILURE",
	807: "CUDA_ERROR_MPS_SERVER_NOT_READY",
	808: "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED",
	809: "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED",
	810: "CUDA_ERROR_MPS_CLIENT_TERMINATED",
	811: "CUDA_ERROR_CDP_NOT_SUPPORTED",
	812: "CUDA_ERROR_CDP_VERSION_MISMATCH",
	900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	902: "CUDA_ERROR_STREAM_CAPTURE_MERGE",
	903: "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
	904: "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
	905: "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
	906: "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
	907: "CUDA_ERROR_CAPTURED_EVENT",
	908: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
	909: "CUDA_ERROR_TIMEOUT",
	910: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
	911: "CUDA_ERROR_EXTERNAL_DEVICE",
	912: "CUDA_ERROR_INVALID_CLUSTER_SIZE",
	913: "CUDA_ERROR_FUNCTION_NOT_LOADED",
	914: "CUDA_ERROR_INVALID_RESOURCE_TYPE",
	915: "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
	916: "CUDA_ERROR_KEY_ROTATION",
	999: "CUDA_ERROR_UNKNOWN",
}

// String is the cuda.h name of the code, or CUDA_ERROR_<n> for a code this
// table does not know (a newer driver).
func (r Result) String() string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return fmt.Sprintf("CUDA_ERROR_%d", int32(r))
}

// Error is a failed driver call. errors.Is(err, gpu.ErrDriver) holds for every
// Error; the more specific gpu sentinel (ErrOutOfMemory, ErrInvalidLaunch,
// ErrInvalidHandle, ErrNotReady, ErrNoDevice) holds too where it fits.
type Error struct {
	Call string // driver entry point, e.g. "cuLaunchKernel"
	Code Result
	Hint string // optional: what to do about it
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Code, int32(e.Code))
	if e.Hint != "" {
		s += ": " + e.Hint
	}
	return s
}

// Unwrap returns the gpu sentinels the error matches.
func (e *Error) Unwrap() []error {
	if k := kindOf(e.Call, e.Code); k != nil {
		return []error{k, gpu.ErrDriver}
	}
	return []error{gpu.ErrDriver}
}

// kindOf maps a failed call to the specific gpu sentinel, or nil if only
// gpu.ErrDriver fits.
func kindOf(call string, r Result) error {
	if call == "cuInit" || call == "cuDeviceGet" || call == "cuDeviceGetCount" {
		// Any failure to bring the driver up means "no usable device":
		// no GPU, a driver/kernel-module mismatch, a stub library...
		return gpu.ErrNoDevice
	}
	switch r {
	case resultOutOfMemory:
		return gpu.ErrOutOfMemory
	case resultLaunchOutOfRes, resultCoopTooLarge, resultInvalidClusterSize:
		return gpu.ErrInvalidLaunch
	case resultInvalidValue:
		if call == "cuLaunchKernel" || call == "cuFuncSetAttribute" {
			return gpu.ErrInvalidLaunch
		}
	case resultInvalidHandle, resultInvalidContext, resultContextIsDestroyed:
		return gpu.ErrInvalidHandle
	case resultNotReady:
		return gpu.ErrNotReady
	case resultNoDevice, resultInvalidDevice, resultStubLibrary, resultDeviceUnavailable,
		resultSystemDriverMism, resultCompatNotSupported, resultNotInitialized:
		return gpu.ErrNoDevice
	}
	return nil
}

// check turns a CUresult into nil or an *Error.
func check(call string, r Result) error {
	if r == resultSuccess {
		return nil
	}
	return &Error{Call: call, Code: r}
}
