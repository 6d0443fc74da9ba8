package cuda

import (
	"fmt"
	"unsafe"

	"atoll/gpu"
)

// maxArgBytes is the largest kernel argument buffer: CUDA 12.1+ drivers allow
// 32764 bytes of parameters on Volta and newer GPUs.
const maxArgBytes = 32764

// cmem is scratch memory outside the Go heap (an anonymous mapping) that the
// launch hot path hands to the driver: the `extra` array of cuLaunchKernel,
// the packed argument buffer it points to, and out-parameters. Because it is
// not Go memory it needs no pinning and its addresses never move.
type cmem struct {
	extra   [5]uintptr
	argSize uintptr
	cur     uintptr // cuCtxGetCurrent out-parameter
	ms      float32 // cuEventElapsedTime out-parameter
	_       uint32
	out     [4]uintptr // other out-parameters of hot-ish calls
	args    [maxArgBytes + 4]byte
}

// initExtra points m.extra at m's own argument buffer, once.
func (m *cmem) initExtra() {
	m.extra = [5]uintptr{
		launchParamBufferPtr, uintptr(unsafe.Pointer(&m.args[0])),
		launchParamBufferSize, uintptr(unsafe.Pointer(&m.argSize)),
		launchParamEnd,
	}
}

// packExtra copies args into m and returns the address of the `extra` array
// for cuLaunchKernel (0 when the kernel takes no arguments). size is the
// kernel's own parameter size when known (>0): args are the Go-side packing,
// padded to 8 bytes, so they may be up to 7 bytes longer than the kernel's
// parameter list, never shorter.
func packExtra(m *cmem, args []byte, size int) (uintptr, error) {
	n := len(args)
	if size > 0 {
		if n < size || n > (size+7)&^7 {
			return 0, fmt.Errorf("%w: the kernel takes %d bytes of arguments, the launch packs %d", gpu.ErrInvalidLaunch, size, n)
		}
		n = size
	}
	if n == 0 {
		return 0, nil
	}
	if n > maxArgBytes {
		return 0, fmt.Errorf("%w: %d bytes of kernel arguments (the driver allows at most %d)", gpu.ErrInvalidLaunch, n, maxArgBytes)
	}
	copy(m.args[:n], args[:n])
	m.argSize = uintptr(n)
	return uintptr(unsafe.Pointer(&m.extra[0])), nil
}

// validate checks a launch shape against the device's and the function's
// limits before the driver sees it.
func (d *Device) validate(f *funcRec, l *gpu.Launch) error {
	g, b := l.Grid, l.Block
	gd := [3]int{g.X, max(g.Y, 1), max(g.Z, 1)}
	bd := [3]int{b.X, max(b.Y, 1), max(b.Z, 1)}
	for i := range 3 {
		if gd[i] <= 0 || gd[i] > d.maxGrid[i] {
			return fmt.Errorf("%w: cuda: kernel %q: grid %v (dimension %d must lie in 1..%d)", gpu.ErrInvalidLaunch, f.name, g, i, d.maxGrid[i])
		}
		if bd[i] <= 0 || bd[i] > d.maxBlock[i] {
			return fmt.Errorf("%w: cuda: kernel %q: block %v (dimension %d must lie in 1..%d)", gpu.ErrInvalidLaunch, f.name, b, i, d.maxBlock[i])
		}
	}
	if t := b.Count(); t > f.maxThreads {
		return fmt.Errorf("%w: cuda: kernel %q: %d threads per block (this kernel allows at most %d)", gpu.ErrInvalidLaunch, f.name, t, f.maxThreads)
	}
	if l.SharedMem < 0 || l.SharedMem+f.staticSmem > d.optin {
		return fmt.Errorf("%w: cuda: kernel %q: %d B dynamic + %d B static shared memory per block (this GPU allows %d)", gpu.ErrInvalidLaunch, f.name, l.SharedMem, f.staticSmem, d.optin)
	}
	return nil
}

// Launch enqueues l on stream s with cuLaunchKernel. The arguments go through
// the CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE `extra` mechanism from a scratch
// buffer outside the Go heap; the hot path does not allocate.
//
// Launch uses Func, Grid, Block, SharedMem and Args only. Form, Flag,
// Counter, Done, Logical and Pad describe the kernel for schedulers and the
// simulator: the kernels library compiles each form as its own function and
// packs those parameters into Args itself. A Padded launch (Form Padded with
// Pad set) is one pair kernel, as gpu.Launch documents: it runs over
// Grid.Count() + Pad.Grid.Count() one-dimensional blocks, the HP body's
// first, and the kernel picks each block's role from its index. A launch
// without Pad is taken as already flattened (kernels.Flatten).
func (d *Device) Launch(s gpu.Stream, l *gpu.Launch) error {
	if d.closed {
		return d.live()
	}
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	return d.launchOn(st.ctx, st.h, &st.ws, l)
}

// checkLaunch resolves and checks l's function before anything is enqueued.
func (d *Device) checkLaunch(l *gpu.Launch) (*funcRec, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: cuda: nil *Launch", gpu.ErrInvalidLaunch)
	}
	if l.Func <= 0 || int(l.Func) >= len(d.funcs) {
		return nil, fmt.Errorf("%w: cuda: kernel %q: function %d", gpu.ErrInvalidHandle, l.Name, l.Func)
	}
	f := &d.funcs[l.Func]
	if err := d.validate(f, l); err != nil {
		return nil, err
	}
	return f, nil
}

// launchOn enqueues l on stream sh of context c (or records it into a graph
// while sh is capturing). ws is the stream's workspace for products and
// convolutions, made on first use.
func (d *Device) launchOn(c int32, sh uintptr, ws *workspace, l *gpu.Launch) error {
	f, err := d.checkLaunch(l)
	if err != nil {
		return err
	}
	if f.matmul != nil {
		w, err := d.blasWS(&ws.blas)
		if err != nil {
			return err
		}
		return d.launchMatmul(c, sh, w, f.matmul, l)
	}
	if f.conv != nil {
		return d.launchConv(c, sh, ws, f.conv, l)
	}
	h := f.native[c]
	if h == 0 {
		if h, err = d.funcIn(f, c); err != nil {
			return err
		}
	}
	if err := d.use(c); err != nil {
		return err
	}
	if need := l.SharedMem; need > f.dynSmem[c] {
		if err := check("cuFuncSetAttribute", d.fast(d.drv.cuFuncSetAttribute, h, funcAttrMaxDynSharedBytes, uintptr(need))); err != nil {
			return err
		}
		f.dynSmem[c] = need
	}
	extra, err := packExtra(d.cm, l.Args.Bytes(), f.paramBytes)
	if err != nil {
		return fmt.Errorf("cuda: kernel %q: %w", f.name, err)
	}
	grid := l.Grid
	if l.Form == gpu.Padded && l.Pad != nil {
		grid = gpu.D1(l.Grid.Count() + l.Pad.Grid.Count())
	}
	r := d.fast(d.drv.cuLaunchKernel, h,
		uintptr(grid.X), uintptr(max(grid.Y, 1)), uintptr(max(grid.Z, 1)),
		uintptr(l.Block.X), uintptr(max(l.Block.Y, 1)), uintptr(max(l.Block.Z, 1)),
		uintptr(l.SharedMem), sh, 0, extra)
	if r != resultSuccess {
		return &Error{Call: "cuLaunchKernel", Code: r,
			Hint: fmt.Sprintf("kernel %q grid %v block %v shared %d B", f.name, grid, l.Block, l.SharedMem)}
	}
	return nil
}
