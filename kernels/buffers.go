package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"atoll/gpu"
	"atoll/internal/pcg"
)

// Tensor is one allocated buffer of an op.
type Tensor struct {
	TensorSpec
	Ptr gpu.Ptr
	// Host holds the values the device buffer was filled with (inputs and
	// weights, exactly as rounded to DType), for the CPU references; nil for
	// outputs.
	Host []float64
}

// Buffers are an op's tensors on one device, in the order Tensors(op) gives.
type Buffers struct {
	T []Tensor
	// Fast: Reference computes GEMMs and convolutions with MatMulFast
	// (float32 fused multiply-adds, as a GPU does) instead of the plain
	// loop's float64 order — for serving on the CPU, not for checks.
	Fast bool
	// Pack, with Fast, keeps the weight operands of products packed
	// across calls (a serving executor's weights do not change).
	Pack *PackCache
	// Alloc, when set, gives Reference its outputs and scratch (n zeroed
	// values; make's contract): a serving executor reuses memory across
	// requests instead of faulting in fresh pages for each.
	Alloc func(n int) []float64
}

// make is n zeroed values from b.Alloc, or from make.
func (b Buffers) make(n int) []float64 {
	if b.Alloc != nil {
		return b.Alloc(n)
	}
	return make([]float64, n)
}

// mm is the matrix product Reference uses for b, whose operand w (a·w) is
// tensor i.
func (b Buffers) mm(i int) func(c, a, w []float64, m, n, k int) {
	switch {
	case !b.Fast:
		return matmul
	case b.Pack != nil && b.T[i].Role == Weight && fastOK:
		return func(c, a, w []float64, m, n, k int) { matmulFast(c, a, b.Pack.get(w, k, n), m) }
	}
	return MatMulFast
}

// Ptrs returns the device pointers in order.
func (b Buffers) Ptrs() []gpu.Ptr { return b.appendPtrs(make([]gpu.Ptr, 0, len(b.T))) }

// appendPtrs appends the tensors' device pointers to p.
func (b Buffers) appendPtrs(p []gpu.Ptr) []gpu.Ptr {
	for _, t := range b.T {
		p = append(p, t.Ptr)
	}
	return p
}

