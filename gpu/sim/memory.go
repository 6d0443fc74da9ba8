package sim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"atoll/gpu"
)

// Device address layout: host words live at hostWordBase + 4*Index, device
// allocations from deviceBase upwards (never reused, so a stale pointer is
// always caught).
const (
	hostWordBase = gpu.Ptr(1 << 36)
	deviceBase   = gpu.Ptr(1 << 40)
	allocAlign   = pageSize // allocations never share a page
	pageSize     = 4096
)

type allocation struct {
	base gpu.Ptr
	size int64
}

// memory is the simulated device memory: allocations as bookkeeping and the
// contents as a sparse map of the pages ever written with nonzero data.
type memory struct {
	capacity int64
	used     int64
	next     gpu.Ptr
	allocs   []allocation // ascending base
	pages    map[uint64]*[pageSize]byte
}

func (m *memory) init(capacity int64) {
	*m = memory{capacity: capacity, next: deviceBase, pages: map[uint64]*[pageSize]byte{}}
}

// find returns the allocation holding [p, p+n), or -1.
func (m *memory) find(p gpu.Ptr, n int64) int {
	i := sort.Search(len(m.allocs), func(i int) bool { return m.allocs[i].base > p }) - 1
	if i < 0 {
		return -1
	}
	a := m.allocs[i]
	if n < 0 || int64(p-a.base)+n > a.size {
		return -1
	}
	return i
}

func (m *memory) read(dst []byte, p gpu.Ptr) {
	for len(dst) > 0 {
		pg, off := uint64(p)/pageSize, uint64(p)%pageSize
		n := min(len(dst), pageSize-int(off))
		if page := m.pages[pg]; page != nil {
			copy(dst[:n], page[off:])
		} else {
			clear(dst[:n])
		}
		dst, p = dst[n:], p+gpu.Ptr(n)
	}
}

func (m *memory) write(p gpu.Ptr, src []byte) {
	for len(src) > 0 {
		pg, off := uint64(p)/pageSize, uint64(p)%pageSize
		n := min(len(src), pageSize-int(off))
		page := m.pages[pg]
		if page == nil && !allZero(src[:n]) {
			page = new([pageSize]byte)
			m.pages[pg] = page
		}
		if page != nil {
			copy(page[off:], src[:n])
		}
		src, p = src[n:], p+gpu.Ptr(n)
	}
}

// allZero: b (at most a page) holds only zeros — one vectorized compare
// against a zero page.
func allZero(b []byte) bool { return bytes.Equal(b, zeroPage[:len(b)]) }

var zeroPage [pageSize]byte

// Alloc reserves bytes of simulated device memory (bookkeeping only: no
// host memory is used until data is written).
func (d *Device) Alloc(bytes int64) (gpu.Ptr, error) {
	if d.fault != nil {
		return 0, d.fault
	}
	if d.closed {
		return 0, errClosed
	}
	m := &d.mem
	if bytes <= 0 {
		return 0, fmt.Errorf("%w: Alloc of %d bytes", gpu.ErrInvalidLaunch, bytes)
	}
	if bytes > m.capacity-m.used {
		return 0, fmt.Errorf("%w: Alloc of %d bytes with %d of %d free", gpu.ErrOutOfMemory, bytes, m.capacity-m.used, m.capacity)
	}
	p := m.next
	m.next += gpu.Ptr((bytes + allocAlign - 1) / allocAlign * allocAlign)
	m.used += bytes
	m.allocs = append(m.allocs, allocation{base: p, size: bytes})
	return p, nil
}

// Free releases an allocation made by Alloc.
func (d *Device) Free(p gpu.Ptr) error {
	if d.closed {
		return errClosed
	}
	m := &d.mem
	i := m.find(p, 0)
	if i < 0 || m.allocs[i].base != p {
		return fmt.Errorf("%w: Free(%#x): not the start of a live allocation", gpu.ErrInvalidHandle, uint64(p))
	}
	a := m.allocs[i]
	lo, hi := uint64(a.base)/pageSize, (uint64(a.base)+uint64(a.size)-1)/pageSize
	if hi-lo+1 > uint64(len(m.pages)) {
		for pg := range m.pages {
			if pg >= lo && pg <= hi {
				delete(m.pages, pg)
			}
		}
	} else {
		for pg := lo; pg <= hi; pg++ {
			delete(m.pages, pg)
		}
	}
	m.used -= a.size
	m.allocs = append(m.allocs[:i], m.allocs[i+1:]...)
	return nil
}

// checkRange says whether [p, p+n) is device memory or host words.
func (d *Device) checkRange(p gpu.Ptr, n int64) error {
	if p >= hostWordBase && p < deviceBase {
		if (p-hostWordBase)%4 != 0 || p < hostWordBase+4 || int64(p-hostWordBase)/4+n/4 > int64(d.words.n)+1 {
			return fmt.Errorf("%w: %#x+%d is not inside the mapped host words", gpu.ErrInvalidHandle, uint64(p), n)
		}
		return nil
	}
	if d.mem.find(p, n) < 0 {
		return fmt.Errorf("%w: %#x+%d is not inside a live allocation", gpu.ErrInvalidHandle, uint64(p), n)
	}
	return nil
}

