package cuda

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/ebitengine/purego"

	"atoll/gpu"
)

// blasLibs are the cuBLASLt libraries tried, in order, when ATOLL_CUBLASLT
// does not name one. Tests replace it.
var blasLibs = []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", "/usr/local/cuda/lib64/libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.12"}

// BLASEnv is the environment variable that steers the vendor GEMM library:
// "off" never loads it (every product runs on atoll's own kernels); a path
// loads that file instead of searching blasLibs.
const BLASEnv = "ATOLL_CUBLASLT"

// blasWorkspace is the cuBLASLt workspace each stream (and each graph) gets,
// and the most a chosen algorithm may use.
const blasWorkspace = 8 << 20

// cuBLASLt constants (cublasLt.h, cublas_api.h, library_types.h; CUDA 13).
const (
	cudaR32F           = 0
	cudaR16F           = 2
	cudaR16BF          = 14
	cublasCompute32F   = 68
	descTransA         = 3
	descTransB         = 4
	descEpilogue       = 7
	descBiasPointer    = 8
	descBiasDataType   = 26
	layoutBatchCount   = 5
	layoutBatchStride  = 6
	prefMaxWorkspace   = 1
	epiDefault         = 1
	epiReLU            = 2
	epiBias            = 4
	epiGELU            = 32
	heuristicBytes     = 96 // cublasLtMatmulHeuristicResult_t
	blasStatusNotSupp  = 15
	blasStatusInvalid  = 7
	blasStatusArchMism = 8
)

