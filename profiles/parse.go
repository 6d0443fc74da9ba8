package profiles

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// MaxSize is the largest profile Parse reads, in bytes.
const MaxSize = 64 << 20

// Parse reads one profile strictly: the JSON must be well formed, every
// field known, present (unless optional), non-null, of the right type and
// given once, nothing may follow the profile, and every value must pass
// Validate. Errors are *Error values wrapping ErrInvalid (or ErrVersion) and
// name the line, the field and — inside a kernel — the kernel's index and
// name, e.g.
//
//	profiles: line 42: kernels[7] ("layer2.0.conv1").durationUs: must be > 0, got -3
func Parse(r io.Reader) (*Profile, error) { return parse(r, "") }

// Load parses the profile file at path, gzipped when its name ends in
// .gz (as results/ keeps them); its errors name the file.
func Load(path string) (*Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		z, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("profiles: %s: %w", path, err)
		}
		r = z
	}
	return parse(r, path)
}

func parse(r io.Reader, file string) (*Profile, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("profiles: reading %s: %w", orStdin(file), err)
	}
	if len(data) > MaxSize {
		return nil, &Error{File: file, Kernel: -1, Err: ErrInvalid, Msg: fmt.Sprintf("larger than %d bytes; not a profile", MaxSize)}
	}
	s := &scanner{data: data, file: file, pos: map[string]int64{}}
	if e := s.document(); e != nil {
		return nil, e
	}
	var p Profile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		// The scan above accepts only what decodes; reaching this is a bug.
		return nil, &Error{File: file, Kernel: -1, Err: ErrInvalid, Msg: "cannot decode: " + err.Error()}
	}
	normalize(&p)
	if e := p.validate(); e != nil {
		e.File = file
		e.Line = s.lineOf(e.Path)
		return nil, e
	}
	return &p, nil
}

func orStdin(file string) string {
	if file == "" {
		return "profile"
	}
	return file
}

// normalize makes empty optional collections nil, so that a parsed profile
// equals the parse of its Write (which omits them).
func normalize(p *Profile) {
	if len(p.Notes) == 0 {
		p.Notes = nil
	}
	for i := range p.Kernels {
		k := &p.Kernels[i]
		if len(k.Scaling) == 0 {
			k.Scaling = nil
		}
		if len(k.Tags) == 0 {
			k.Tags = nil
		}
	}
}

// scanner walks the JSON tokens against the Profile type, refusing what
// encoding/json would accept silently (unknown, duplicate, missing or null
// fields, case-insensitive key matches, short or long fixed arrays, trailing
// data) and recording where each field starts so that semantic errors can
// name a line.
type scanner struct {
	data []byte
	file string
	dec  *json.Decoder
	pos  map[string]int64 // JSON path -> offset just after its key (or element's first token)
}

func (s *scanner) document() *Error {
	s.dec = json.NewDecoder(bytes.NewReader(s.data))
	s.dec.UseNumber()
	if e := s.value(reflect.TypeFor[Profile](), ""); e != nil {
		return e
	}
	if _, err := s.dec.Token(); err != io.EOF {
		return s.errAt(s.dec.InputOffset(), "", "unexpected data after the profile")
	}
	return nil
}

// token reads the next token, turning decoder errors into *Error.
func (s *scanner) token(path string) (json.Token, *Error) {
	tok, err := s.dec.Token()
	if err == nil {
		return tok, nil
	}
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return nil, s.errAt(syn.Offset, path, "syntax error: %s", strings.TrimPrefix(syn.Error(), "json: "))
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		return nil, s.errAt(int64(len(s.data)), path, "unexpected end of input")
	}
	return nil, s.errAt(s.dec.InputOffset(), path, "%v", err)
}

