package cuda

import "testing"

// Spare streams are handed out per context and priority, the one kept last
// first, live and with their event-time ordering reset; none is handed out
// twice, and a key with none spare says so.
func TestSpareStreams(t *testing.T) {
	var sp spareStreams
	if _, ok := sp.take(0, -5); ok {
		t.Fatal("an empty set handed out a stream")
	}
	sp.put(streamRec{h: 1, ctx: 0, prio: 0, last: 7, lastSeq: 3})
	sp.put(streamRec{h: 2, ctx: 0, prio: -5})
	sp.put(streamRec{h: 3, ctx: 0, prio: 0})
	sp.put(streamRec{h: 4, ctx: 1, prio: 0})
	for _, want := range []struct {
		ctx  int32
		prio int
		h    uintptr
	}{{0, 0, 3}, {0, 0, 1}, {0, -5, 2}, {1, 0, 4}} {
		st, ok := sp.take(want.ctx, want.prio)
		if !ok || st.h != want.h {
			t.Fatalf("take(ctx %d, priority %d) = stream %#x, %v; want %#x", want.ctx, want.prio, st.h, ok, want.h)
		}
		if !st.live || st.last != 0 || st.lastSeq != 0 || st.ctx != want.ctx || st.prio != want.prio {
			t.Errorf("stream %#x handed out as %+v: want it live, its ordering reset, its context and priority kept", st.h, st)
		}
	}
	for _, key := range [][2]int{{0, 0}, {0, -5}, {1, 0}} {
		if st, ok := sp.take(int32(key[0]), key[1]); ok {
			t.Errorf("ctx %d, priority %d: stream %#x handed out twice", key[0], key[1], st.h)
		}
	}
}
