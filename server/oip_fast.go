package server

import (
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// fastDecode is the infer body's fast path: one pass over the bytes that
// decodes the request and flattens every input's data at once, where
// encoding/json scans each tensor's data twice before the flattener reads
// it a third time. It handles only the plain form of a request (exact
// lowercase keys, each once; no nulls; no escapes in strings; data as
// arrays of numbers or of booleans) and reports ok=false for anything else,
// and parseInfer then takes the encoding/json path, which decides and words
// every error. So fastDecode never has to be right about a bad request,
// only never accept one the slow path refuses, nor decode one differently:
// FuzzFastDecode checks exactly that.
func fastDecode(body []byte) (rj *inferRequestJSON, vals []fastData, ok bool) {
	p := fastParser{b: body}
	rj = &inferRequestJSON{}
	if !p.object(func(key string) bool {
		switch key {
		case "id":
			s, ok := p.str()
			rj.ID = s
			return ok
		case "parameters":
			m, ok := p.params()
			rj.Parameters = m
			return ok
		case "inputs":
			return p.array(func() bool {
				var in inputJSON
				var d fastData
				ok := p.object(func(key string) bool {
					switch key {
					case "name":
						s, ok := p.str()
						in.Name = s
						return ok
					case "shape":
						in.Shape = []int64{}
						return p.array(func() bool {
							v, ok := p.int()
							in.Shape = append(in.Shape, v)
							return ok
						})
					case "datatype":
						s, ok := p.str()
						in.Datatype = s
						return ok
					case "parameters":
						m, ok := p.params()
						in.Parameters = m
						return ok
					case "data":
						start := p.i
						d.vals = make([]float64, 0, 64)
						if !p.data(&d, 0) {
							return false
						}
						in.Data = json.RawMessage(p.b[start:p.i])
						return true
					}
					return false
				})
				rj.Inputs = append(rj.Inputs, in)
				vals = append(vals, d)
				return ok
			})
		case "outputs":
			return p.array(func() bool {
				var o outputRequestJSON
				ok := p.object(func(key string) bool {
					switch key {
					case "name":
						s, ok := p.str()
						o.Name = s
						return ok
					case "parameters":
						m, ok := p.params()
						o.Parameters = m
						return ok
					}
					return false
				})
				rj.Outputs = append(rj.Outputs, o)
				return ok
			})
		}
		return false
	}) {
		return nil, nil, false
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, nil, false
	}
	return rj, vals, true
}

// fastData is one input's values as the fast path read them, with what
// kinds of value it saw (the datatype is checked afterwards).
type fastData struct {
	vals          []float64
	bools, numbrs bool
}

type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next skips whitespace and returns the next byte (0 at the end).
func (p *fastParser) next() byte {
	p.ws()
	if p.i >= len(p.b) {
		return 0
	}
	return p.b[p.i]
}

// object parses {"key": value, ...}, calling field for each key with the
// parser at the value; keys must be distinct.
func (p *fastParser) object(field func(key string) bool) bool {
	if p.next() != '{' {
		return false
	}
	p.i++
	if p.next() == '}' {
		p.i++
		return true
	}
	var seen [8]string
	n := 0
	for {
		key, ok := p.str()
		if !ok {
			return false
		}
		for _, k := range seen[:n] {
			if k == key {
				return false
			}
		}
		if n == len(seen) {
			return false
		}
		seen[n] = key
		n++
		if p.next() != ':' {
			return false
		}
		p.i++
		if !field(key) {
			return false
		}
		switch p.next() {
		case ',':
			p.i++
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

// array parses [elem, ...], calling elem with the parser at each element.
func (p *fastParser) array(elem func() bool) bool {
	if p.next() != '[' {
		return false
	}
	p.i++
	if p.next() == ']' {
		p.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch p.next() {
		case ',':
			p.i++
		case ']':
			p.i++
			return true
		default:
			return false
		}
	}
}

// str parses a string without escapes or control characters, valid UTF-8.
func (p *fastParser) str() (string, bool) {
	if p.next() != '"' {
		return "", false
	}
	start := p.i + 1
	ascii := true
	for j := start; j < len(p.b); j++ {
		c := p.b[j]
		switch {
		case c == '"':
			p.i = j + 1
			s := p.b[start:j]
			if !ascii && !utf8.Valid(s) {
				return "", false
			}
			return string(s), true
		case c == '\\' || c < 0x20:
			return "", false
		case c >= 0x80:
			ascii = false
		}
	}
	return "", false
}

// int parses an integer as encoding/json would into an int64.
func (p *fastParser) int() (int64, bool) {
	p.ws()
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	n := p.i - digits
	if n == 0 || n > 18 || (n > 1 && p.b[digits] == '0') {
		return 0, false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	v, err := strconv.ParseInt(string(p.b[start:p.i]), 10, 64)
	return v, err == nil
}

// number scans a JSON number strictly and parses it.
func (p *fastParser) number() (float64, bool) {
	start := p.i
	b := p.b
	i := p.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return 0, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return 0, false
		}
	}
	v, err := strconv.ParseFloat(string(b[start:i]), 64)
	if err != nil {
		return 0, false
	}
	p.i = i
	return v, true
}

// data flattens a nested array of numbers or booleans into d.
func (p *fastParser) data(d *fastData, depth int) bool {
	if depth >= maxRank || p.next() != '[' {
		return false
	}
	p.i++
	if p.next() == ']' {
		p.i++
		return true
	}
	for {
		switch c := p.next(); {
		case c == '[':
			if !p.data(d, depth+1) {
				return false
			}
		case c == 't':
			if len(p.b)-p.i < 4 || string(p.b[p.i:p.i+4]) != "true" {
				return false
			}
			p.i += 4
			d.vals = append(d.vals, 1)
			d.bools = true
		case c == 'f':
			if len(p.b)-p.i < 5 || string(p.b[p.i:p.i+5]) != "false" {
				return false
			}
			p.i += 5
			d.vals = append(d.vals, 0)
			d.bools = true
		default:
			v, ok := p.number()
			if !ok {
				return false
			}
			d.vals = append(d.vals, v)
			d.numbrs = true
		}
		switch p.next() {
		case ',':
			p.i++
		case ']':
			p.i++
			return true
		default:
			return false
		}
	}
}

// params reads a parameters object: each value's bytes, checked by
// json.Valid (parameters are small).
func (p *fastParser) params() (map[string]json.RawMessage, bool) {
	m := map[string]json.RawMessage{}
	ok := p.object(func(key string) bool {
		p.ws()
		start := p.i
		if !p.skip(0) {
			return false
		}
		v := p.b[start:p.i]
		if !json.Valid(v) {
			return false
		}
		m[key] = json.RawMessage(v)
		return true
	})
	return m, ok
}

// skip moves past one value (json.Valid judges it afterwards).
func (p *fastParser) skip(depth int) bool {
	if depth > 64 {
		return false
	}
	switch c := p.next(); c {
	case '"':
		_, ok := p.str()
		return ok
	case '{':
		return p.object(func(string) bool { return p.skip(depth + 1) })
	case '[':
		return p.array(func() bool { return p.skip(depth + 1) })
	case 't', 'f':
		for p.i < len(p.b) && p.b[p.i] >= 'a' && p.b[p.i] <= 'z' {
			p.i++
		}
		return true
	case 'n':
		return false
	default:
		_, ok := p.number()
		return ok
	}
}

// tensorFast is tensor for a fast-decoded input: the same header checks,
// then the values checked against the datatype. Any problem sends the
// caller to the slow path, which words the error.
func (in *inputJSON) tensorFast(d fastData) (Tensor, bool) {
	rng, ok := datatypes[in.Datatype]
	if in.Name == "" || !ok || in.Shape == nil || len(in.Shape) > maxRank || len(in.Data) == 0 {
		return Tensor{}, false
	}
	n := int64(1)
	for _, s := range in.Shape {
		if s < 0 || (s != 0 && n > (1<<31-1)/s) {
			return Tensor{}, false
		}
		n *= s
	}
	if int64(len(d.vals)) != n {
		return Tensor{}, false
	}
	if in.Datatype == "BOOL" {
		if d.numbrs {
			return Tensor{}, false
		}
	} else {
		if d.bools {
			return Tensor{}, false
		}
		for _, v := range d.vals {
			if v < rng.min || v > rng.max || (rng.integral && v != math.Trunc(v)) {
				return Tensor{}, false
			}
		}
	}
	return Tensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape, Data: d.vals}, true
}