func (s *scanner) value(t reflect.Type, path string) *Error {
	tok, e := s.token(path)
	if e != nil {
		return e
	}
	if _, ok := s.pos[path]; !ok { // array elements and the document; keys record their own
		s.pos[path] = s.dec.InputOffset()
	}
	if tok == nil {
		return s.errHere(path, "null is not allowed; give a value or leave an optional field out")
	}
	switch t.Kind() {
	case reflect.Struct:
		if tok != json.Delim('{') {
			return s.errHere(path, "want an object, got %s", describe(tok))
		}
		return s.object(t, path)
	case reflect.Map:
		if tok != json.Delim('{') {
			return s.errHere(path, "want an object, got %s", describe(tok))
		}
		return s.mapObject(t, path)
	case reflect.Slice, reflect.Array:
		if tok != json.Delim('[') {
			return s.errHere(path, "want an array, got %s", describe(tok))
		}
		n := 0
		for s.dec.More() {
			if t.Kind() == reflect.Array && n == t.Len() {
				return s.errHere(path, "want exactly %d elements, got more", t.Len())
			}
			if e := s.value(t.Elem(), fmt.Sprintf("%s[%d]", path, n)); e != nil {
				return e
			}
			n++
		}
		if _, e := s.token(path); e != nil { // ']'
			return e
		}
		if t.Kind() == reflect.Array && n != t.Len() {
			return s.errAt(s.pos[path], path, "want exactly %d elements, got %d", t.Len(), n)
		}
		return nil
	case reflect.String:
		if _, ok := tok.(string); !ok {
			return s.errHere(path, "want a string, got %s", describe(tok))
		}
		return nil
	case reflect.Int:
		num, ok := tok.(json.Number)
		if !ok {
			return s.errHere(path, "want an integer, got %s", describe(tok))
		}
		if _, err := strconv.ParseInt(string(num), 10, 64); err != nil {
			return s.errHere(path, "want an integer, got %s", num)
		}
		return nil
	case reflect.Float64:
		num, ok := tok.(json.Number)
		if !ok {
			return s.errHere(path, "want a number, got %s", describe(tok))
		}
		if _, err := strconv.ParseFloat(string(num), 64); err != nil {
			return s.errHere(path, "number %s is out of range", num)
		}
		return nil
	}
	return s.errHere(path, "internal: no rule for Go type %s", t)
}

type fieldInfo struct {
	typ      reflect.Type
	optional bool
}

type structFields struct {
	known map[string]fieldInfo
	order []string
}

var fieldCache sync.Map // reflect.Type -> structFields

// fields maps a struct's JSON keys to their types, in declaration order.
func fields(t reflect.Type) (map[string]fieldInfo, []string) {
	if c, ok := fieldCache.Load(t); ok {
		sf := c.(structFields)
		return sf.known, sf.order
	}
	m := map[string]fieldInfo{}
	var order []string
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		m[name] = fieldInfo{typ: f.Type, optional: strings.Contains(opts, "omitempty")}
		order = append(order, name)
	}
	fieldCache.Store(t, structFields{m, order})
	return m, order
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (s *scanner) object(t reflect.Type, path string) *Error {
	known, order := fields(t)
	seen := map[string]bool{}
	for s.dec.More() {
		tok, e := s.token(path)
		if e != nil {
			return e
		}
		key, ok := tok.(string)
		if !ok { // the decoder reports non-string keys as syntax errors; be safe anyway
			return s.errHere(path, "want a field name, got %s", describe(tok))
		}
		kp := join(path, key)
		s.pos[kp] = s.dec.InputOffset()
		f, ok := known[key]
		if !ok {
			hint := ""
			for _, k := range order {
				if strings.EqualFold(k, key) {
					hint = fmt.Sprintf(" (did you mean %q? keys are case-sensitive)", k)
				}
			}
			return s.errHere(kp, "unknown field%s; %s has: %s", hint, orTop(path), strings.Join(order, ", "))
		}
		if seen[key] {
			return s.errHere(kp, "given twice")
		}
		seen[key] = true
		if e := s.value(f.typ, kp); e != nil {
			return e
		}
	}
	if _, e := s.token(path); e != nil { // '}'
		return e
	}
	for _, k := range order {
		if !seen[k] && !known[k].optional {
			return s.errAt(s.pos[path], join(path, k), "missing (required)")
		}
	}
	return nil
}

func orTop(path string) string {
	if path == "" {
		return "a profile"
	}
	return path
}

