package gpu

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Backends wrap them with %w so callers can use errors.Is.
var (
	// ErrNoDevice: no GPU (or no driver) was found. The CLI falls back to the
	// simulator when it sees this.
	ErrNoDevice = errors.New("gpu: no device")
	// ErrInvalidLaunch: a launch shape the device cannot run (too many
	// threads per block, too much shared memory, a zero grid, ...).
	ErrInvalidLaunch = errors.New("gpu: invalid launch")
	// ErrInvalidHandle: a stream, event, function or pointer not made by
	// this device, or already destroyed.
	ErrInvalidHandle = errors.New("gpu: invalid handle")
	// ErrNotReady: an event queried before it completed (Time).
	ErrNotReady = errors.New("gpu: not ready")
	// ErrOutOfMemory: an allocation the device cannot satisfy.
	ErrOutOfMemory = errors.New("gpu: out of memory")
	// ErrDriver: any other failure reported by the driver. Backends wrap it
	// with the call's name and the driver's code.
	ErrDriver = errors.New("gpu: driver error")
)

// Handles are small integers owned by the Device that made them; zero is
// never a valid handle. They are plain values so the launch hot path does not
// allocate.
type (
	Stream  int32  // a stream of ordered work
	Event   int32  // a marker recorded into a stream
	Context int32  // a GPU context; streams of different contexts time-slice
	Func    int32  // a loaded kernel function
	Ptr     uint64 // a device memory address
)

// HostWord is one 32-bit word of mapped, pinned host memory: the host stores
// and loads it directly, and kernels read (and may write) it through Dev, its
// device address. Preemption flags and kernels' "done" words are HostWords.
type HostWord struct {
	Index int // index into the device's word array; zero value is "none"
	Dev   Ptr // device-visible address to pass to kernels
}

// Valid reports whether the word was made by a device.
func (w HostWord) Valid() bool { return w.Dev != 0 }

// StreamOptions says where a stream lives and how urgent it is.
type StreamOptions struct {
	// Priority in CUDA's convention: a lower number is more urgent. It must
	// lie in [Greatest, Least] of Info().Priorities; see Priorities.Clamp.
	Priority int
	// Context the stream belongs to; zero is the device's primary context.
	// Streams of different contexts do not share SMs concurrently: the GPU
	// time-slices between contexts (the timeslice baseline).
	Context Context
}

// ModuleSource is the code of a kernel module, in one of the forms a device
// accepts. The simulator accepts any module and resolves functions by name.
type ModuleSource struct {
	Name  string // for errors and caches
	CUDA  string // CUDA C source, compiled at run time (NVRTC)
	PTX   []byte // PTX text
	Cubin []byte // a cubin for the device's architecture
}

// Compiler is implemented by devices whose modules are compiled from CUDA
// source at run time (gpu/cuda, through NVRTC). Compile turns src into a
// ModuleSource that LoadModule loads without compiling (Cubin set). Unlike
// every other device call it may be made from any goroutine, concurrently
// with the owner's use of the device: a scheduler compiles kernels it needs
// later off its loop, so a compile (hundreds of milliseconds) never stalls
// the launches of latency-critical work.
type Compiler interface {
	Compile(src ModuleSource) (ModuleSource, error)
}

// Graph is a recorded sequence of launches (a CUDA graph), made by a
// Grapher; zero is never a valid graph.
type Graph int32

// GraphStep is one step of a graph: a launch, then the record of Event in
// the same stream (none when Event is zero).
type GraphStep struct {
	Launch *Launch
	Event  Event
}

// HostModeler is implemented by a device that models the host's time
// (gpu/sim), whose clock moves on only by the host costs it charges: the
// scheduler's driver tells it of the launch decisions it takes from its
// core, and the device charges their host time (the core's and the
// policy's work) as the host would spend it before launching them. A real
// device's host spends that time itself.
type HostModeler interface {
	Decided(launches int)
}

// Grapher is implemented by devices that record a fixed sequence of launches
// once and submit it again with one host call (gpu/cuda: a CUDA graph; gpu/sim
// models it). A scheduler uses it for the kernels of a latency-critical
// request when nothing needs deciding between them: the host then pays for
// one submission per request instead of a launch and a record per kernel.
// Like every device call but Compile, its methods belong to the goroutine
// that owns the device.
type Grapher interface {
	// NewGraph records steps for stream s, the one stream it replays on:
	// each step's launch, then the record of its event, in order. Only
	// Plain launches are accepted. Launches are copied, arguments
	// included: changing them afterwards does not change the graph. The
	// events stay the caller's; the graph only records them. Since s runs
	// its graphs and launches in order, they share its scratch memory
	// (gpu/cuda: the vendor library's workspace), however many graphs
	// are made for it.
	NewGraph(s Stream, steps []GraphStep) (Graph, error)
	// LaunchGraph enqueues g on s, the stream g was made for: the same
	// work as Launch and Record of every step in turn on s, submitted with
	// one host call. Launching g again before its events have completed
	// records them again (as Record would), so a caller keeps one graph
	// per replay it wants in flight at once.
	LaunchGraph(g Graph, s Stream) error
	// DestroyGraph releases g; work already launched completes.
	DestroyGraph(g Graph) error
}

