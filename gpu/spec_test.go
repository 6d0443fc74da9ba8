package gpu

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/quick"
)

// naiveOccupancy adds blocks to an empty SM one at a time, allocating each
// resource at its granularity, until the next block would not fit.
func naiveOccupancy(s Spec, threads, regs, smem int) int {
	usedWarps, usedRegs, usedSmem, n := 0, 0, 0, 0
	warps := (threads + s.WarpSize - 1) / s.WarpSize
	regsPerWarp := 0
	if regs > 0 {
		regsPerWarp = regs * s.WarpSize
		if r := regsPerWarp % s.RegisterAllocUnit; r != 0 {
			regsPerWarp += s.RegisterAllocUnit - r
		}
	}
	smemPerBlock := 0
	if smem > 0 {
		smemPerBlock = smem
		if r := smemPerBlock % s.SharedMemAlloc; r != 0 {
			smemPerBlock += s.SharedMemAlloc - r
		}
		smemPerBlock += s.SharedMemReserved
	}
	for {
		if n+1 > s.MaxBlocksPerSM ||
			(usedWarps+warps)*s.WarpSize > s.MaxThreadsPerSM ||
			usedRegs+warps*regsPerWarp > s.RegistersPerSM ||
			usedSmem+smemPerBlock > s.SharedMemPerSM {
			return n
		}
		n++
		usedWarps += warps
		usedRegs += warps * regsPerWarp
		usedSmem += smemPerBlock
	}
}

func TestOccupancyMatchesNaive(t *testing.T) {
	for _, s := range []Spec{H100SXM, H200, A100SXM} {
		f := func(th, rg, sm uint16) bool {
			threads := 1 + int(th)%s.MaxThreadsPerBlock
			regs := int(rg) % (s.MaxRegistersPerThrd + 1)
			smem := int(sm) * 4 % (s.MaxSharedMemPerBlock + 1)
			want := naiveOccupancy(s, threads, regs, smem)
			got, _, err := s.Occupancy(threads, regs, smem)
			if want == 0 {
				return err != nil && errors.Is(err, ErrInvalidLaunch)
			}
			return err == nil && got == want
		}
		if err := quick.Check(f, &quick.Config{MaxCount: 50000}); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
}

// Figures from NVIDIA's occupancy calculator for compute capability 9.0.
func TestOccupancyKnownShapes(t *testing.T) {
	cases := []struct {
		threads, regs, smem, want int
		limit                     string
	}{
		{256, 128, 0, 2, "registers"},    // 8 warps × 4096 regs = 32768 per block
		{256, 32, 0, 8, "threads"},       // 64 warps / 8
		{128, 32, 0, 16, "threads"},      // 64 / 4
		{32, 16, 0, 32, "blocks"},        // the 32-block cap
		{256, 64, 32768, 4, "registers"}, // 8 warps × 2048 regs = 16384; threads allow 8, smem 6
		{128, 96, 100 << 10, 2, "shared memory"},
		{1024, 64, 0, 1, "registers"}, // 32 warps × 2048 = 65536 (threads would allow 2)
	}
	for _, c := range cases {
		got, limit, err := H100SXM.Occupancy(c.threads, c.regs, c.smem)
		if err != nil || got != c.want || limit != c.limit {
			t.Errorf("Occupancy(%d threads, %d regs, %d B) = %d (%s), %v; want %d (%s)", c.threads, c.regs, c.smem, got, limit, err, c.want, c.limit)
		}
	}
}

func TestOccupancyErrors(t *testing.T) {
	for _, c := range []struct {
		threads, regs, smem int
		want                string
	}{
		{0, 32, 0, "0 threads per block"},
		{1025, 32, 0, "1025 threads per block"},
		{256, 256, 0, "256 registers per thread"},
		{256, 32, 300 << 10, "bytes of shared memory"},
		{1024, 255, 0, "does not fit on one SM"},
	} {
		_, _, err := H100SXM.Occupancy(c.threads, c.regs, c.smem)
		if !errors.Is(err, ErrInvalidLaunch) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Occupancy(%d, %d, %d) error = %v, want %q", c.threads, c.regs, c.smem, err, c.want)
		}
	}
}

func TestSMsNeeded(t *testing.T) {
	if got := H100SXM.SMsNeeded(100, 2); got != 50 {
		t.Errorf("SMsNeeded(100, 2) = %d", got)
	}
	if got := H100SXM.SMsNeeded(10000, 2); got != 132 {
		t.Errorf("SMsNeeded caps at the SM count, got %d", got)
	}
}

func TestLookupSpec(t *testing.T) {
	for name, want := range map[string]string{
		"H100-SXM": "H100-SXM", "h200": "H200", "NVIDIA H100 80GB HBM3": "H100-SXM",
		"NVIDIA H200": "H200", "NVIDIA A100-SXM4-80GB": "A100-SXM",
	} {
		s, err := LookupSpec(name)
		if err != nil || s.Name != want {
			t.Errorf("LookupSpec(%q) = %q, %v; want %q", name, s.Name, err, want)
		}
		if err := s.Validate(); err != nil {
			t.Error(err)
		}
	}
	if _, err := LookupSpec("Voodoo2"); err == nil || !strings.Contains(err.Error(), "known: A100-SXM, H100-SXM, H200") {
		t.Errorf("unknown GPU error should list the known ones: %v", err)
	}
	bad := H100SXM
	bad.SMs = 0
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "SMs must be positive") {
		t.Errorf("Validate: %v", err)
	}
}

func TestArgsPackingFollowsCUDAAlignment(t *testing.T) {
	var a Args
	a.I32(-1).Ptr(0x1122334455667788).F32(1.5).U32(7)
	b := a.Bytes()
	// i32 at 0, pad to 8, ptr at 8, f32 at 16, u32 at 20; total 24.
	if len(b) != 24 {
		t.Fatalf("len = %d, want 24", len(b))
	}
	if int32(binary.LittleEndian.Uint32(b[0:])) != -1 ||
		binary.LittleEndian.Uint64(b[8:]) != 0x1122334455667788 ||
		math.Float32frombits(binary.LittleEndian.Uint32(b[16:])) != 1.5 ||
		binary.LittleEndian.Uint32(b[20:]) != 7 {
		t.Fatalf("bad layout: %x", b)
	}
	a.Reset()
	if a.Len() != 0 {
		t.Fatal("Reset must empty the buffer")
	}
	if n := testing.AllocsPerRun(100, func() { a.Reset(); a.Ptr(1).I32(2).F32(3) }); n != 0 {
		t.Errorf("re-packing a reset Args allocates %v times", n)
	}
}

func TestFormsAndDims(t *testing.T) {
	for _, f := range []Form{Plain, Reset, Resumable, Padded} {
		g, err := ParseForm(f.String())
		if err != nil || g != f {
			t.Errorf("ParseForm(%q) = %v, %v", f, g, err)
		}
	}
	if _, err := ParseForm("sliced"); err == nil {
		t.Error("unknown form must fail")
	}
	if (Dim3{X: 4}).Count() != 4 || (Dim3{4, 2, 3}).Count() != 24 {
		t.Error("Dim3.Count")
	}
	if (Priorities{Least: 0, Greatest: -5}).Clamp(-9) != -5 || (Priorities{Least: 0, Greatest: -5}).Clamp(3) != 0 {
		t.Error("Clamp")
	}
	l := &Launch{Grid: D1(8), Form: Resumable, Logical: 100}
	if l.LogicalBlocks() != 100 {
		t.Error("resumable logical blocks")
	}
}
