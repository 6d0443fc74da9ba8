package cuda

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"atoll/gpu"
)

func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		call string
		code Result
		want error // the specific sentinel, nil for ErrDriver only
		msg  string
	}{
		{"cuLaunchKernel", 1, gpu.ErrInvalidLaunch, "cuda: cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (1)"},
		{"cuMemAlloc_v2", 1, nil, "cuda: cuMemAlloc_v2: CUDA_ERROR_INVALID_VALUE (1)"},
		{"cuMemAlloc_v2", 2, gpu.ErrOutOfMemory, "cuda: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)"},
		{"cuLaunchKernel", 701, gpu.ErrInvalidLaunch, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701)"},
		{"cuEventQuery", 600, gpu.ErrNotReady, "CUDA_ERROR_NOT_READY (600)"},
		{"cuEventRecord", 400, gpu.ErrInvalidHandle, "CUDA_ERROR_INVALID_HANDLE (400)"},
		{"cuStreamCreateWithPriority", 201, gpu.ErrInvalidHandle, "CUDA_ERROR_INVALID_CONTEXT (201)"},
		{"cuInit", 999, gpu.ErrNoDevice, "cuda: cuInit: CUDA_ERROR_UNKNOWN (999)"},
		{"cuInit", 100, gpu.ErrNoDevice, "CUDA_ERROR_NO_DEVICE (100)"},
		{"cuDevicePrimaryCtxRetain", 46, gpu.ErrNoDevice, "CUDA_ERROR_DEVICE_UNAVAILABLE (46)"},
		{"cuModuleLoadData", 218, nil, "CUDA_ERROR_INVALID_PTX (218)"},
		{"cuLaunchKernel", 700, nil, "CUDA_ERROR_ILLEGAL_ADDRESS (700)"},
		{"cuLaunchKernel", 4242, nil, "CUDA_ERROR_4242 (4242)"},
	} {
		err := check(tc.call, tc.code)
		if err == nil {
			t.Fatalf("check(%s, %d) = nil", tc.call, tc.code)
		}
		if !errors.Is(err, gpu.ErrDriver) {
			t.Errorf("%v does not wrap gpu.ErrDriver", err)
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%v does not wrap %v", err, tc.want)
		}
		for _, other := range []error{gpu.ErrInvalidLaunch, gpu.ErrOutOfMemory, gpu.ErrNotReady, gpu.ErrInvalidHandle, gpu.ErrNoDevice} {
			if other != tc.want && errors.Is(err, other) {
				t.Errorf("%v wraps %v too", err, other)
			}
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("message %q lacks %q", err.Error(), tc.msg)
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != tc.code || e.Call != tc.call {
			t.Errorf("errors.As(%v) = %+v", err, e)
		}
	}
	if check("cuInit", 0) != nil {
		t.Error("check of CUDA_SUCCESS is not nil")
	}
}

func TestResultNamesUnique(t *testing.T) {
	seen := map[string]Result{}
	for r, n := range resultNames {
		if !strings.HasPrefix(n, "CUDA_") {
			t.Errorf("%d: %q", r, n)
		}
		if o, dup := seen[n]; dup {
			t.Errorf("%q for both %d and %d", n, o, r)
		}
		seen[n] = r
	}
}

