package models

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"

	"atoll/kernels"
)

// ErrSafetensors: a malformed safetensors file, or one whose tensors do
// not fit the model (missing, unexpected, wrong shape or type). The
// message names the tensor and the problem.
var ErrSafetensors = errors.New("models: bad safetensors")

// Data is one named tensor in its storage type: a weight, a model input or
// an output read back from a device.
type Data struct {
	Name  string
	DType kernels.DType
	Shape []int
	Raw   []byte // little-endian elements, len = Elems()·DType.Size()
}

// Elems is the product of the shape (1 for a scalar).
func (d *Data) Elems() int {
	n := 1
	for _, s := range d.Shape {
		n *= s
	}
	return n
}

// Values decodes the elements to float64.
func (d *Data) Values() []float64 { return kernels.Decode(d.DType, d.Raw) }

// NewData encodes values (rounded to dt, ties to even) as a tensor.
func NewData(name string, dt kernels.DType, shape []int, values []float64) *Data {
	return &Data{Name: name, DType: dt, Shape: slices.Clone(shape), Raw: kernels.Encode(dt, values)}
}

// Bundle is an ordered set of named tensors: what a safetensors file
// holds. The zero value is empty and ready to use.
type Bundle struct {
	// Metadata is the file's free-form string map (__metadata__).
	Metadata map[string]string
	list     []*Data
	idx      map[string]int
}

// Add appends d; a second tensor of the same name replaces the first.
func (b *Bundle) Add(d *Data) {
	if b.idx == nil {
		b.idx = map[string]int{}
	}
	if i, ok := b.idx[d.Name]; ok {
		b.list[i] = d
		return
	}
	b.idx[d.Name] = len(b.list)
	b.list = append(b.list, d)
}

// Get finds a tensor by name.
func (b *Bundle) Get(name string) (*Data, bool) {
	i, ok := b.idx[name]
	if !ok {
		return nil, false
	}
	return b.list[i], true
}

// Tensors lists the tensors in order (the Bundle owns them).
func (b *Bundle) Tensors() []*Data { return b.list }

// Len is the number of tensors.
func (b *Bundle) Len() int { return len(b.list) }

// safetensors dtype names (the format's spelling).
var stDTypes = map[string]kernels.DType{"BF16": kernels.BF16, "F16": kernels.F16, "F32": kernels.F32, "I32": kernels.I32}

func stName(d kernels.DType) string {
	for n, t := range stDTypes {
		if t == d {
			return n
		}
	}
	return d.String()
}

// maxHeader bounds the JSON header (the reference implementation's limit
// is 100 MB).
const maxHeader = 100 << 20

type stEntry struct {
	DType   string  `json:"dtype"`
	Shape   []int   `json:"shape"`
	Offsets [2]uint `json:"data_offsets"`
}

