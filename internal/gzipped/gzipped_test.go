package gzipped

import (
	"bytes"
	"compress/gzip"
	"testing"
)

func TestUnwrap(t *testing.T) {
	plain := []byte(`{"a": 1}`)
	if got, err := Unwrap(plain); err != nil || !bytes.Equal(got, plain) {
		t.Errorf("plain: %q, %v", got, err)
	}
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write(plain)
	w.Close()
	if got, err := Unwrap(z.Bytes()); err != nil || !bytes.Equal(got, plain) {
		t.Errorf("gzipped: %q, %v", got, err)
	}
	if _, err := Unwrap(z.Bytes()[:12]); err == nil {
		t.Error("a cut gzip stream was accepted")
	}
	if _, err := Unwrap([]byte{0x1f, 0x8b, 0}); err == nil {
		t.Error("a gzip header alone was accepted")
	}
}

func TestReadAll(t *testing.T) {
	plain := []byte(`{"a": 1}`)
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write(plain)
	w.Close()
	for name, in := range map[string][]byte{"plain": plain, "gzipped": z.Bytes()} {
		if got, err := ReadAll(bytes.NewReader(in)); err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%s: %q, %v", name, got, err)
		}
	}
	if _, err := ReadAll(bytes.NewReader([]byte{0x1f, 0x8b, 1})); err == nil {
		t.Error("a broken gzip stream read without an error")
	}
}