var blasStatusNames = map[int32]string{
	0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
	7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

// BLASError is a failed cuBLASLt call. It wraps gpu.ErrDriver, and also
// errors.ErrUnsupported when the library said it does not support the
// product (callers then use their own kernels).
type BLASError struct {
	Call   string
	Status int32
	Hint   string
}

func (e *BLASError) Error() string {
	n, ok := blasStatusNames[e.Status]
	if !ok {
		n = "CUBLAS_STATUS_UNKNOWN"
	}
	s := fmt.Sprintf("cuda: %s: %s (%d)", e.Call, n, e.Status)
	if e.Hint != "" {
		s += ": " + e.Hint
	}
	return s
}

func (e *BLASError) Unwrap() []error {
	if e.Status == blasStatusNotSupp || e.Status == blasStatusArchMism {
		return []error{gpu.ErrDriver, errors.ErrUnsupported}
	}
	return []error{gpu.ErrDriver}
}

func blasCheck(call string, r uintptr, hint string) error {
	if s := int32(r); s != 0 {
		return &BLASError{Call: call, Status: s, Hint: hint}
	}
	return nil
}

// blasLib holds cuBLASLt's entry points.
type blasLib struct {
	name               string
	version            int
	create, destroy    uintptr
	descCreate         uintptr
	descSetAttribute   uintptr
	descDestroy        uintptr
	layoutCreate       uintptr
	layoutSetAttribute uintptr
	layoutDestroy      uintptr
	prefCreate         uintptr
	prefSetAttribute   uintptr
	prefDestroy        uintptr
	heuristic          uintptr
	matmul             uintptr
	getVersion         uintptr
}

var (
	blasOnce sync.Once
	blasL    *blasLib
	blasErr  error
)

// ErrNoBLAS: cuBLASLt could not be loaded; products run on atoll's own
// kernels.
var ErrNoBLAS = fmt.Errorf("cuda: cuBLASLt not loaded (%w)", errors.ErrUnsupported)

func loadBLAS() (*blasLib, error) {
	blasOnce.Do(func() {
		names := blasLibs
		switch v := os.Getenv(BLASEnv); {
		case v == "off":
			blasErr = fmt.Errorf("%w: %s=off", ErrNoBLAS, BLASEnv)
			return
		case v != "":
			names = []string{v}
		}
		blasL, blasErr = openBLAS(names)
	})
	return blasL, blasErr
}

func openBLAS(names []string) (*blasLib, error) {
	h, name, errs := dlopenFirst(names)
	if h == 0 {
		return nil, fmt.Errorf("%w: tried %s (%s); install libcublas (CUDA toolkit or the nvidia-cublas wheel) or set %s=/path/to/libcublasLt.so.13; %s=off silences this",
			ErrNoBLAS, strings.Join(names, ", "), strings.Join(errs, "; "), BLASEnv, BLASEnv)
	}
	l := &blasLib{name: name}
	syms := symbols{lib: h}
	sym := syms.need
	sym(&l.create, "cublasLtCreate")
	sym(&l.destroy, "cublasLtDestroy")
	sym(&l.descCreate, "cublasLtMatmulDescCreate")
	sym(&l.descSetAttribute, "cublasLtMatmulDescSetAttribute")
	sym(&l.descDestroy, "cublasLtMatmulDescDestroy")
	sym(&l.layoutCreate, "cublasLtMatrixLayoutCreate")
	sym(&l.layoutSetAttribute, "cublasLtMatrixLayoutSetAttribute")
	sym(&l.layoutDestroy, "cublasLtMatrixLayoutDestroy")
	sym(&l.prefCreate, "cublasLtMatmulPreferenceCreate")
	sym(&l.prefSetAttribute, "cublasLtMatmulPreferenceSetAttribute")
	sym(&l.prefDestroy, "cublasLtMatmulPreferenceDestroy")
	sym(&l.heuristic, "cublasLtMatmulAlgoGetHeuristic")
	sym(&l.matmul, "cublasLtMatmul")
	sym(&l.getVersion, "cublasLtGetVersion")
	if len(syms.missing) > 0 {
		return nil, fmt.Errorf("%w: %s lacks %s (need cuBLASLt 11.4 or newer)", ErrNoBLAS, name, strings.Join(syms.missing, ", "))
	}
	r, _, _ := purego.SyscallN(l.getVersion)
	l.version = int(r)
	return l, nil
}

// matmulRec is what a launch of a Matmul Func needs. Its descriptors live in
// the library; alpha, beta, the algorithm and the bias attribute's value
// live in mm (memory outside the Go heap), since the library reads them
// through pointers.
type matmulRec struct {
	m                    gpu.Matmul
	desc, la, lb, lc, ld uintptr // operation descriptor and layouts (cuBLAS's A = our B)
	mm                   *matmulMem
}

// matmulMem is a plan's memory outside the Go heap.
type matmulMem struct {
	algo        [8]uint64 // cublasLtMatmulAlgo_t
	alpha, beta float32
	bias        uint64
	scratch     [4]uint64 // attribute values being set
	heur        [heuristicBytes]byte
	count       int32
	_           int32
}

// blasState is a device's cuBLASLt handle and plans.
type blasState struct {
	lib    *blasLib
	handle uintptr
	pref   uintptr
	plans  map[gpu.Matmul]gpu.Func
	convs  map[gpu.Conv]gpu.Func
	arena  [][]byte // mmapped pages holding matmulMem records
	used   int      // records used in the last page

	// The convolutions' gather, scatter and padding kernels (conv.go),
	// loaded by the first Conv.
	im2col8, im2col1, col2im8, col2im1 gpu.Func
	im2colp, padrows, unpadrows        gpu.Func
}

var _ gpu.BLAS = (*Device)(nil)

// BLASName implements gpu.BLAS: the cuBLASLt library in use, or why none
// is (products then run on atoll's own kernels).
func (d *Device) BLASName() string {
	l, err := loadBLAS()
	if err != nil {
		return "none (" + err.Error() + ")"
	}
	return l.String() + " (" + l.name + ")"
}

// String is the library and its version, e.g. "cuBLASLt 13.1.0".
func (l *blasLib) String() string {
	v := l.version
	return fmt.Sprintf("cuBLASLt %d.%d.%d", v/10000, v/100%100, v%100)
}

// memRec hands out one matmulMem in an mmapped page.
func (b *blasState) memRec() (*matmulMem, error) {
	per := 4096 / int(unsafe.Sizeof(matmulMem{}))
	if len(b.arena) == 0 || b.used == per {
		p, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			return nil, fmt.Errorf("cuda: mmap for a cuBLASLt plan: %w", err)
		}
		b.arena, b.used = append(b.arena, p), 0
	}
	page := b.arena[len(b.arena)-1]
	r := (*matmulMem)(unsafe.Pointer(&page[b.used*int(unsafe.Sizeof(matmulMem{}))]))
	b.used++
	return r, nil
}