// ReadSafetensors reads a whole safetensors file: an 8-byte little-endian
// header length, a JSON header mapping each tensor name to its dtype, shape
// and [begin, end) offsets into the data that follows (plus an optional
// "__metadata__" string map), then the data. It accepts BF16, F16, F32 and
// I32 tensors and checks everything the format promises: sizes agree with
// shapes, offsets lie inside the data, tensors neither overlap nor leave
// holes, names are unique. Errors wrap ErrSafetensors and name the tensor.
func ReadSafetensors(r io.Reader) (*Bundle, error) {
	var lenBuf [8]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("%w: truncated file: no 8-byte header length (%v)", ErrSafetensors, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeader {
		return nil, fmt.Errorf("%w: header length %d is over the %d-byte limit (not a safetensors file?)", ErrSafetensors, n, maxHeader)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fmt.Errorf("%w: truncated file: header of %d bytes announced (%v)", ErrSafetensors, n, err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%w: reading data: %w", ErrSafetensors, err)
	}
	return parseSafetensors(hdr, data)
}

// parseSafetensors checks a header against the data that follows it and
// builds the bundle (the tensors alias data).
func parseSafetensors(hdr, data []byte) (*Bundle, error) {
	entries, meta, err := parseHeader(hdr)
	if err != nil {
		return nil, err
	}
	type span struct {
		name       string
		begin, end uint
	}
	spans := make([]span, 0, len(entries))
	b := &Bundle{Metadata: meta}
	for _, e := range entries {
		dt, ok := stDTypes[e.st.DType]
		if !ok {
			return nil, fmt.Errorf("%w: tensor %q: dtype %q not supported (want BF16, F16, F32 or I32)", ErrSafetensors, e.name, e.st.DType)
		}
		elems := uint64(1)
		for _, s := range e.st.Shape {
			if s < 0 {
				return nil, fmt.Errorf("%w: tensor %q: negative dimension in shape %v", ErrSafetensors, e.name, e.st.Shape)
			}
			if s != 0 && elems > math.MaxInt64/8/uint64(s) {
				return nil, fmt.Errorf("%w: tensor %q: shape %v is too large", ErrSafetensors, e.name, e.st.Shape)
			}
			elems *= uint64(s)
		}
		begin, end := e.st.Offsets[0], e.st.Offsets[1]
		if begin > end {
			return nil, fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] run backwards", ErrSafetensors, e.name, begin, end)
		}
		if end > uint(len(data)) {
			return nil, fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] past the end of the %d-byte data section (truncated file?)", ErrSafetensors, e.name, begin, end, len(data))
		}
		if want := elems * uint64(dt.Size()); uint64(end-begin) != want {
			return nil, fmt.Errorf("%w: tensor %q: %s%v needs %d bytes, data_offsets [%d, %d] hold %d", ErrSafetensors, e.name, e.st.DType, e.st.Shape, want, begin, end, end-begin)
		}
		spans = append(spans, span{e.name, begin, end})
		b.Add(&Data{Name: e.name, DType: dt, Shape: slices.Clone(e.st.Shape), Raw: data[begin:end:end]})
	}
	sort.SliceStable(spans, func(i, j int) bool {
		if spans[i].begin != spans[j].begin {
			return spans[i].begin < spans[j].begin
		}
		return spans[i].end < spans[j].end
	})
	var at uint
	for i, s := range spans {
		if s.begin < at {
			return nil, fmt.Errorf("%w: tensors %q and %q overlap (data_offsets [%d, %d] and [%d, %d])", ErrSafetensors, spans[i-1].name, s.name, spans[i-1].begin, spans[i-1].end, s.begin, s.end)
		}
		if s.begin > at {
			return nil, fmt.Errorf("%w: tensor %q starts at byte %d of the data, leaving bytes [%d, %d) unused (the format allows no holes)", ErrSafetensors, s.name, s.begin, at, s.begin)
		}
		at = s.end
	}
	if at != uint(len(data)) {
		return nil, fmt.Errorf("%w: %d bytes after the last tensor (the format allows no trailing data)", ErrSafetensors, uint(len(data))-at)
	}
	return b, nil
}

type headerEntry struct {
	name string
	st   stEntry
}

