package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"atoll/gpu"
)

// nvrtcLibs are the NVRTC libraries tried, in order. Tests replace it.
var nvrtcLibs = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}

type nvrtcLib struct {
	name                 string
	major, minor         int32
	nvrtcGetErrorString  uintptr
	nvrtcVersion         uintptr
	nvrtcCreateProgram   uintptr
	nvrtcDestroyProgram  uintptr
	nvrtcCompileProgram  uintptr
	nvrtcGetProgramLog   uintptr
	nvrtcGetProgramLogSz uintptr
	nvrtcGetPTX          uintptr
	nvrtcGetPTXSize      uintptr
	nvrtcGetCUBIN        uintptr
	nvrtcGetCUBINSize    uintptr
}

var (
	nvrtcOnce sync.Once
	nvrtcL    *nvrtcLib
	nvrtcErr  error
)

func loadNVRTC() (*nvrtcLib, error) {
	nvrtcOnce.Do(func() { nvrtcL, nvrtcErr = openNVRTC(nvrtcLibs) })
	return nvrtcL, nvrtcErr
}

// dlopenFirst opens the first of names that loads, and says why each
// before it did not.
func dlopenFirst(names []string) (h uintptr, name string, errs []string) {
	for _, n := range names {
		lib, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err == nil {
			return lib, n, errs
		}
		errs = append(errs, err.Error())
	}
	return 0, "", errs
}

// symbols resolves entry points of one library, collecting the names it
// lacks.
type symbols struct {
	lib     uintptr
	missing []string
}

// need stores name's address at p, or records name as missing.
func (s *symbols) need(p *uintptr, name string) {
	f, err := purego.Dlsym(s.lib, name)
	if err != nil || f == 0 {
		s.missing = append(s.missing, name)
		return
	}
	*p = f
}

func openNVRTC(names []string) (*nvrtcLib, error) {
	h, name, errs := dlopenFirst(names)
	if h == 0 {
		return nil, fmt.Errorf("%w (%s)", ErrNoNVRTC, strings.Join(errs, "; "))
	}
	l := &nvrtcLib{name: name}
	syms := symbols{lib: h}
	sym := syms.need
	sym(&l.nvrtcGetErrorString, "nvrtcGetErrorString")
	sym(&l.nvrtcVersion, "nvrtcVersion")
	sym(&l.nvrtcCreateProgram, "nvrtcCreateProgram")
	sym(&l.nvrtcDestroyProgram, "nvrtcDestroyProgram")
	sym(&l.nvrtcCompileProgram, "nvrtcCompileProgram")
	sym(&l.nvrtcGetProgramLog, "nvrtcGetProgramLog")
	sym(&l.nvrtcGetProgramLogSz, "nvrtcGetProgramLogSize")
	sym(&l.nvrtcGetPTX, "nvrtcGetPTX")
	sym(&l.nvrtcGetPTXSize, "nvrtcGetPTXSize")
	sym(&l.nvrtcGetCUBIN, "nvrtcGetCUBIN")
	sym(&l.nvrtcGetCUBINSize, "nvrtcGetCUBINSize")
	if len(syms.missing) > 0 {
		return nil, fmt.Errorf("%w: %s lacks %s (need NVRTC 11.1 or newer)", ErrNoNVRTC, name, strings.Join(syms.missing, ", "))
	}
	if r := l.call(l.nvrtcVersion, uintptr(unsafe.Pointer(&l.major)), uintptr(unsafe.Pointer(&l.minor))); r != 0 {
		return nil, fmt.Errorf("%w: nvrtcVersion failed (%d)", ErrNoNVRTC, r)
	}
	return l, nil
}

//go:uintptrescapes
func (l *nvrtcLib) call(fn uintptr, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(r)
}

func (l *nvrtcLib) errorString(r int32) string {
	p, _, _ := purego.SyscallN(l.nvrtcGetErrorString, uintptr(r))
	if p == 0 {
		return fmt.Sprintf("NVRTC error %d", r)
	}
	return goString(p)
}

// goString copies a NUL-terminated C string.
func goString(p uintptr) string {
	var b []byte
	for i := uintptr(0); i < 4096; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(nil), p+i)) //nolint:govet // C memory
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// NVRTCVersion is the version of the NVRTC library found, e.g. "13.0".
func NVRTCVersion() (string, error) {
	l, err := loadNVRTC()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d.%d", l.major, l.minor), nil
}

func cstr(s string) []byte { return append([]byte(s), 0) }