func blasType(t gpu.ElemType) uintptr {
	switch t {
	case gpu.F16:
		return cudaR16F
	case gpu.F32:
		return cudaR32F
	}
	return cudaR16BF
}

// biasType is m's bias type (F32 when unset).
func biasType(m gpu.Matmul) gpu.ElemType {
	if m.BiasType == 0 {
		return gpu.F32
	}
	return m.BiasType
}

// blas opens cuBLASLt on the device the first time a product asks for it.
func (d *Device) blas() (*blasState, error) {
	if d.bl != nil {
		return d.bl, nil
	}
	l, err := loadBLAS()
	if err != nil {
		return nil, err
	}
	if err := d.use(0); err != nil {
		return nil, err
	}
	b := &blasState{lib: l, plans: map[gpu.Matmul]gpu.Func{}, convs: map[gpu.Conv]gpu.Func{}}
	if err := blasCheck("cublasLtCreate", uintptr(d.drv.call(l.create, uintptr(unsafe.Pointer(&b.handle)))), ""); err != nil {
		return nil, err
	}
	if err := blasCheck("cublasLtMatmulPreferenceCreate", uintptr(d.drv.call(l.prefCreate, uintptr(unsafe.Pointer(&b.pref)))), ""); err != nil {
		return nil, err
	}
	ws := uint64(blasWorkspace)
	if err := blasCheck("cublasLtMatmulPreferenceSetAttribute", uintptr(d.drv.call(l.prefSetAttribute, b.pref, prefMaxWorkspace, uintptr(unsafe.Pointer(&ws)), 8)), ""); err != nil {
		return nil, err
	}
	d.bl = b
	return b, nil
}

// Matmul implements gpu.BLAS: descriptors for m, the algorithm cuBLASLt's
// heuristic puts first for them within blasWorkspace, and a Func whose
// Plain launches run it. The same m gives the same Func.
func (d *Device) Matmul(m gpu.Matmul) (gpu.Func, error) {
	if err := d.live(); err != nil {
		return 0, err
	}
	if err := m.Check(); err != nil {
		return 0, err
	}
	if m.Bias && biasType(m) != m.Out {
		// cuBLASLt's bias has D's type (outside fp8 and int8 kernels): an f32
		// bias with a 16-bit output is INVALID_VALUE in the heuristic.
		return 0, fmt.Errorf("%w: cuda: cuBLASLt takes a bias of the output's type; %s has a %s bias and a %s output", errors.ErrUnsupported, m, biasType(m), m.Out)
	}
	b, err := d.blas()
	if err != nil {
		return 0, err
	}
	if f, ok := b.plans[m]; ok {
		return f, nil
	}
	r, err := d.newMatmul(b, m)
	if err != nil {
		return 0, err
	}
	d.funcs = append(d.funcs, funcRec{name: "cublasLt " + m.String(), mod: -1, maxThreads: 1024, paramBytes: gpu.MatmulArgBytes, matmul: r})
	f := gpu.Func(len(d.funcs) - 1)
	b.plans[m] = f
	return f, nil
}

