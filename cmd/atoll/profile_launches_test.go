package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"atoll/internal/gzipped"
	"atoll/profiles"
)

// atoll profile --launches records a pass's vendor launches in the
// profile --out names, plain or gzipped, in place and without a GPU; it
// refuses a profile of another model, a missing --out and a CSV that is
// not the model's pass, leaving the profile as it was.
func TestProfileLaunches(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile("../../profiles/H200/vgg19-bs1.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := profiles.Parse(bytes.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.Kernels {
		p.Kernels[i].Launches = nil
	}
	plain, zipped := filepath.Join(dir, "vgg19-bs1.json"), filepath.Join(dir, "vgg19-bs1.json.gz")
	if err := writeProfile(plain, p); err != nil {
		t.Fatal(err)
	}
	if err := writeProfile(zipped, p); err != nil {
		t.Fatal(err)
	}
	csv := "../../results/vendor-launches-h200/vgg19-bs1.csv.gz"
	atoll := func(args ...string) (string, error) {
		var out, errs bytes.Buffer
		var err error
		if code := run(context.Background(), &env{stdout: &out, stderr: &errs}, args); code != 0 {
			err = fmt.Errorf("exit %d", code)
		}
		return out.String() + errs.String(), err
	}
	for _, path := range []string{plain, zipped} {
		out, err := atoll("profile", "--model", "vgg19", "--launches", csv, "--out", path)
		if err != nil || !strings.Contains(out, "19 vendor calls, 43 launches recorded") {
			t.Fatalf("%s: %v\n%s", path, err, out)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(path, ".gz") {
			if _, err := gzip.NewReader(bytes.NewReader(data)); err != nil {
				t.Errorf("%s is no longer gzipped: %v", path, err)
			}
			if data, err = gzipped.Unwrap(data); err != nil {
				t.Fatal(err)
			}
		}
		q, err := profiles.Parse(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(q.Kernels[0].Launches); n != 3 || q.Kernels[0].Launches[2].Block != 384 {
			t.Errorf("%s: features.0 has launches %+v, want padrows, im2colp and the product", path, q.Kernels[0].Launches)
		}
	}
	notGz := filepath.Join(dir, "bad.json.gz")
	if err := os.WriteFile(notGz, src, 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(plain)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "vgg19", "--launches", csv}, "--launches needs --out"},
		{[]string{"--model", "resnet50", "--launches", csv, "--out", plain}, "not of --model resnet50"},
		{[]string{"--model", "vgg19", "--launches", "../../results/vendor-launches-h200/resnet50-bs1.csv.gz", "--out", plain}, "not one pass of this model"},
		{[]string{"--model", "vgg19", "--launches", filepath.Join(dir, "none.csv"), "--out", plain}, "no such file"},
		{[]string{"--model", "vgg19", "--launches", csv, "--out", notGz}, "bad.json.gz: gzip"},
	} {
		out, err := atoll(append([]string{"profile"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error()+out, c.want) {
			t.Errorf("%v: %v (%s), want an error saying %q", c.args, err, out, c.want)
		}
	}
	if after, _ := os.ReadFile(plain); !bytes.Equal(before, after) {
		t.Error("a refused import changed the profile")
	}
}