// Compile compiles CUDA C source with NVRTC. arch > 0 compiles for the real
// architecture sm_<arch> (e.g. 90) and returns a cubin; arch < 0 compiles for
// the virtual architecture compute_<-arch> and returns PTX. opts are further
// NVRTC options (e.g. "-lineinfo", "--use_fast_math"). On a compile error it
// returns the NVRTC log in log and an error wrapping ErrCompile that includes
// it; without NVRTC the error wraps ErrNoNVRTC.
func Compile(src, name string, arch int, opts ...string) (ptxOrCubin []byte, log string, err error) {
	l, err := loadNVRTC()
	if err != nil {
		return nil, "", err
	}
	if arch == 0 {
		return nil, "", errors.New("cuda: Compile: arch must be nonzero (90 for sm_90 cubin, -90 for compute_90 PTX)")
	}
	if name == "" {
		name = "atoll.cu"
	}
	// NVRTC is thread safe for distinct programs (its user guide,
	// "Thread Safety"): compiles run in parallel (kernels.Precompile).
	csrc, cname := cstr(src), cstr(name)
	var prog uintptr
	if r := l.call(l.nvrtcCreateProgram, uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0); r != 0 {
		return nil, "", fmt.Errorf("cuda: nvrtcCreateProgram: %s", l.errorString(r))
	}
	defer l.call(l.nvrtcDestroyProgram, uintptr(unsafe.Pointer(&prog)))

	archOpt := fmt.Sprintf("--gpu-architecture=sm_%d", arch)
	if arch < 0 {
		archOpt = fmt.Sprintf("--gpu-architecture=compute_%d", -arch)
	}
	all := append([]string{archOpt}, opts...)
	cs := make([][]byte, len(all))
	ptrs := make([]uintptr, len(all))
	for i, o := range all {
		cs[i] = cstr(o)
		ptrs[i] = uintptr(unsafe.Pointer(&cs[i][0]))
	}
	r := l.call(l.nvrtcCompileProgram, prog, uintptr(len(ptrs)), uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(cs)
	runtime.KeepAlive(csrc)

	var logSize uint64
	if l.call(l.nvrtcGetProgramLogSz, prog, uintptr(unsafe.Pointer(&logSize))) == 0 && logSize > 1 {
		buf := make([]byte, logSize)
		if l.call(l.nvrtcGetProgramLog, prog, uintptr(unsafe.Pointer(&buf[0]))) == 0 {
			log = string(bytes.TrimRight(buf, "\x00"))
		}
	}
	if r != 0 {
		return nil, log, fmt.Errorf("%w: %s (%s, %s): %s\n%s", ErrCompile, name, archOpt, l.errorString(r), strings.Join(opts, " "), log)
	}
	sizeFn, getFn := l.nvrtcGetCUBINSize, l.nvrtcGetCUBIN
	if arch < 0 {
		sizeFn, getFn = l.nvrtcGetPTXSize, l.nvrtcGetPTX
	}
	var size uint64
	if r := l.call(sizeFn, prog, uintptr(unsafe.Pointer(&size))); r != 0 {
		return nil, log, fmt.Errorf("cuda: NVRTC output size: %s", l.errorString(r))
	}
	if size == 0 {
		return nil, log, fmt.Errorf("cuda: NVRTC produced no code for %s (%s)", name, archOpt)
	}
	out := make([]byte, size)
	if r := l.call(getFn, prog, uintptr(unsafe.Pointer(&out[0]))); r != 0 {
		return nil, log, fmt.Errorf("cuda: NVRTC output: %s", l.errorString(r))
	}
	if arch < 0 {
		out = bytes.TrimRight(out, "\x00")
	}
	return out, log, nil
}

// cacheKey names a compiled module: sha256 of the source, the options, the
// architecture and the NVRTC version.
func cacheKey(src string, opts []string, arch int, nvrtcVersion string) string {
	h := sha256.New()
	fmt.Fprintf(h, "atoll-kernel-v1\x00%s\x00%d\x00%s\x00", nvrtcVersion, arch, strings.Join(opts, "\x00"))
	h.Write([]byte(src))
	return hex.EncodeToString(h.Sum(nil))
}

// compileOptions are the NVRTC options every module is built with.
var compileOptions = []string{"--std=c++17", "-default-device"}

// compileCached compiles src for the device's architecture, through the
// disk cache when one is set. A cache that cannot be read or written is
// skipped, never an error.
// Compile implements gpu.Compiler: it compiles src's CUDA source for this
// device (through the disk cache) and returns it as a cubin. It reads only
// what Open fixed (architecture, cache directory) and NVRTC compiles
// distinct programs concurrently, so it is safe from any goroutine, several
// at once, while the owner uses the device.
func (d *Device) Compile(src gpu.ModuleSource) (gpu.ModuleSource, error) {
	if src.CUDA == "" {
		return src, nil
	}
	img, err := d.compileCached(src.CUDA, src.Name)
	if err != nil {
		return gpu.ModuleSource{}, err
	}
	return gpu.ModuleSource{Name: src.Name, Cubin: img}, nil
}

var _ gpu.Compiler = (*Device)(nil)

func (d *Device) compileCached(src, name string) ([]byte, error) {
	ver, err := NVRTCVersion()
	if err != nil {
		return nil, err
	}
	var path string
	if d.cacheDir != "" {
		path = filepath.Join(d.cacheDir, cacheKey(src, compileOptions, d.arch, ver)+".cubin")
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return b, nil
		}
	}
	img, _, err := Compile(src, name+".cu", d.arch, compileOptions...)
	if err != nil {
		return nil, err
	}
	if path != "" {
		if err := os.MkdirAll(d.cacheDir, 0o755); err == nil {
			if f, err := os.CreateTemp(d.cacheDir, ".tmp-*"); err == nil {
				_, werr := f.Write(img)
				cerr := f.Close()
				if werr == nil && cerr == nil {
					_ = os.Rename(f.Name(), path)
				} else {
					_ = os.Remove(f.Name())
				}
			}
		}
	}
	return img, nil
}
