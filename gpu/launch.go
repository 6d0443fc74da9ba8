package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
)

// Dim3 is a CUDA grid or block shape.
type Dim3 struct{ X, Y, Z int }

// D1 is a one-dimensional shape.
func D1(x int) Dim3 { return Dim3{x, 1, 1} }

// Count is X*Y*Z, treating zero Y or Z as 1.
func (d Dim3) Count() int {
	y, z := d.Y, d.Z
	if y == 0 {
		y = 1
	}
	if z == 0 {
		z = 1
	}
	return d.X * y * z
}

func (d Dim3) String() string {
	if d.Y <= 1 && d.Z <= 1 {
		return fmt.Sprint(d.X)
	}
	return fmt.Sprintf("%dx%dx%d", d.X, max(d.Y, 1), max(d.Z, 1))
}

// Form is the compiled form of a kernel body. Every kernel in kernels/ is
// written once against a logical block index and compiled in each form.
type Form uint8

const (
	// Plain: one CUDA block per logical block; not preemptible (resident
	// blocks always run to the end; pending blocks wait behind priorities).
	Plain Form = iota
	// Reset: each block reads Flag at its start; if raised it exits
	// without doing its work. The kernel must then be re-run from the
	// start (REEF's reset preemption; bodies are idempotent).
	Reset
	// Resumable: Grid is a small number of persistent worker blocks. Each
	// worker checks Flag, then takes the next logical block from Counter
	// (device memory, int32) until Logical blocks are taken; raising Flag
	// makes workers exit between logical blocks with progress saved in
	// Counter, and a relaunch continues where it stopped (Tally's PTB).
	// The worker that finishes the last logical block stores 1 to Done.
	Resumable
	// Padded: one launch that runs two bodies (REEF's dynamic kernel
	// padding). Blocks [0, Grid.Count()) run this launch's body (the HP
	// kernel); the Pad.Grid.Count() blocks after them run Pad's body with
	// Resumable semantics (Pad's Flag, Counter, Logical, Done).
	Padded
)

var formNames = [...]string{"plain", "reset", "resumable", "padded"}

func (f Form) String() string {
	if int(f) < len(formNames) {
		return formNames[f]
	}
	return fmt.Sprintf("form(%d)", f)
}

// ParseForm is the inverse of Form.String.
func ParseForm(s string) (Form, error) {
	for i, n := range formNames {
		if n == s {
			return Form(i), nil
		}
	}
	return 0, fmt.Errorf("gpu: unknown kernel form %q (want plain, reset, resumable or padded)", s)
}

// Cost is what the simulator needs to time a kernel; real devices ignore it
// except for checks. It normally comes from a profile.
type Cost struct {
	// Duration of the whole kernel running alone on the device, in its
	// Plain form. Zero: the simulator derives it from FLOPs and Bytes by a
	// roofline against the device's peaks.
	Duration time.Duration
	FLOPs    float64 // floating-point operations of the whole kernel
	Bytes    float64 // DRAM bytes moved by the whole kernel
	// ComputeFrac and MemoryFrac are the kernel's achieved fraction of the
	// SM issue rate and of DRAM bandwidth when alone (profile's compute %
	// and memory % / 100). Zero: derived from FLOPs, Bytes and Duration.
	ComputeFrac float64
	MemoryFrac  float64
	// Partition, when set, is the kernel's Plain duration alone confined
	// to fewer SMs (an SM partition), ascending by SMs, the last point on
	// the whole device (a profile's partition points): a partition's
	// duration comes from it (PartitionDuration) instead of the wave
	// count of Grid on fewer SMs.
	Partition []CostPoint
	// GraphDuration, when set, is the kernel's duration inside a graph
	// with no event after it, as an HP request's graph runs it (a
	// profile's graphUs): the simulator runs a graph's kernel that long
	// instead of Duration less what a launch and record add.
	GraphDuration time.Duration
}

// CostPoint is a kernel's duration alone on SMs multiprocessors.
type CostPoint struct {
	SMs      int
	Duration time.Duration
}