// parseHeader decodes the JSON header strictly: one object, unique keys,
// each value an entry with exactly dtype, shape and data_offsets (two
// offsets), and __metadata__ a string map. Entries keep the file's order.
func parseHeader(hdr []byte) ([]headerEntry, map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: header is not JSON: %v", ErrSafetensors, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, fmt.Errorf("%w: header is not a JSON object", ErrSafetensors)
	}
	var entries []headerEntry
	var meta map[string]string
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: header JSON: %v", ErrSafetensors, err)
		}
		name := tok.(string) // object keys are strings
		if seen[name] {
			return nil, nil, fmt.Errorf("%w: tensor %q appears twice in the header", ErrSafetensors, name)
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, fmt.Errorf("%w: header entry %q is not valid JSON: %v", ErrSafetensors, name, err)
		}
		if name == "__metadata__" {
			if err := json.Unmarshal(raw, &meta); err != nil {
				return nil, nil, fmt.Errorf("%w: __metadata__ must map strings to strings: %v", ErrSafetensors, err)
			}
			continue
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			return nil, nil, fmt.Errorf("%w: tensor %q: entry is not an object: %v", ErrSafetensors, name, err)
		}
		for _, f := range []string{"dtype", "shape", "data_offsets"} {
			if _, ok := fields[f]; !ok {
				return nil, nil, fmt.Errorf("%w: tensor %q: entry has no %q", ErrSafetensors, name, f)
			}
		}
		if len(fields) != 3 {
			return nil, nil, fmt.Errorf("%w: tensor %q: entry has fields other than dtype, shape and data_offsets", ErrSafetensors, name)
		}
		var e stEntry
		var offs []json.Number
		if err := json.Unmarshal(fields["dtype"], &e.DType); err != nil {
			return nil, nil, fmt.Errorf("%w: tensor %q: dtype: %v", ErrSafetensors, name, err)
		}
		if err := json.Unmarshal(fields["shape"], &e.Shape); err != nil {
			return nil, nil, fmt.Errorf("%w: tensor %q: shape must be a list of integers: %v", ErrSafetensors, name, err)
		}
		if err := json.Unmarshal(fields["data_offsets"], &offs); err != nil || len(offs) != 2 {
			return nil, nil, fmt.Errorf("%w: tensor %q: data_offsets must be two integers", ErrSafetensors, name)
		}
		for i, o := range offs {
			v, err := strconv.ParseUint(o.String(), 10, 63)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: tensor %q: data_offsets[%d] = %s is not a byte offset", ErrSafetensors, name, i, o)
			}
			e.Offsets[i] = uint(v)
		}
		entries = append(entries, headerEntry{name, e})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, nil, fmt.Errorf("%w: header JSON: %v", ErrSafetensors, err)
	}
	rest, _ := io.ReadAll(dec.Buffered())
	if len(bytes.TrimRight(rest, " ")) != 0 || dec.More() {
		return nil, nil, fmt.Errorf("%w: header has bytes after its JSON object (only space padding is allowed)", ErrSafetensors)
	}
	return entries, meta, nil
}

// WriteSafetensors writes b as a safetensors file: tensors in b's order,
// contiguous, the header padded with spaces to a multiple of 8 bytes so the
// data is aligned.
func WriteSafetensors(w io.Writer, b *Bundle) error {
	hdr := map[string]any{}
	if len(b.Metadata) > 0 {
		hdr["__metadata__"] = b.Metadata
	}
	var off uint
	for _, d := range b.list {
		if _, ok := stDTypes[stName(d.DType)]; !ok {
			return fmt.Errorf("%w: tensor %q: dtype %s cannot be written", ErrSafetensors, d.Name, d.DType)
		}
		if want := d.Elems() * d.DType.Size(); len(d.Raw) != want {
			return fmt.Errorf("%w: tensor %q: %s%v needs %d bytes, has %d", ErrSafetensors, d.Name, d.DType, d.Shape, want, len(d.Raw))
		}
		if d.Name == "__metadata__" {
			return fmt.Errorf("%w: a tensor may not be called __metadata__", ErrSafetensors)
		}
		shape := d.Shape
		if shape == nil {
			shape = []int{}
		}
		hdr[d.Name] = stEntry{DType: stName(d.DType), Shape: shape, Offsets: [2]uint{off, off + uint(len(d.Raw))}}
		off += uint(len(d.Raw))
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return fmt.Errorf("models: encoding safetensors header: %w", err)
	}
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(js)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(js); err != nil {
		return err
	}
	for _, d := range b.list {
		if _, err := w.Write(d.Raw); err != nil {
			return err
		}
	}
	return nil
}
