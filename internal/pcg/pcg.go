// Package pcg is math/rand/v2's PCG generator — the same 128-bit state,
// step and DXSM output — with rand.Rand's Float64 and IntN on top, as
// plain methods of one struct. A Source gives the same draws as
// rand.New(rand.NewPCG(hi, lo)) one for one (the tests check it), so
// seeded results do not change; what changes is the cost: no interface
// call per draw, and, in the loops that draw hundreds of millions of
// values (model weights, bootstrap resamples), nothing the race detector
// instruments, so those loops are not ten times slower under -race.
package pcg

import "math/bits"

// Source is the generator's state; Source{hi, lo} is rand.NewPCG(hi, lo).
// It is not safe for concurrent use.
type Source struct{ hi, lo uint64 }

// New is Source{seed1, seed2}.
func New(seed1, seed2 uint64) *Source { return &Source{seed1, seed2} }

// Uint64 is the next 64-bit draw (rand.PCG's Uint64).
//
//go:norace
func (p *Source) Uint64() uint64 {
	const (
		mulHi    = 2549297995355413924
		mulLo    = 4865540595714422341
		incHi    = 6364136223846793005
		incLo    = 1442695040888963407
		cheapMul = 0xda942042e4dd58b5
	)
	hi, lo := bits.Mul64(p.lo, mulLo)
	hi += p.hi*mulLo + p.lo*mulHi
	lo, c := bits.Add64(lo, incLo, 0)
	hi, _ = bits.Add64(hi, incHi, c)
	p.lo, p.hi = lo, hi
	hi ^= hi >> 32
	hi *= cheapMul
	hi ^= hi >> 48
	hi *= lo | 1
	return hi
}

// Float64 is a draw from [0, 1) (rand.Rand's Float64).
//
//go:norace
func (p *Source) Float64() float64 { return float64(p.Uint64()<<11>>11) / (1 << 53) }

// IntN is a draw from [0, n), n > 0 (rand.Rand's IntN on a 64-bit
// machine: Lemire's multiply-and-reject).
//
//go:norace
func (p *Source) IntN(n int) int {
	if n <= 0 {
		panic("pcg: IntN of a non-positive n")
	}
	u := uint64(n)
	if u&(u-1) == 0 {
		return int(p.Uint64() & (u - 1))
	}
	hi, lo := bits.Mul64(p.Uint64(), u)
	if lo < u {
		thresh := -u % u
		for lo < thresh {
			hi, lo = bits.Mul64(p.Uint64(), u)
		}
	}
	return int(hi)
}
