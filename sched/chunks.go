package sched

import (
	"time"

	"atoll/gpu"
	"atoll/profiles"
)

// BE chunks. With Config.BEChunks a BE client's iteration is cut, once, into
// chunks: runs of consecutive kernels that together take at most
// BEChunkWork of profiled solo time (at most BEChunkKernels of them; a
// kernel longer than BEChunkWork is a chunk of its own). A policy that
// launches a whole chunk at once (State.LaunchBEChunk) lets the driver
// submit it as one recorded graph with one event, at its last kernel: one
// host call and one poll for the chunk instead of a launch, a record and a
// poll per kernel. A BE training step is hundreds of kernels of a few
// microseconds each, so launched one by one it keeps the host thread that
// also launches HP busy, and leaves the BE stream empty while that thread
// is elsewhere (results/confined-dry-h200). The core sees the chunk's
// kernels complete together, when its last one does (stream order), so a
// BE kernel's completion time is its chunk's end.
const (
	BEChunkWork    = 50 * time.Microsecond
	BEChunkKernels = 64
)

// chunkEnds returns, for each kernel of p, the end (exclusive) of the chunk
// that holds it. HP graphs record one event per chunk cut the same way
// (graphs.go, hpEventEnds).
func chunkEnds(p *profiles.Profile) []int {
	ends := make([]int, len(p.Kernels))
	for start := 0; start < len(p.Kernels); {
		end, work := start, time.Duration(0)
		for end < len(p.Kernels) && end-start < BEChunkKernels {
			d := p.Kernels[end].Duration()
			if end > start && work+d > BEChunkWork {
				break
			}
			work += d
			end++
		}
		for k := start; k < end; k++ {
			ends[k] = end
		}
		start = end
	}
	return ends
}

// ChunkEnd is the end (exclusive) of the chunk that holds b's next kernel:
// the kernel after it when chunks are off.
func (b *BEClient) ChunkEnd() int { return b.ChunkEndOf(b.issued) }

// ChunkEndOf is the end (exclusive) of the chunk whose first kernel is k,
// or k+1 when chunks are off: what the driver records as one graph.
func (b *BEClient) ChunkEndOf(k int) int {
	if b.chunkEnd == nil || k < 0 || k >= len(b.chunkEnd) {
		return k + 1
	}
	return b.chunkEnd[k]
}

// Calls is the number of b's device submissions in flight: a chunk
// launched by LaunchBEChunk counts once, any other launch once. It bounds
// what a stream's launch queue holds better than InFlight, which counts
// kernels.
func (b *BEClient) Calls() int { return b.calls }

// LaunchBEChunk launches, in Plain form, b's kernels from its next one to
// the end of its chunk (ChunkEnd), one decision each, as LaunchBE would,
// and returns how many it launched. It stops early where LaunchBE would
// refuse or where a kernel must continue in another form (LaunchForm).
// From a chunk's first kernel the decisions cover the whole chunk, which
// the driver then submits as one graph.
func (s *State) LaunchBEChunk(b *BEClient) int {
	end := b.ChunkEnd()
	var last LaunchID
	n := 0
	for b.issued < end && s.LaunchForm(b, gpu.Plain) == gpu.Plain {
		id, ok := s.launchBE(b, gpu.Plain)
		if !ok {
			break
		}
		last = id
		n++
	}
	if n > 0 {
		s.flights.get(last).callEnd = true
		b.calls++
	}
	return n
}
