package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun draws the committed soak and refuses malformed samples with the
// line that is wrong.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "soak.svg")
	if err := run("../../results/soak-h200/samples.txt", out); err != nil {
		t.Fatal(err)
	}
	if svg, err := os.ReadFile(out); err != nil || !strings.Contains(string(svg), "<svg") || !strings.Contains(string(svg), "GPU memory") {
		t.Fatalf("no SVG with its panels: %v", err)
	}
	bad := filepath.Join(dir, "bad.txt")
	for _, body := range []string{"soak 1 2 3\n", "soak 1 x 3 4 5\n", "soak 1 2 3 4 5\n"} {
		if err := os.WriteFile(bad, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := run(bad, out); err == nil {
			t.Errorf("%q: drawn without an error", body)
		}
	}
}
