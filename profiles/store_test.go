package profiles_test

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"atoll/profiles"
)

// TestStoreTakesPrecedence: a profile in the store (ATOLL_PROFILES) is
// found by Lookup and listed, in place of the embedded one of the same
// name, and a new batch size needs no rebuild.
func TestStoreTakesPrecedence(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(profiles.StoreEnv, dir)
	if profiles.StoreDir() != dir {
		t.Fatalf("StoreDir %q, want %q", profiles.StoreDir(), dir)
	}
	emb, err := profiles.Lookup("H100-SXM", "mobilenetv2", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("H100-SXM", "mobilenetv2-bs1.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The same profile as batch 4 (a made-up file: only its name and
	// batch field differ), and batch 1 with a marker in its notes.
	bs4 := strings.Replace(string(data), `"batch": 1,`, `"batch": 4,`, 1)
	for name, text := range map[string]string{"mobilenetv2-bs4.json": bs4, "mobilenetv2-bs1.json": string(data)} {
		p := filepath.Join(dir, "H100-SXM", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p4, err := profiles.Lookup("H100-SXM", "mobilenetv2", 4, "")
	if err != nil || p4.Batch != 4 || len(p4.Kernels) != len(emb.Kernels) {
		t.Fatalf("stored bs4: %v %+v", err, p4)
	}
	stored := 0
	names := map[string]int{}
	for _, e := range profiles.List() {
		names[e.String()]++
		if e.Stored {
			stored++
		}
	}
	if stored != 2 || names["H100-SXM/mobilenetv2-bs1"] != 1 || names["H100-SXM/mobilenetv2-bs4"] != 1 {
		t.Errorf("List: %d stored, names %v", stored, names)
	}
	if err := os.WriteFile(filepath.Join(dir, "H100-SXM", "mobilenetv2-bs1.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := profiles.Lookup("H100-SXM", "mobilenetv2", 1, ""); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("a broken stored profile: %v, want an error naming its path", err)
	}
}

func TestPartitionSMs(t *testing.T) {
	pt := func(sms int, us float64) profiles.Point { return profiles.Point{SMs: sms, DurationUs: us} }
	for _, c := range []struct {
		pts  []profiles.Point
		want int
	}{
		{nil, 0},
		{[]profiles.Point{pt(8, 400), pt(16, 200), pt(32, 104), pt(64, 100), pt(132, 100)}, 32},
		{[]profiles.Point{pt(8, 400), pt(64, 130), pt(96, 115), pt(132, 100)}, 132},
		{[]profiles.Point{pt(8, 100), pt(132, 100)}, 8},
	} {
		k := profiles.Kernel{Partition: c.pts}
		if got := k.PartitionSMs(); got != c.want {
			t.Errorf("PartitionSMs(%+v) = %d, want %d", c.pts, got, c.want)
		}
	}
}

// A store may keep its profiles gzipped (<name>.json.gz): Lookup reads and
// List lists them, the plain file wins where both exist, and a broken one
// is refused with its path.
func TestStoreReadsGzipped(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(profiles.StoreEnv, dir)
	data, err := os.ReadFile(filepath.Join("H100-SXM", "mobilenetv2-bs1.json"))
	if err != nil {
		t.Fatal(err)
	}
	bs4 := strings.Replace(string(data), `"batch": 1,`, `"batch": 4,`, 1)
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(bs4))
	zw.Close()
	p := filepath.Join(dir, "H100-SXM", "mobilenetv2-bs4.json.gz")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	p4, err := profiles.Lookup("H100-SXM", "mobilenetv2", 4, "")
	if err != nil || p4.Batch != 4 {
		t.Fatalf("gzipped bs4: %v %+v", err, p4)
	}
	listed := 0
	for _, e := range profiles.List() {
		if e.Stored && e.String() == "H100-SXM/mobilenetv2-bs4" {
			listed++
			if e.Path != p {
				t.Errorf("listed at %q, want %q", e.Path, p)
			}
		}
	}
	if listed != 1 {
		t.Errorf("the gzipped profile listed %d times, want once", listed)
	}
	// A plain file beside it wins (and is listed once).
	if err := os.WriteFile(strings.TrimSuffix(p, ".gz"), []byte(bs4), 0o644); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range profiles.List() {
		if e.String() == "H100-SXM/mobilenetv2-bs4" {
			n++
			if !strings.HasSuffix(e.Path, ".json") {
				t.Errorf("listed %q: want the plain file", e.Path)
			}
		}
	}
	if n != 1 {
		t.Errorf("listed %d times with both files, want once", n)
	}
	os.Remove(strings.TrimSuffix(p, ".gz"))
	if err := os.WriteFile(p, []byte{0x1f, 0x8b, 1, 2, 3}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := profiles.Lookup("H100-SXM", "mobilenetv2", 4, ""); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("a broken gzipped profile: %v, want an error naming %s", err, p)
	}
}