func TestPackExtra(t *testing.T) {
	m := new(cmem)
	m.initExtra()
	var a gpu.Args
	a.Ptr(0x1122334455667788).U32(7) // 12 bytes, padded to 16 by Bytes
	b := a.Bytes()
	if len(b) != 16 {
		t.Fatalf("packed %d bytes", len(b))
	}
	extra, err := packExtra(m, b, 12)
	if err != nil {
		t.Fatal(err)
	}
	if extra != uintptr(unsafe.Pointer(&m.extra[0])) {
		t.Fatalf("extra = %#x, want the scratch array", extra)
	}
	want := [5]uintptr{launchParamBufferPtr, uintptr(unsafe.Pointer(&m.args[0])), launchParamBufferSize, uintptr(unsafe.Pointer(&m.argSize)), launchParamEnd}
	if m.extra != want {
		t.Errorf("extra = %#x, want %#x", m.extra, want)
	}
	if m.argSize != 12 {
		t.Errorf("size = %d, want the kernel's 12", m.argSize)
	}
	if string(m.args[:12]) != string(b[:12]) {
		t.Errorf("args = % x, want % x", m.args[:12], b[:12])
	}
	// Unknown parameter size: the padded buffer goes as is.
	if _, err := packExtra(m, b, 0); err != nil || m.argSize != 16 {
		t.Errorf("unknown size: err %v size %d", err, m.argSize)
	}
	// No arguments: no extra.
	if x, err := packExtra(m, nil, 0); x != 0 || err != nil {
		t.Errorf("no args: %#x %v", x, err)
	}
	// Wrong sizes are invalid launches.
	for _, size := range []int{20, 8} {
		if _, err := packExtra(m, b, size); !errors.Is(err, gpu.ErrInvalidLaunch) {
			t.Errorf("kernel size %d, args 16: err %v", size, err)
		}
	}
	big := make([]byte, maxArgBytes+8)
	if _, err := packExtra(m, big, 0); !errors.Is(err, gpu.ErrInvalidLaunch) {
		t.Errorf("oversized args: %v", err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = packExtra(m, b, 12) }); n != 0 {
		t.Errorf("packExtra allocates %v times", n)
	}
}

func TestNoDriver(t *testing.T) {
	_, err := openDriver([]string{"libcuda-atoll-test-missing.so.1"})
	if !errors.Is(err, gpu.ErrNoDevice) {
		t.Fatalf("err = %v, want gpu.ErrNoDevice", err)
	}
	if !strings.Contains(err.Error(), "run with the simulator") {
		t.Errorf("message does not say what to do: %v", err)
	}
}

// Open must never fail with anything but ErrNoDevice on a machine without a
// GPU, and must never panic or exit.
func TestOpenHereOrNoDevice(t *testing.T) {
	d, err := Open(0)
	if err != nil {
		if !errors.Is(err, gpu.ErrNoDevice) {
			t.Fatalf("Open: %v (want success or gpu.ErrNoDevice)", err)
		}
		t.Logf("no GPU here: %v", err)
		return
	}
	defer d.Close()
	if _, err := Open(1 << 20); !errors.Is(err, gpu.ErrNoDevice) {
		t.Errorf("Open(huge ordinal): %v, want gpu.ErrNoDevice", err)
	}
}

func TestNoNVRTC(t *testing.T) {
	_, err := openNVRTC([]string{"libnvrtc-atoll-test-missing.so"})
	if !errors.Is(err, ErrNoNVRTC) {
		t.Fatalf("err = %v, want ErrNoNVRTC", err)
	}
	if !strings.Contains(err.Error(), "PTX") {
		t.Errorf("message does not offer the alternative: %v", err)
	}
}

func TestCacheKey(t *testing.T) {
	base := cacheKey("src", []string{"-a"}, 90, "13.0")
	if base != cacheKey("src", []string{"-a"}, 90, "13.0") {
		t.Fatal("key not stable")
	}
	for name, k := range map[string]string{
		"source":  cacheKey("src2", []string{"-a"}, 90, "13.0"),
		"options": cacheKey("src", []string{"-b"}, 90, "13.0"),
		"arch":    cacheKey("src", []string{"-a"}, 80, "13.0"),
		"version": cacheKey("src", []string{"-a"}, 90, "12.9"),
		"split":   cacheKey("src", []string{"-", "a"}, 90, "13.0"),
	} {
		if k == base {
			t.Errorf("changing the %s does not change the key", name)
		}
	}
}

func TestFormatUUID(t *testing.T) {
	u := [16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	if got, want := formatUUID(u), "GPU-deadbeef-0102-0304-0506-0708090a0b0c"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
}

func TestInventoryHereOrNoDevice(t *testing.T) {
	inv, err := Inventory()
	if err != nil {
		if !errors.Is(err, gpu.ErrNoDevice) {
			t.Fatalf("Inventory: %v (want success or gpu.ErrNoDevice)", err)
		}
		t.Logf("no inventory here: %v", err)
		return
	}
	for _, d := range inv {
		t.Logf("%+v", d)
		if d.Name == "" || d.MemoryTotal == 0 {
			t.Errorf("incomplete inventory entry %+v", d)
		}
	}
}
