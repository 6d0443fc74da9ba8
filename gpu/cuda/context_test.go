package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"atoll/gpu"
)

// bertProducts is BERT-base's products at batch 1 (seq 128) as graph
// steps: 48 cuBLASLt products, each with its own weights, an event after
// every fourth (as an HP request's graph records one a chunk).
func bertProducts(t *testing.T, d *Device) []gpu.GraphStep {
	t.Helper()
	const seq, hidden, ffn = 128, 768, 3072
	shapes := [][2]int{{hidden, 3 * hidden}, {hidden, hidden}, {hidden, ffn}, {ffn, hidden}} // K, N per layer
	act, err := d.Alloc(int64(2 * seq * ffn * 2))
	must(t, err)
	var steps []gpu.GraphStep
	for range 12 {
		for _, sh := range shapes {
			w, err := d.Alloc(int64(2 * sh[0] * sh[1]))
			must(t, err)
			f, err := d.Matmul(gpu.Matmul{M: seq, N: sh[1], K: sh[0], In: gpu.BF16, Out: gpu.BF16})
			must(t, err)
			l := &gpu.Launch{Name: "matmul", Func: f, Grid: gpu.D1(1), Block: gpu.D1(128)}
			gpu.MatmulArgs(&l.Args, act, w, act+gpu.Ptr(2*seq*ffn), 0, 0)
			steps = append(steps, gpu.GraphStep{Launch: l})
		}
	}
	evs := newEvents(t, d, len(steps)/4)
	for i := range steps {
		if i%4 == 3 {
			steps[i].Event = evs[i/4]
		}
	}
	return steps
}

// spanOn is the median over 40 replays of a graph of steps on s, 300 µs
// apart, from an event recorded right before it to its last step's event.
func spanOn(t *testing.T, d *Device, s gpu.Stream, steps []gpu.GraphStep) time.Duration {
	t.Helper()
	g, err := d.NewGraph(s, steps)
	must(t, err)
	defer func() { must(t, d.DestroyGraph(g)) }()
	start := newEvents(t, d, 1)[0]
	defer func() { must(t, d.DestroyEvent(start)) }()
	var spans []time.Duration
	for i := range 41 {
		must(t, d.Wait(context.Background(), d.Now()+300*time.Microsecond))
		must(t, d.Record(start, s))
		must(t, d.LaunchGraph(g, s))
		must(t, d.Synchronize())
		if i > 0 {
			spans = append(spans, waitEvent(t, d, steps[len(steps)-1].Event)-waitEvent(t, d, start))
		}
	}
	return median(spans)
}

// churnModes are what TestGPUStreamChurn does between its two timings,
// each in a fresh process: N times (32 where the name gives no N).
var churnModes = []string{"none", "make", "make-launch-2", "make-launch-4", "make-launch-6", "make-launch-8", "make-launch-12", "make-launch-16", "make-launch",
	"destroy", "destroy-launch", "destroy-launch-least", "make-launch-least", "alternate", "alternate-s0", "alternate-greatest", "alternate-poll", "alternate-nosync", "alternate-graph", "partition-1", "alternate-16", "alternate-8", "launch-12", "launch-16", "launch", "graph-launch", "graphs", "events"}