func (s *scanner) mapObject(t reflect.Type, path string) *Error {
	seen := map[string]bool{}
	for s.dec.More() {
		tok, e := s.token(path)
		if e != nil {
			return e
		}
		key, ok := tok.(string)
		if !ok {
			return s.errHere(path, "want a field name, got %s", describe(tok))
		}
		kp := join(path, key)
		s.pos[kp] = s.dec.InputOffset()
		if seen[key] {
			return s.errHere(kp, "given twice")
		}
		seen[key] = true
		if e := s.value(t.Elem(), kp); e != nil {
			return e
		}
	}
	_, e := s.token(path)
	return e
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return fmt.Sprintf("string %q", v)
	case json.Number:
		return "number " + string(v)
	case bool:
		return fmt.Sprintf("%v", v)
	}
	return fmt.Sprintf("%v", tok)
}

func (s *scanner) errHere(path, format string, args ...any) *Error {
	return s.errAt(s.dec.InputOffset(), path, format, args...)
}

func (s *scanner) errAt(off int64, path, format string, args ...any) *Error {
	line, col := lineCol(s.data, off)
	e := &Error{File: s.file, Line: line, Column: col, Path: path, Kernel: -1, Msg: fmt.Sprintf(format, args...), Err: ErrInvalid}
	if i, ok := kernelIndex(path); ok {
		e.Kernel = i
		e.KernelName = s.kernelName(i)
	}
	return e
}

// kernelName is the name of kernel i if the scan has passed it.
func (s *scanner) kernelName(i int) string {
	off, ok := s.pos[fmt.Sprintf("kernels[%d].name", i)]
	if !ok {
		return ""
	}
	// off is just after the key; the value follows a colon.
	rest := bytes.TrimLeft(s.data[off:], " \t\r\n")
	rest, ok = bytes.CutPrefix(rest, []byte(":"))
	if !ok {
		return ""
	}
	var name string
	if json.NewDecoder(bytes.NewReader(rest)).Decode(&name) != nil {
		return ""
	}
	return name
}

func kernelIndex(path string) (int, bool) {
	rest, ok := strings.CutPrefix(path, "kernels[")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, "]")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(num)
	return i, err == nil
}

// lineOf is the line of the field at path, or of its nearest recorded
// parent; 0 if none.
func (s *scanner) lineOf(path string) int {
	for {
		if off, ok := s.pos[path]; ok {
			line, _ := lineCol(s.data, off)
			return line
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return 0
		}
		path = path[:i]
	}
}

// lineCol converts a byte offset to a 1-based line and column.
func lineCol(data []byte, off int64) (line, col int) {
	off = max(0, min(off, int64(len(data))))
	before := data[:off]
	line = bytes.Count(before, []byte{'\n'}) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

// Write writes the profile as indented JSON in a stable layout: fields in
// declaration order, notes sorted by key, one line per field of a kernel,
// short arrays and scaling points on one line. Parse(Write(p)) equals p.
// It refuses (ErrInvalid) a profile that Parse would refuse.
func Write(w io.Writer, p *Profile) error {
	if err := p.Validate(); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p); err != nil {
		return fmt.Errorf("profiles: encoding: %w", err)
	}
	_, err := w.Write(collapseLeaves(buf.Bytes())) // Encode ends it with a newline
	return err
}

// collapseLeaves puts every array without nested containers, and every
// object without nested containers that is an array element, on one line.
func collapseLeaves(in []byte) []byte {
	type open struct {
		at          int // offset of the bracket in out
		arr, parArr bool
		nested      bool
	}
	var (
		out      = make([]byte, 0, len(in))
		stack    []open
		inString bool
		escaped  bool
	)
	for _, c := range in {
		out = append(out, c)
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if n := len(stack); n > 0 {
				stack[n-1].nested = true
			}
			parArr := len(stack) > 0 && stack[len(stack)-1].arr
			stack = append(stack, open{at: len(out) - 1, arr: c == '[', parArr: parArr})
		case '}', ']':
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if !top.nested && (top.arr || top.parArr) {
				out = append(out[:top.at], compactLeaf(out[top.at:])...)
			}
		}
	}
	return out
}

// compactLeaf removes the newlines and indentation of a container without
// nested containers, leaving one space after commas and colons.
func compactLeaf(seg []byte) []byte {
	res := make([]byte, 0, len(seg))
	inString, escaped := false, false
	for _, c := range seg {
		if inString {
			res = append(res, c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\n', '\t', '\r':
			continue
		case '"':
			inString = true
		}
		res = append(res, c)
		if c == ',' || c == ':' {
			res = append(res, ' ')
		}
	}
	return res
}