// CopyToDevice copies src to dst synchronously.
func (d *Device) CopyToDevice(dst gpu.Ptr, src []byte) error {
	if d.fault != nil {
		return d.fault
	}
	if d.closed {
		return errClosed
	}
	if d.mem.find(dst, int64(len(src))) < 0 {
		return fmt.Errorf("%w: CopyToDevice %#x+%d: not inside a live allocation", gpu.ErrInvalidHandle, uint64(dst), len(src))
	}
	d.mem.write(dst, src)
	return nil
}

// CopyFromDevice copies from src to dst synchronously; never-written bytes
// read as zero.
func (d *Device) CopyFromDevice(dst []byte, src gpu.Ptr) error {
	if d.fault != nil {
		return d.fault
	}
	if d.closed {
		return errClosed
	}
	if d.mem.find(src, int64(len(dst))) < 0 {
		return fmt.Errorf("%w: CopyFromDevice %#x+%d: not inside a live allocation", gpu.ErrInvalidHandle, uint64(src), len(dst))
	}
	d.mem.read(dst, src)
	return nil
}

// loadU32 and storeU32 are the kernels' view of memory: device memory or
// host words by address. Addresses were checked at launch.
func (d *Device) loadU32(p gpu.Ptr) uint32 {
	if p >= hostWordBase && p < deviceBase {
		return d.words.load(int((p - hostWordBase) / 4))
	}
	var b [4]byte
	d.mem.read(b[:], p)
	return binary.LittleEndian.Uint32(b[:])
}

func (d *Device) storeU32(p gpu.Ptr, v uint32) {
	if p >= hostWordBase && p < deviceBase {
		d.words.store(int((p-hostWordBase)/4), v)
		return
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	d.mem.write(p, b[:])
}

// fill is a Memset32 taking effect.
func (d *Device) fill(p gpu.Ptr, v uint32, n int) {
	if p >= hostWordBase && p < deviceBase {
		for i := range n {
			d.storeU32(p+gpu.Ptr(4*i), v)
		}
		return
	}
	if v == 0 { // clear only pages that exist
		end := uint64(p) + 4*uint64(n)
		for a := uint64(p); a < end; {
			pg, off := a/pageSize, a%pageSize
			k := min(end-a, pageSize-off)
			if page := d.mem.pages[pg]; page != nil {
				clear(page[off : off+k])
			}
			a += k
		}
		return
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	for i := range n {
		d.mem.write(p+gpu.Ptr(4*i), b[:])
	}
}

const wordChunk = 1024

// hostWords is the mapped host memory: chunks of atomic words behind a
// copy-on-write table, so Load and Store need no lock and may run on any
// goroutine while the owner maps more words.
type hostWords struct {
	mu     sync.Mutex // serialises growth
	n      int        // words mapped; Index 1..n are valid
	chunks atomic.Pointer[[]*[wordChunk]atomic.Uint32]
}

func (w *hostWords) init() {
	w.chunks.Store(new([]*[wordChunk]atomic.Uint32))
}

func (w *hostWords) word(i int) *atomic.Uint32 {
	cs := *w.chunks.Load()
	if i <= 0 || i/wordChunk >= len(cs) {
		return nil
	}
	return &cs[i/wordChunk][i%wordChunk]
}

func (w *hostWords) load(i int) uint32 {
	if p := w.word(i); p != nil {
		return p.Load()
	}
	return 0
}

func (w *hostWords) store(i int, v uint32) {
	if p := w.word(i); p != nil {
		p.Store(v)
	}
}

// NewHostWords maps n zeroed words of simulated pinned host memory.
func (d *Device) NewHostWords(n int) ([]gpu.HostWord, error) {
	if d.fault != nil {
		return nil, d.fault
	}
	if d.closed {
		return nil, errClosed
	}
	if n <= 0 {
		return nil, fmt.Errorf("sim: NewHostWords(%d): n must be positive", n)
	}
	w := &d.words
	w.mu.Lock()
	defer w.mu.Unlock()
	first := w.n + 1
	w.n += n
	cs := *w.chunks.Load()
	if need := w.n/wordChunk + 1; need > len(cs) {
		grown := make([]*[wordChunk]atomic.Uint32, need)
		copy(grown, cs)
		for i := len(cs); i < need; i++ {
			grown[i] = new([wordChunk]atomic.Uint32)
		}
		w.chunks.Store(&grown)
	}
	out := make([]gpu.HostWord, n)
	for i := range out {
		idx := first + i
		out[i] = gpu.HostWord{Index: idx, Dev: hostWordBase + gpu.Ptr(4*idx)}
	}
	return out, nil
}

// Store sets a host word; safe from any goroutine. Stores to words this
// device did not map are dropped.
func (d *Device) Store(w gpu.HostWord, v uint32) { d.words.store(w.Index, v) }

// Load reads a host word; safe from any goroutine. Words this device did not
// map read as zero.
func (d *Device) Load(w gpu.HostWord) uint32 { return d.words.load(w.Index) }