// TestGPUStreamChurn measures when every kernel of a process starts to run
// slower (what made HP requests 5–8 % slower inside a matrix process than
// in a fresh one, results/context-h200). Each mode runs in a fresh process
// (this test binary again): it times a graph of BERT-base's products on a
// stream of the greatest priority, does one thing N times — make streams
// (keeping them), launch on them, destroy them, launch on the first
// stream, alternate launches between two streams, make and destroy graphs
// or events — and times the graph again on the first stream and on a new
// one. On H200s (results/churn-h200) the products run 7 % slower for the
// rest of the process once work has been launched on 16 or more streams,
// or once 16 launches have moved between two streams of any priorities
// ("alternate", "alternate-s0" between the timed stream and one of the
// least priority, "alternate-greatest" between two of the greatest,
// "alternate-poll" waiting for each launch by polling an event recorded
// after it as the scheduler does, "alternate-nosync" not waiting);
// "alternate-graph" alternates one-kernel graph launches instead, as the
// scheduler's HP requests and BE chunks go (not yet run: a matrix process,
// whose launches alternate so, runs at a fresh process's speed);
// "partition-1" launches once in an SM partition (a matrix process with a
// partition policy served HP 5–7 % slower, results/partition-process-h200);
// 8 alternations, 12 streams with work, 32 launches on one other stream
// ("destroy-launch-least": made, launched on and destroyed at one
// priority, so one kept CUDA stream serves them all), streams made
// without work, graphs and events change nothing. Making streams without
// launching on them must stay free.
// ATOLL_CHURN_MODES (space-separated) runs only the modes it names.
func TestGPUStreamChurn(t *testing.T) {
	if mode := os.Getenv("ATOLL_CHURN_MODE"); mode != "" {
		churn(t, mode)
		return
	}
	modes := churnModes
	if v := os.Getenv("ATOLL_CHURN_MODES"); v != "" {
		modes = strings.Fields(v) // a subset, e.g. "none alternate"
	}
	for _, mode := range modes {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestGPUStreamChurn$", "-test.v")
		cmd.Env = append(os.Environ(), "ATOLL_CHURN_MODE="+mode)
		out, err := cmd.CombinedOutput()
		if strings.Contains(string(out), "--- SKIP") {
			t.Skipf("mode %s skipped: %s", mode, out)
		}
		if err != nil {
			t.Errorf("mode %s: %v\n%s", mode, err, out)
			continue
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "churn ") {
				t.Log(strings.TrimSpace(l[strings.Index(l, "churn "):]))
			}
		}
	}
}

func churn(t *testing.T, mode string) {
	d, k := openGPU(t)
	if name := d.BLASName(); strings.HasPrefix(name, "none") {
		t.Skipf("no cuBLASLt here: %s", name)
	}
	pr := d.Info().Priorities
	steps := bertProducts(t, d)
	s0, err := d.NewStream(gpu.StreamOptions{Priority: pr.Greatest})
	must(t, err)
	before := spanOn(t, d, s0, steps)
	empty := &gpu.Launch{Name: "empty", Func: k.empty, Grid: gpu.D1(1), Block: gpu.D1(32)}
	var keep []gpu.Stream
	n := 32
	if i := strings.LastIndexByte(mode, '-'); i > 0 {
		if v, err := strconv.Atoi(mode[i+1:]); err == nil {
			mode, n = mode[:i], v
		}
	}
	var pair [2]gpu.Stream
	if strings.HasPrefix(mode, "alternate") {
		for i := range pair {
			p := []int{pr.Least, pr.Greatest}[i]
			if mode == "alternate-greatest" {
				p = pr.Greatest
			}
			pair[i], err = d.NewStream(gpu.StreamOptions{Priority: p})
			must(t, err)
		}
		if mode == "alternate-s0" {
			pair[1] = s0
		}
	}
	var graphs [2]gpu.Graph
	if mode == "alternate-graph" {
		for i := range graphs {
			graphs[i], err = d.NewGraph(pair[i], []gpu.GraphStep{{Launch: empty}})
			must(t, err)
		}
	}
	ev := newEvents(t, d, 1)[0]
	for i := range n {
		prio := []int{pr.Least, pr.Greatest}[i%2]
		if strings.HasSuffix(mode, "-least") {
			prio = pr.Least
		}
		switch strings.TrimSuffix(mode, "-least") {
		case "none":
		case "alternate", "alternate-s0", "alternate-greatest":
			must(t, d.Launch(pair[i%2], empty))
			must(t, d.Synchronize())
		case "alternate-poll":
			must(t, d.Launch(pair[i%2], empty))
			must(t, d.Record(ev, pair[i%2]))
			for done := false; !done; {
				done, err = d.Query(ev)
				must(t, err)
			}
		case "alternate-nosync":
			must(t, d.Launch(pair[i%2], empty))
		case "alternate-graph":
			must(t, d.LaunchGraph(graphs[i%2], pair[i%2]))
			must(t, d.Synchronize())
		case "partition":
			// One launch in an SM partition (a green context), made once.
			if i == 0 {
				spec := d.Info().Spec
				part, err := d.NewPartition(gpu.PartitionFloor(spec, spec.SMs-spec.PartitionStep))
				must(t, err)
				ps, err := d.NewStream(gpu.StreamOptions{Context: part, Priority: pr.Least})
				must(t, err)
				must(t, d.Launch(ps, empty))
				must(t, d.Synchronize())
			}
		case "make", "make-launch", "destroy", "destroy-launch":
			s, err := d.NewStream(gpu.StreamOptions{Priority: prio})
			must(t, err)
			if strings.HasSuffix(strings.TrimSuffix(mode, "-least"), "launch") {
				must(t, d.Launch(s, empty))
				must(t, d.Synchronize())
			}
			if strings.HasPrefix(mode, "destroy") {
				must(t, d.DestroyStream(s))
			} else {
				keep = append(keep, s)
			}
		case "launch":
			must(t, d.Launch(s0, empty))
			must(t, d.Synchronize())
		case "graph-launch":
			g, err := d.NewGraph(s0, []gpu.GraphStep{{Launch: empty}})
			must(t, err)
			must(t, d.LaunchGraph(g, s0))
			must(t, d.Synchronize())
			must(t, d.DestroyGraph(g))
		case "graphs":
			g, err := d.NewGraph(s0, steps)
			must(t, err)
			must(t, d.DestroyGraph(g))
		case "events":
			for _, e := range newEvents(t, d, 16) {
				must(t, d.Record(e, s0))
				must(t, d.Synchronize())
				must(t, d.DestroyEvent(e))
			}
		default:
			t.Fatalf("unknown mode %q (want one of %v)", mode, churnModes)
		}
	}
	must(t, d.Synchronize())
	old := spanOn(t, d, s0, steps)
	s1, err := d.NewStream(gpu.StreamOptions{Priority: pr.Greatest})
	must(t, err)
	fresh := spanOn(t, d, s1, steps)
	if mode == "make" && float64(fresh) > 1.03*float64(before) {
		t.Errorf("%d streams made, nothing launched on them, slowed the products from %v to %v", n, before, fresh)
	}
	t.Log(fmt.Sprintf("churn %-15s ×%-2d %d products: %v before, %v after on the first stream (%+.1f %%), %v on a new one (%+.1f %%); %d streams kept",
		mode, n, len(steps), before, old, 100*(float64(old)/float64(before)-1), fresh, 100*(float64(fresh)/float64(before)-1), len(keep)))
}

