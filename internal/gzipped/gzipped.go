// Package gzipped reads data that may be stored gzipped: a report kept as
// <name>.json.gz reads as its JSON.
package gzipped

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
)

// Unwrap returns data decompressed when it is a gzip stream (it starts
// with gzip's magic bytes), else data itself.
func Unwrap(data []byte) ([]byte, error) {
	if !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		return data, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	return out, nil
}

// ReadAll reads rd to its end and returns what it holds, decompressed
// when it is a gzip stream (Unwrap).
func ReadAll(rd io.Reader) ([]byte, error) {
	data, err := io.ReadAll(rd)
	if err != nil {
		return nil, err
	}
	return Unwrap(data)
}
