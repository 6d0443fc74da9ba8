package cuda

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"atoll/gpu"
)

// Alloc allocates device memory in the primary context.
func (d *Device) Alloc(n int64) (gpu.Ptr, error) { return d.AllocIn(0, n) }

// AllocIn allocates device memory in context c. Kernels launched in a
// context can only use memory of that context: the timeslice baseline's BE
// work allocates in its own context. (An addition to gpu.Device.)
func (d *Device) AllocIn(c gpu.Context, n int64) (gpu.Ptr, error) {
	if err := d.live(); err != nil {
		return 0, err
	}
	ci, err := d.context(c)
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, fmt.Errorf("%w: cuda: Alloc(%d): size must be positive", gpu.ErrDriver, n)
	}
	if err := d.use(ci); err != nil {
		return 0, err
	}
	var p uint64
	if err := check("cuMemAlloc_v2", d.drv.call(d.drv.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n))); err != nil {
		return 0, err
	}
	d.allocs[gpu.Ptr(p)] = allocRec{bytes: n, ctx: ci}
	return gpu.Ptr(p), nil
}

// Free releases memory from Alloc.
func (d *Device) Free(p gpu.Ptr) error {
	if err := d.live(); err != nil {
		return err
	}
	a, ok := d.allocs[p]
	if !ok {
		return fmt.Errorf("%w: cuda: Free(%#x): not an allocation of this device", gpu.ErrInvalidHandle, uint64(p))
	}
	if err := d.use(a.ctx); err != nil {
		return err
	}
	delete(d.allocs, p)
	return check("cuMemFree_v2", d.fast(d.drv.cuMemFree, uintptr(p)))
}

// ctxOf finds the allocation holding [p, p+n) and its context.
func (d *Device) ctxOf(p gpu.Ptr, n int) (int32, error) {
	for base, a := range d.allocs {
		if p >= base && uint64(p)+uint64(n) <= uint64(base)+uint64(a.bytes) {
			return a.ctx, nil
		}
	}
	return 0, fmt.Errorf("%w: cuda: %d bytes at %#x are not inside one allocation of this device", gpu.ErrInvalidHandle, n, uint64(p))
}

// CopyToDevice copies src to device memory and returns when the copy is
// complete. It runs on an internal non-blocking stream, so it does not wait
// for kernels in other streams.
func (d *Device) CopyToDevice(dst gpu.Ptr, src []byte) error {
	if err := d.live(); err != nil || len(src) == 0 {
		return err
	}
	c, err := d.ctxOf(dst, len(src))
	if err != nil {
		return err
	}
	if err := d.use(c); err != nil {
		return err
	}
	s := d.ctxs[c].copyStr
	r := d.drv.call(d.drv.cuMemcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), s)
	if err := check("cuMemcpyHtoDAsync_v2", r); err != nil {
		return err
	}
	err = check("cuStreamSynchronize", d.fast(d.drv.cuStreamSynchronize, s))
	runtime.KeepAlive(src)
	return err
}

// CopyFromDevice copies device memory to dst and returns when it is there.
func (d *Device) CopyFromDevice(dst []byte, src gpu.Ptr) error {
	if err := d.live(); err != nil || len(dst) == 0 {
		return err
	}
	c, err := d.ctxOf(src, len(dst))
	if err != nil {
		return err
	}
	if err := d.use(c); err != nil {
		return err
	}
	s := d.ctxs[c].copyStr
	r := d.drv.call(d.drv.cuMemcpyDtoHAsync, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), s)
	if err := check("cuMemcpyDtoHAsync_v2", r); err != nil {
		return err
	}
	err = check("cuStreamSynchronize", d.fast(d.drv.cuStreamSynchronize, s))
	runtime.KeepAlive(dst)
	return err
}

// Memset32 enqueues a fill of n 32-bit words on s.
func (d *Device) Memset32(s gpu.Stream, p gpu.Ptr, v uint32, n int) error {
	st, err := d.stream(s)
	if err != nil {
		return err
	}
	if n <= 0 {
		return nil
	}
	if err := d.use(st.ctx); err != nil {
		return err
	}
	return check("cuMemsetD32Async", d.fast(d.drv.cuMemsetD32Async, uintptr(p), uintptr(v), uintptr(n), st.h))
}

// NewHostWords allocates n words of pinned, device-mapped host memory
// (cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP|PORTABLE), zeroed.
func (d *Device) NewHostWords(n int) ([]gpu.HostWord, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("%w: cuda: NewHostWords(%d): count must be positive", gpu.ErrDriver, n)
	}
	if err := d.use(0); err != nil {
		return nil, err
	}
	var host unsafe.Pointer
	if err := check("cuMemHostAlloc", d.drv.call(d.drv.cuMemHostAlloc, uintptr(unsafe.Pointer(&host)), uintptr(4*n), cuMemHostAllocPortable|cuMemHostAllocDevMap)); err != nil {
		return nil, err
	}
	var dev uint64
	if err := check("cuMemHostGetDevicePointer_v2", d.drv.call(d.drv.cuMemHostGetDevicePointer, uintptr(unsafe.Pointer(&dev)), uintptr(host), 0)); err != nil {
		d.drv.call(d.drv.cuMemFreeHost, uintptr(host))
		return nil, err
	}
	d.chunks = append(d.chunks, hostChunk{host: host, n: n})
	cells := unsafe.Slice((*uint32)(host), n)
	old := *d.words.Load()
	words := make([]*uint32, len(old), len(old)+n)
	copy(words, old)
	out := make([]gpu.HostWord, n)
	for i := range cells {
		cells[i] = 0
		out[i] = gpu.HostWord{Index: len(words), Dev: gpu.Ptr(dev + 4*uint64(i))}
		words = append(words, &cells[i])
	}
	d.words.Store(&words)
	return out, nil
}

// Store writes a HostWord from the host (atomic; any goroutine). A word not
// made by this device is ignored.
func (d *Device) Store(w gpu.HostWord, v uint32) {
	words := *d.words.Load()
	if w.Index > 0 && w.Index < len(words) {
		atomic.StoreUint32(words[w.Index], v)
	}
}

// Load reads a HostWord from the host (atomic; any goroutine). A word not
// made by this device reads as 0.
func (d *Device) Load(w gpu.HostWord) uint32 {
	words := *d.words.Load()
	if w.Index > 0 && w.Index < len(words) {
		return atomic.LoadUint32(words[w.Index])
	}
	return 0
}