// TestGPUStreamReuse: DestroyStream waits for the stream's work and keeps
// the CUDA stream; a later NewStream of the same context and priority gets
// it back under a new handle, the old handle is refused, and one of
// another priority gets its own.
func TestGPUStreamReuse(t *testing.T) {
	d, k := openGPU(t)
	pr := d.Info().Priorities
	buf, err := d.Alloc(4 << 20)
	must(t, err)
	s1, err := d.NewStream(gpu.StreamOptions{Priority: pr.Least})
	must(t, err)
	h1 := d.streams[s1].h
	must(t, d.Launch(s1, spinLaunch(k, 2_000_000)))
	l := &gpu.Launch{Name: "fill", Func: k.fill, Grid: gpu.D1(4096), Block: gpu.D1(256)}
	l.Args.Ptr(buf).U32(7).I32(1 << 20)
	must(t, d.Launch(s1, l))
	must(t, d.DestroyStream(s1))
	got := make([]byte, 4<<20)
	must(t, d.CopyFromDevice(got, buf))
	for i := range len(got) / 4 {
		if w := binary.LittleEndian.Uint32(got[4*i:]); w != uint32(7+i) {
			t.Fatalf("word %d is %d after DestroyStream returned, want %d: the stream's work had not completed", i, w, 7+i)
		}
	}
	if err := d.Launch(s1, l); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("Launch on a destroyed stream: %v, want gpu.ErrInvalidHandle", err)
	}
	s2, err := d.NewStream(gpu.StreamOptions{Priority: pr.Least})
	must(t, err)
	if s2 == s1 || d.streams[s2].h != h1 {
		t.Errorf("NewStream after DestroyStream: handle %d (was %d), CUDA stream %#x (was %#x): want a new handle on the same CUDA stream", s2, s1, d.streams[s2].h, h1)
	}
	s3, err := d.NewStream(gpu.StreamOptions{Priority: pr.Greatest})
	must(t, err)
	if pr.Greatest != pr.Least && d.streams[s3].h == h1 {
		t.Errorf("a stream of the greatest priority got the least-priority CUDA stream")
	}
	must(t, d.Launch(s2, l))
	must(t, d.Launch(s3, l))
	must(t, d.Synchronize())
	must(t, d.DestroyStream(s2))
	must(t, d.DestroyStream(s3))
}