func (d *Device) newMatmul(b *blasState, m gpu.Matmul) (*matmulRec, error) {
	l := b.lib
	mem, err := b.memRec()
	if err != nil {
		return nil, err
	}
	r := &matmulRec{m: m, mm: mem}
	ok := false
	defer func() {
		if !ok {
			d.freeMatmul(r)
		}
	}()
	call := func(name string, fn uintptr, args ...uintptr) error {
		return blasCheck(name, uintptr(d.drv.call(fn, args...)), m.String())
	}
	if err := call("cublasLtMatmulDescCreate", l.descCreate, uintptr(unsafe.Pointer(&r.desc)), cublasCompute32F, cudaR32F); err != nil {
		return nil, err
	}
	setDesc := func(attr uintptr, v uint64, size uintptr) error {
		mem.scratch[0] = v
		return call("cublasLtMatmulDescSetAttribute", l.descSetAttribute, r.desc, attr, uintptr(unsafe.Pointer(&mem.scratch[0])), size)
	}
	// Row-major D = op(A)·op(B) is column-major Dᵀ = op(B)ᵀ·op(A)ᵀ: cuBLAS's
	// first operand is our B, its second our A, and a row-major matrix read
	// as column-major is its transpose.
	opB, opA := uint64(0), uint64(0)
	if m.TransB {
		opB = 1
	}
	if m.TransA {
		opA = 1
	}
	epi := uint64(epiDefault)
	switch m.Act {
	case gpu.EpiReLU:
		epi = epiReLU
	case gpu.EpiGELU:
		epi = epiGELU
	}
	if m.Bias {
		if epi == epiDefault {
			epi = epiBias
		} else {
			epi |= epiBias
		}
	}
	for _, a := range []struct {
		attr, size uintptr
		v          uint64
	}{{descTransA, 4, opB}, {descTransB, 4, opA}, {descEpilogue, 4, epi}} {
		if err := setDesc(a.attr, a.v, a.size); err != nil {
			return nil, err
		}
	}
	if m.Bias {
		if err := setDesc(descBiasDataType, uint64(blasType(biasType(m))), 4); err != nil {
			return nil, err
		}
	}
	layout := func(p *uintptr, t gpu.ElemType, rows, cols, ld int, stride int64) error {
		if err := call("cublasLtMatrixLayoutCreate", l.layoutCreate, uintptr(unsafe.Pointer(p)), blasType(t), uintptr(rows), uintptr(cols), uintptr(ld)); err != nil {
			return err
		}
		if m.Batch <= 1 {
			return nil
		}
		mem.scratch[1] = uint64(m.Batch)
		if err := call("cublasLtMatrixLayoutSetAttribute", l.layoutSetAttribute, *p, layoutBatchCount, uintptr(unsafe.Pointer(&mem.scratch[1])), 4); err != nil {
			return err
		}
		mem.scratch[2] = uint64(stride)
		return call("cublasLtMatrixLayoutSetAttribute", l.layoutSetAttribute, *p, layoutBatchStride, uintptr(unsafe.Pointer(&mem.scratch[2])), 8)
	}
	// Our B as column-major: [K][N] is N×K (ld N); [N][K] (TransB) is K×N (ld K).
	br, bc := m.N, m.K
	if m.TransB {
		br, bc = m.K, m.N
	}
	ar, ac := m.K, m.M
	if m.TransA {
		ar, ac = m.M, m.K
	}
	if err := layout(&r.la, m.In, br, bc, br, m.StrideB); err != nil {
		return nil, err
	}
	lda := ar
	if m.LdA != 0 {
		lda = m.LdA
	}
	if err := layout(&r.lb, m.In, ar, ac, lda, m.StrideA); err != nil {
		return nil, err
	}
	if err := layout(&r.lc, m.Out, m.N, m.M, m.N, m.StrideD); err != nil {
		return nil, err
	}
	if err := layout(&r.ld, m.Out, m.N, m.M, m.N, m.StrideD); err != nil {
		return nil, err
	}
	if err := call("cublasLtMatmulAlgoGetHeuristic", l.heuristic, b.handle, r.desc, r.la, r.lb, r.lc, r.ld, b.pref, 1,
		uintptr(unsafe.Pointer(&mem.heur[0])), uintptr(unsafe.Pointer(&mem.count))); err != nil {
		// The heuristic is a question: whatever it answers, the library
		// does not run this product, and the caller's own kernel will.
		return nil, fmt.Errorf("%w: %w", errors.ErrUnsupported, err)
	}
	if mem.count < 1 {
		return nil, &BLASError{Call: "cublasLtMatmulAlgoGetHeuristic", Status: blasStatusNotSupp, Hint: m.String() + ": no algorithm"}
	}
	// The algorithm needs at most the preference's blasWorkspace.
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&mem.algo[0])), 64), mem.heur[:64])
	mem.alpha = 1
	if m.Accumulate {
		mem.beta = 1
	}
	ok = true
	return r, nil
}