// Get returns the tensor called name.
func (b Buffers) Get(name string) (Tensor, bool) {
	for _, t := range b.T {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// Outputs returns the output tensors.
func (b Buffers) Outputs() []Tensor {
	var out []Tensor
	for _, t := range b.T {
		if t.Role == Output {
			out = append(out, t)
		}
	}
	return out
}

// Free releases the device memory.
func (b Buffers) Free(dev gpu.Device) error {
	var first error
	for _, t := range b.T {
		if t.Ptr != 0 {
			if err := dev.Free(t.Ptr); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

func (b Buffers) check(k *kspec) error {
	if len(b.T) != len(k.tensors) {
		return fmt.Errorf("%w: %s takes %d tensors, got %d (allocate them with Alloc)", ErrBuffers, k.name, len(k.tensors), len(b.T))
	}
	for i, t := range b.T {
		want := k.tensors[i]
		if t.Name != want.Name || t.DType != want.DType || t.Elems != want.Elems || t.Ptr == 0 {
			return fmt.Errorf("%w: %s tensor %d is %s %s[%d] at %#x, want %s %s[%d]",
				ErrBuffers, k.name, i, t.Name, t.DType, t.Elems, t.Ptr, want.Name, want.DType, want.Elems)
		}
	}
	return nil
}

// Alloc allocates op's buffers on dev and fills inputs and weights with
// seeded random values (uniform in [-1, 1), rounded to the tensor's type;
// indices uniform in [0, IntRange)); outputs are filled with NaN. The
// same seed gives the same values.
func Alloc(dev gpu.Device, op Op, seed uint64) (Buffers, error) {
	k, err := spec(op)
	if err != nil {
		return Buffers{}, err
	}
	rng := pcg.New(seed, 0x61746f6c6c)
	var b Buffers
	for _, ts := range k.tensors {
		p, err := dev.Alloc(max(ts.Bytes(), 4))
		if err != nil {
			_ = b.Free(dev)
			return Buffers{}, fmt.Errorf("kernels: allocating %s of %s (%d bytes): %w", ts.Name, k.name, ts.Bytes(), err)
		}
		t := Tensor{TensorSpec: ts, Ptr: p}
		b.T = append(b.T, t)
		var raw []byte
		switch ts.Role {
		case Output:
			raw = nanBytes(ts.DType, ts.Elems)
		case Scratch:
			raw = make([]byte, ts.Bytes())
		default:
			t.Host, raw = randomTensor(rng, ts)
			b.T[len(b.T)-1] = t
		}
		if err := dev.CopyToDevice(p, raw); err != nil {
			_ = b.Free(dev)
			return Buffers{}, fmt.Errorf("kernels: filling %s of %s: %w", ts.Name, k.name, err)
		}
	}
	return b, nil
}

// Refill draws fresh random inputs and weights from seed into existing
// buffers and poisons the outputs with NaN again.
func (b Buffers) Refill(dev gpu.Device, seed uint64) error {
	rng := pcg.New(seed, 0x61746f6c6c)
	for i := range b.T {
		t := &b.T[i]
		var raw []byte
		switch t.Role {
		case Output:
			raw = nanBytes(t.DType, t.Elems)
		case Scratch:
			continue // the kernel's own
		default:
			t.Host, raw = randomTensor(rng, t.TensorSpec)
		}
		if err := dev.CopyToDevice(t.Ptr, raw); err != nil {
			return fmt.Errorf("kernels: refilling %s: %w", t.Name, err)
		}
	}
	return nil
}

// Poison fills the outputs with NaN (synchronously).
func (b Buffers) Poison(dev gpu.Device) error {
	for _, t := range b.Outputs() {
		if err := dev.CopyToDevice(t.Ptr, nanBytes(t.DType, t.Elems)); err != nil {
			return fmt.Errorf("kernels: poisoning %s: %w", t.Name, err)
		}
	}
	return nil
}

// Read copies tensor t back and decodes it to float64.
func Read(dev gpu.Device, t Tensor) ([]float64, []byte, error) {
	raw := make([]byte, t.Bytes())
	if err := dev.CopyFromDevice(raw, t.Ptr); err != nil {
		return nil, nil, fmt.Errorf("kernels: reading %s: %w", t.Name, err)
	}
	return Decode(t.DType, raw), raw, nil
}

// randomTensor runs unseen by the race detector (go:norace): it touches
// only rng and the slices it makes, and kernel checks fill tens of
// millions of values.
//
//go:norace
func randomTensor(rng *pcg.Source, ts TensorSpec) ([]float64, []byte) {
	vals := make([]float64, ts.Elems)
	if ts.DType == I32 {
		raw := make([]byte, 4*ts.Elems)
		n := max(ts.IntRange, 1)
		for i := range vals {
			v := rng.IntN(n)
			vals[i] = float64(v)
			binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
		}
		return vals, raw
	}
	for i := range vals {
		vals[i] = rng.Float64()*2 - 1
	}
	raw := Encode(ts.DType, vals)
	return Decode(ts.DType, raw), raw // exactly the values the device sees
}

func nanBytes(d DType, n int) []byte {
	raw := make([]byte, n*d.Size())
	switch d {
	case F32, I32:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(raw[4*i:], 0x7fc00000)
		}
	case F16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(raw[2*i:], 0x7e00)
		}
	case BF16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(raw[2*i:], 0x7fc0)
		}
	}
	return raw
}

// Encode converts values to d's bytes (round to nearest even).
//
// Encode and Decode run unseen by the race detector (go:norace): each
// touches only its argument and the slice it makes, and building a
// full-size model converts hundreds of millions of values (ten times
// slower under -race).
//
//go:norace
func Encode(d DType, v []float64) []byte {
	raw := make([]byte, len(v)*d.Size())
	EncodeTo(raw, d, v)
	return raw
}

// EncodeTo is Encode into raw (len(v)·d.Size() bytes).
//
//go:norace
func EncodeTo(raw []byte, d DType, v []float64) {
	for i, x := range v {
		switch d {
		case F32:
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(x)))
		case I32:
			binary.LittleEndian.PutUint32(raw[4*i:], uint32(int32(x)))
		case F16:
			binary.LittleEndian.PutUint16(raw[2*i:], F32ToF16(float32(x)))
		case BF16:
			binary.LittleEndian.PutUint16(raw[2*i:], F32ToBF16(float32(x)))
		}
	}
}

// Decode converts d's bytes to values.
//
//go:norace
func Decode(d DType, raw []byte) []float64 {
	n := len(raw) / d.Size()
	v := make([]float64, n)
	for i := range v {
		switch d {
		case F32:
			v[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		case I32:
			v[i] = float64(int32(binary.LittleEndian.Uint32(raw[4*i:])))
		case F16:
			v[i] = float64(F16ToF32(binary.LittleEndian.Uint16(raw[2*i:])))
		case BF16:
			v[i] = float64(BF16ToF32(binary.LittleEndian.Uint16(raw[2*i:])))
		}
	}
	return v
}

// BF16ToF32 widens a bfloat16.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds to the nearest bfloat16 (ties to even), as the kernels do.
func F32ToBF16(f float32) uint16 {
	x := math.Float32bits(f)
	if x&0x7f800000 == 0x7f800000 {
		h := uint16(x >> 16)
		if x&0xffff != 0 {
			h |= 0x40
		}
		return h
	}
	x += 0x7fff + (x>>16)&1
	return uint16(x >> 16)
}

// F16ToF32 widens an IEEE half.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := int(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		f := float32(man) / 1024 / 16384 // subnormal: man * 2^-24
		if sign != 0 {
			return -f
		}
		return f
	}
	return math.Float32frombits(sign | uint32(exp-15+127)<<23 | man<<13)
}

// F32ToF16 rounds to the nearest IEEE half (ties to even), as cvt.rn does.
func F32ToF16(f float32) uint16 {
	x := math.Float32bits(f)
	sign := uint16(x>>16) & 0x8000
	exp := int(x>>23) & 0xff
	man := x & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint(14 - e)
		h := man >> shift
		rem := man & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is right (rounds up to inf at the top)
	}
	return sign | uint16(h)
}