// Device is the one interface between scheduling and hardware. It has two
// implementations: gpu/sim, a discrete-event simulated GPU (the default and
// the test bed) and gpu/cuda, the real GPU through the CUDA driver API.
//
// A Device is not safe for concurrent use: exactly one goroutine owns it (on
// the real GPU that goroutine is locked to its OS thread). HostWord loads and
// stores are the exception: they are atomic and may be made from any
// goroutine.
//
// Every method is asynchronous with respect to the GPU unless it says
// otherwise: Launch and Record enqueue work and return.
type Device interface {
	// Info describes the device: backend, name, limits, priority range.
	Info() Info

	// Now is the device clock, nanoseconds since the device was opened. On
	// the simulator it is virtual time; on the GPU it is derived from the
	// host's monotonic clock aligned with event timestamps.
	Now() time.Duration

	// Wait blocks (real GPU) or advances virtual time (simulator) until the
	// device clock reaches until, or until something observable happened
	// earlier: an event completed or a kernel stored a HostWord. It returns
	// at once if until <= Now(). Callers poll events after it returns.
	Wait(ctx context.Context, until time.Duration) error

	// NewContext makes a further GPU context (for the timeslice baseline).
	NewContext() (Context, error)
	// NewPartition makes a context whose streams run on sms SMs only (an
	// SM partition: a CUDA green context). Unlike NewContext's, its
	// streams run concurrently with the primary context's, sharing memory,
	// modules, events and host words with it; the SMs outside the
	// partition stay free for the primary context's streams. sms must pass
	// CheckPartition. Asking again for a size already made returns the
	// same context.
	NewPartition(sms int) (Context, error)
	// NewPartitionRest makes a context on the SMs that NewPartition(sms)'s
	// partition leaves, from the same split: its streams never run on the
	// partition's SMs, nor the partition's on its, so work in the two
	// shares no SM (only memory, L2 and the copy engines). It shares
	// memory, modules, events and host words as a partition does. sms must
	// pass CheckPartition. Asking again for a size returns the same
	// context.
	NewPartitionRest(sms int) (Context, error)
	NewStream(opt StreamOptions) (Stream, error)
	// DestroyStream invalidates s; work enqueued in it still completes
	// (gpu/cuda waits for it and keeps the CUDA stream for a later
	// NewStream of the same context and priority).
	DestroyStream(s Stream) error

	// LoadModule compiles or loads src; Function resolves a kernel in it.
	LoadModule(src ModuleSource) (Module, error)

	Alloc(bytes int64) (Ptr, error)
	Free(p Ptr) error
	// CopyToDevice and CopyFromDevice are synchronous copies.
	CopyToDevice(dst Ptr, src []byte) error
	CopyFromDevice(dst []byte, src Ptr) error
	// Memset32 enqueues a fill of n 32-bit words at p with v on stream s.
	Memset32(s Stream, p Ptr, v uint32, n int) error

	// NewHostWords maps n words of pinned host memory into the device.
	NewHostWords(n int) ([]HostWord, error)
	// Store and Load access a HostWord from the host (atomic, any goroutine).
	Store(w HostWord, v uint32)
	Load(w HostWord) uint32

	// Launch enqueues a kernel on stream s. It validates the shape against
	// the device's limits and returns ErrInvalidLaunch (wrapped) if it can
	// never run.
	Launch(s Stream, l *Launch) error

	NewEvent() (Event, error)
	DestroyEvent(e Event) error
	// Record places e in s: it completes when all work enqueued in s
	// before it has completed.
	Record(e Event, s Stream) error
	// Query reports whether e has completed.
	Query(e Event) (bool, error)
	// Time is the device-clock time at which e completed (ErrNotReady if
	// it has not).
	Time(e Event) (time.Duration, error)

	// Close releases everything the device made.
	Close() error
}

// HostStalls are the times a device's host thread was kept from its work
// for StallThreshold or more while it waited for the GPU: the operating
// system or the VM took its CPU, or a driver call blocked. The GPU runs
// on meanwhile, but nothing is launched and no completion is seen, so
// every HP request in flight or arriving then is late by up to the stall.
// A device that watches for them (the CUDA backend) answers TakeHostStalls.
type HostStalls struct {
	Count   int           `json:"count"`
	Total   time.Duration `json:"totalNs"`
	Longest time.Duration `json:"longestNs"`
}

// StallThreshold is the shortest gap in a host thread's wait counted as a
// stall: far longer than one poll of the GPU (microseconds), and
// the lateness of a timer wake-up on an idle host.
const StallThreshold = time.Millisecond

// Add counts a stall of d.
func (h *HostStalls) Add(d time.Duration) {
	h.Count++
	h.Total += d
	h.Longest = max(h.Longest, d)
}

// Module is a loaded kernel module.
type Module interface {
	Function(name string) (Func, error)
}

// Info describes an opened device.
type Info struct {
	Backend    string // "sim" or "cuda"
	Name       string // e.g. "NVIDIA H100 80GB HBM3" or "sim:H100-SXM"
	Driver     string // driver version, or the simulator's model version
	Spec       Spec
	Priorities Priorities
	// BLAS names the vendor GEMM library the device runs products on
	// (gpu.BLAS; e.g. "cuBLASLt 13.1.0"), "" when it has none.
	BLAS string
}

// Priorities is a device's stream priority range in CUDA's convention:
// Greatest (most urgent) is numerically <= Least.
type Priorities struct {
	Least    int // e.g. 0
	Greatest int // e.g. -5
}

// Clamp maps p into the range.
func (r Priorities) Clamp(p int) int {
	if p > r.Least {
		return r.Least
	}
	if p < r.Greatest {
		return r.Greatest
	}
	return p
}