// PartitionDuration is the kernel's duration confined to sms SMs by its
// Partition points, scaled to Duration (Duration × at / the last point's):
// linear between points, the smallest point's duration × its SMs / sms
// below it, and never less than on the whole device. ok is false without
// points (or with a last point of no duration).
func (c Cost) PartitionDuration(sms int) (d time.Duration, ok bool) {
	pts := c.Partition
	if len(pts) == 0 || sms <= 0 {
		return 0, false
	}
	full := float64(pts[len(pts)-1].Duration)
	if full <= 0 {
		return 0, false
	}
	at := float64(pts[0].Duration) * float64(pts[0].SMs) / float64(sms)
	for i := 1; i < len(pts); i++ {
		if a, b := pts[i-1], pts[i]; sms >= a.SMs && sms <= b.SMs && b.SMs > a.SMs {
			at = float64(a.Duration) + float64(b.Duration-a.Duration)*float64(sms-a.SMs)/float64(b.SMs-a.SMs)
			break
		}
	}
	if sms >= pts[len(pts)-1].SMs {
		at = full
	}
	return time.Duration(float64(c.Duration) * max(at, full) / full), true
}

// Launch is one kernel launch. The zero value is not valid: Func, Grid and
// Block must be set.
type Launch struct {
	Name      string // kernel name, for traces and errors
	Func      Func
	Grid      Dim3 // Plain/Reset: logical blocks; Resumable: worker blocks; Padded: HP blocks
	Block     Dim3
	SharedMem int // dynamic shared memory per block, bytes
	Registers int // registers per thread (occupancy); real devices read it from the function
	Args      Args
	Cost      Cost

	Form    Form
	Flag    HostWord // Reset, Resumable: the preemption flag (nonzero = raised)
	Counter Ptr      // Resumable: logical blocks taken so far (int32, device memory)
	Done    HostWord // Resumable: set to 1 by the worker that finishes the last logical block
	Logical int      // Resumable: logical blocks of the body
	Pad     *Launch  // Padded: the BE launch whose body fills the remaining blocks

	// Vendor is, for a Plain launch of a vendor function (a BLAS call),
	// the launches the library makes for it, in order (a profile's
	// vendor launches): a device that times launches by their Cost (the
	// simulator) runs them one after another on the stream, each with its
	// own geometry and share of Cost, instead of Grid and Block; the call
	// is complete when the last is. Real devices ignore it.
	Vendor []VendorLaunch
}

// VendorLaunch is one launch of a vendor call (Launch.Vendor).
type VendorLaunch struct {
	Name                 string // the library's function, for traces
	Grid, Block          int    // blocks, threads per block
	Registers, SharedMem int    // per thread; bytes per block
	// Share is its part of the call's Cost (Duration, FLOPs, Bytes).
	Share float64
	// ComputeFrac and MemoryFrac are its own (0: the call's Cost's).
	ComputeFrac, MemoryFrac float64
}

// LogicalBlocks is the number of logical blocks of the body.
func (l *Launch) LogicalBlocks() int {
	if l.Form == Resumable {
		return l.Logical
	}
	return l.Grid.Count()
}

// Args is a packed kernel argument buffer laid out with CUDA's natural
// alignment (CU_LAUNCH_PARAM_BUFFER_POINTER). Reuse one with Reset to keep
// launches free of allocations.
type Args struct{ buf []byte }

func (a *Args) align(n int) {
	for len(a.buf)%n != 0 {
		a.buf = append(a.buf, 0)
	}
}

// Reset empties the buffer, keeping its storage.
func (a *Args) Reset() { a.buf = a.buf[:0] }

// Grow makes room for n more bytes, so that appending them allocates
// nothing.
func (a *Args) Grow(n int) { a.buf = slices.Grow(a.buf, n) }

// Ptr appends a device pointer.
func (a *Args) Ptr(p Ptr) *Args { return a.U64(uint64(p)) }

// U64 appends an 8-byte value.
func (a *Args) U64(v uint64) *Args {
	a.align(8)
	a.buf = binary.LittleEndian.AppendUint64(a.buf, v)
	return a
}

// I32 appends a 4-byte signed integer.
func (a *Args) I32(v int32) *Args { return a.U32(uint32(v)) }

// U32 appends a 4-byte unsigned integer.
func (a *Args) U32(v uint32) *Args {
	a.align(4)
	a.buf = binary.LittleEndian.AppendUint32(a.buf, v)
	return a
}

// F32 appends a float.
func (a *Args) F32(v float32) *Args { return a.U32(math.Float32bits(v)) }

// Bytes is the packed buffer, padded to 8 bytes. It aliases the Args.
func (a *Args) Bytes() []byte {
	a.align(8)
	return a.buf
}

// Len is the packed size in bytes.
func (a *Args) Len() int { return len(a.buf) }

// Clone is a copy of a that shares no storage with it.
func (a *Args) Clone() Args { return Args{buf: slices.Clone(a.buf)} }
