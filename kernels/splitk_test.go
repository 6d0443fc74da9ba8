package kernels

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"atoll/gpu"
)

// AutoSplitK against its contract, over a grid of shapes: no split from
// splitKTiles tiles; otherwise at most maxSplitK splits, no empty chunk,
// no automatic chunk shorter than splitKMinTiles K-tiles, and no fewer
// splits than needed to reach splitKTarget blocks unless a cap binds.
func TestAutoSplitK(t *testing.T) {
	for tiles := 1; tiles <= 200; tiles++ {
		for k := 1; k <= 20000; k += 37 {
			s := AutoSplitK(tiles, k)
			kt := ceilDiv(k, gemmBK)
			if s < 1 || s > maxSplitK {
				t.Fatalf("tiles %d k %d: split %d", tiles, k, s)
			}
			if s == 1 {
				if tiles < splitKTiles && kt >= 2*splitKMinTiles && tiles*2 <= splitKTarget {
					t.Errorf("tiles %d k %d: not split, though two chunks of %d K-tiles fit", tiles, k, splitKMinTiles)
				}
				continue
			}
			if tiles >= splitKTiles {
				t.Errorf("tiles %d k %d: split %d, want none from %d tiles", tiles, k, s, splitKTiles)
			}
			chunk := ceilDiv(kt, s)
			if ceilDiv(kt, chunk) != s {
				t.Errorf("tiles %d k %d: %d splits of %d K-tiles leave an empty one (kt %d)", tiles, k, s, chunk, kt)
			}
			if chunk < splitKMinTiles {
				t.Errorf("tiles %d k %d: chunks of %d K-tiles, want ≥ %d", tiles, k, chunk, splitKMinTiles)
			}
			if tiles*s < splitKTarget && s < maxSplitK && kt/(s+1) >= splitKMinTiles && ceilDiv(kt, ceilDiv(kt, s+1)) > s {
				t.Errorf("tiles %d k %d: %d splits give %d blocks, below %d though more fit", tiles, k, s, tiles*s, splitKTarget)
			}
		}
	}
}

func TestSplitKShapes(t *testing.T) {
	// ResNet-50's last 3x3 convolution at batch 1: 8 output tiles, K 4608.
	c := Conv2D{N: 1, H: 7, W: 7, C: 512, OutC: 512, R: 3, S: 3, Stride: 1, Pad: 1, In: BF16, Bias: true, Act: ActReLU}
	s := Splits(c)
	if s < 2 || c.Geometry().Grid.Z != s || !strings.Contains(c.Shape(), "splitk=") {
		t.Errorf("%s: splits %d, grid %v", c.Shape(), s, c.Geometry().Grid)
	}
	c.SplitK = 1
	if Splits(c) != 1 || c.Geometry().Grid.Z != 1 || strings.Contains(c.Shape(), "splitk") {
		t.Errorf("SplitK 1 still splits: %s %v", c.Shape(), c.Geometry().Grid)
	}
	for _, op := range []Op{
		GEMM{M: 64, N: 64, K: 4096, In: BF16, Out: BF16, Batch: 4}, // batched
		Conv2D{N: 1, H: 7, W: 7, C: 512, OutC: 512, R: 3, S: 3, Pad: 1, In: BF16, BackwardData: true},
		GEMM{M: 4096, N: 4096, K: 4096, In: BF16, Out: BF16}, // many tiles
	} {
		if Splits(op) != 1 {
			t.Errorf("%s %s: split %d, want none", op.Kernel(), op.Shape(), Splits(op))
		}
	}
	for _, op := range []Op{
		GEMM{M: 64, N: 64, K: 1024, In: BF16, Out: BF16, SplitK: -1},
		GEMM{M: 64, N: 64, K: 1024, In: BF16, Out: BF16, Batch: 2, SplitK: 2},
		GEMM{M: 64, N: 64, K: 128, In: BF16, Out: BF16, SplitK: 3}, // two K-tiles
		GEMM{M: 64, N: 64, K: 64 * 40, In: BF16, Out: BF16, SplitK: maxSplitK + 1},
		Conv2D{N: 1, H: 7, W: 7, C: 512, OutC: 512, R: 3, S: 3, Pad: 1, In: BF16, BackwardFilter: true, SplitK: 2},
	} {
		if _, err := Tensors(op); !errors.Is(err, ErrShape) {
			t.Errorf("%s %s (SplitK %v): %v, want ErrShape", op.Kernel(), op.Shape(), op, err)
		}
	}
	// An explicit split never leaves an empty chunk: 10 K-tiles in 6 asked
	// for are 5 chunks of 2.
	if g := (GEMM{M: 64, N: 64, K: 640, In: BF16, Out: BF16, SplitK: 6}); g.splits() != 5 || g.kChunk() != 128 {
		t.Errorf("SplitK 6 of 10 K-tiles: %d splits of %d", g.splits(), g.kChunk())
	}
}