// launchMatmul enqueues r on stream sh of context c with the launch's
// operands and ws (blasWorkspace bytes) as the workspace.
func (d *Device) launchMatmul(c int32, sh uintptr, ws gpu.Ptr, r *matmulRec, l *gpu.Launch) error {
	args := l.Args.Bytes()
	if len(args) != gpu.MatmulArgBytes {
		return fmt.Errorf("%w: cuda: %q: a matmul launch packs %d bytes of operands (gpu.MatmulArgs: %d)", gpu.ErrInvalidLaunch, l.Name, len(args), gpu.MatmulArgBytes)
	}
	p := func(i int) gpu.Ptr { return gpu.Ptr(*(*uint64)(unsafe.Pointer(&args[8*i]))) }
	A, B, D, bias, C := p(0), p(1), p(2), p(3), p(4)
	if A == 0 || B == 0 || D == 0 || (r.m.Bias && bias == 0) || (r.m.Accumulate && C == 0) {
		return fmt.Errorf("%w: cuda: %q: a null operand (A %#x B %#x D %#x bias %#x C %#x)", gpu.ErrInvalidLaunch, l.Name, A, B, D, bias, C)
	}
	if C == 0 {
		C = D
	}
	return d.matmulOn(c, sh, ws, r, A, B, D, bias, C, l.Name)
}

// matmulOn enqueues r over the given operands (C non-zero) on stream sh of
// context c with ws (blasWorkspace bytes) as the workspace.
func (d *Device) matmulOn(c int32, sh uintptr, ws gpu.Ptr, r *matmulRec, A, B, D, bias, C gpu.Ptr, name string) error {
	if err := d.use(c); err != nil {
		return err
	}
	b, mem := d.bl, r.mm
	if r.m.Bias && uint64(bias) != mem.bias {
		mem.bias = uint64(bias)
		if err := blasCheck("cublasLtMatmulDescSetAttribute", uintptr(d.fast(b.lib.descSetAttribute, r.desc, descBiasPointer, uintptr(unsafe.Pointer(&mem.bias)), 8)), name); err != nil {
			return err
		}
	}
	st := d.fast(b.lib.matmul, b.handle, r.desc, uintptr(unsafe.Pointer(&mem.alpha)), uintptr(B), r.la, uintptr(A), r.lb,
		uintptr(unsafe.Pointer(&mem.beta)), uintptr(C), r.lc, uintptr(D), r.ld, uintptr(unsafe.Pointer(&mem.algo[0])), uintptr(ws), blasWorkspace, sh)
	return blasCheck("cublasLtMatmul", uintptr(uint32(st)), name)
}

// blasWS returns the cuBLASLt workspace at *ws, allocating it on first use.
func (d *Device) blasWS(ws *gpu.Ptr) (gpu.Ptr, error) {
	return d.lazyAlloc(ws, blasWorkspace, "cuBLASLt")
}

// lazyAlloc returns the workspace at *ws, allocating n bytes on first use.
func (d *Device) lazyAlloc(ws *gpu.Ptr, n int64, what string) (gpu.Ptr, error) {
	if *ws == 0 {
		p, err := d.Alloc(n)
		if err != nil {
			return 0, fmt.Errorf("cuda: a %s workspace of %d MiB: %w", what, n>>20, err)
		}
		*ws = p
	}
	return *ws, nil
}

// freeMatmul destroys r's descriptors.
func (d *Device) freeMatmul(r *matmulRec) {
	l := d.bl.lib
	for _, h := range []*uintptr{&r.la, &r.lb, &r.lc, &r.ld} {
		if *h != 0 {
			d.drv.call(l.layoutDestroy, *h)
			*h = 0
		}
	}
	if r.desc != 0 {
		d.drv.call(l.descDestroy, r.desc)
		r.desc = 0
	}
}

// closeBLAS destroys the plans and the handle (the device's context must be
// current).
func (d *Device) closeBLAS() {
	b := d.bl
	if b == nil {
		return
	}
	l := b.lib
	for i := range d.funcs {
		if r := d.funcs[i].matmul; r != nil {
			d.freeMatmul(r)
			d.funcs[i].matmul = nil
		}
		d.funcs[i].conv = nil // its products are funcs of their own
	}
	d.drv.call(l.prefDestroy, b.pref)
	d.drv.call(l.destroy, b.handle)
	for _, p := range b.arena {
		_ = syscall.Munmap(p)
	}
	d.bl = nil
}