// A split op's launches: its Scratch tensor last and zeroed, the run's
// identity at the end of GemmP (progress only for Resumable, the launch's
// epoch), and no sliced launch.
func TestSplitKLaunch(t *testing.T) {
	dev := newFake()
	lib := New(dev)
	op := GEMM{M: 49, N: 512, K: 4608, In: BF16, Out: BF16, Bias: true, Act: ActReLU}
	if Splits(op) < 2 {
		t.Fatalf("%s does not split", op.Shape())
	}
	b, err := Alloc(dev, op, 1)
	if err != nil {
		t.Fatal(err)
	}
	sc := b.T[len(b.T)-1]
	if sc.Role != Scratch || sc.Name != "splitk" {
		t.Fatalf("last tensor %+v, want the scratch", sc.TensorSpec)
	}
	want := splitPart(op) + 2*8 + 2 // partials, 8 tiles' tags, run counter
	if sc.Elems != want {
		t.Errorf("scratch %d elements, want %d", sc.Elems, want)
	}
	for i, v := range dev.mem[sc.Ptr] {
		if v != 0 {
			t.Fatalf("scratch byte %d is %d, want zero", i, v)
		}
	}
	if _, err := Reference(op, b); err != nil {
		t.Errorf("Reference of a split op: %v", err)
	}
	ctl := Control{Flag: gpu.HostWord{Index: 1, Dev: 0x1000}, Counter: 0x2000, Done: gpu.HostWord{Index: 2, Dev: 0x1004}}
	tail := CtlBytes + paramBytes["GemmP"] - 16 // progress, epoch, padding
	for _, form := range []gpu.Form{gpu.Plain, gpu.Reset, gpu.Resumable} {
		l, err := lib.Launch(op, form, b, ctl)
		if err != nil {
			t.Fatalf("%s: %v", form, err)
		}
		a := l.Args.Bytes()
		progress := gpu.Ptr(binary.LittleEndian.Uint64(a[tail:]))
		if wantP := gpu.Ptr(0); form == gpu.Resumable && progress != ctl.Counter || form != gpu.Resumable && progress != wantP {
			t.Errorf("%s: progress %#x", form, progress)
		}
		if e, ce := binary.LittleEndian.Uint32(a[tail+8:]), binary.LittleEndian.Uint32(a[40:]); e != ce || e == 0 {
			t.Errorf("%s: run epoch %d, Ctl epoch %d", form, e, ce)
		}
	}
	for _, sl := range []Control{{Offset: 3}, {Blocks: 5}} {
		if _, err := lib.Launch(op, gpu.Plain, b, sl); !errors.Is(err, ErrUnsupported) {
			t.Errorf("sliced launch %+v of a split op: %v, want ErrUnsupported", sl, err)
		}
	}
	hp := GEMM{M: 256, N: 256, K: 256, In: BF16, Out: BF16}
	hb, _ := Alloc(dev, hp, 2)
	if _, err := lib.LaunchPadded(op, b, Control{}, 4, hp, hb, ctl); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a split HP op sliced into a padded launch: %v, want ErrUnsupported", err)
	}
	if _, err := lib.LaunchPadded(hp, hb, Control{}, 0, op, b, ctl); err != nil {
		t.Errorf("a split BE op padded: %v", err)
	}
}
