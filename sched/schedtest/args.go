package schedtest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Args reads a Factory's arguments and remembers which were used, so a
// factory can refuse unknown ones (Unused).
type Args struct {
	m    map[string]string
	used map[string]bool
}

// NewArgs wraps a Factory's argument map.
func NewArgs(m map[string]string) *Args { return &Args{m: m, used: map[string]bool{}} }

// Duration reads key as a Go duration ("100us"); absent: zero.
func (a *Args) Duration(key string) (time.Duration, error) {
	a.used[key] = true
	v, ok := a.m[key]
	if !ok {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	return d, nil
}

// Int reads key as an integer; absent: zero.
func (a *Args) Int(key string) (int, error) {
	a.used[key] = true
	v, ok := a.m[key]
	if !ok {
		return 0, nil
	}
	return strconv.Atoi(v)
}

// Float reads key as a float; absent: zero.
func (a *Args) Float(key string) (float64, error) {
	a.used[key] = true
	v, ok := a.m[key]
	if !ok {
		return 0, nil
	}
	return strconv.ParseFloat(v, 64)
}

// Bool reads key as a boolean; absent: false.
func (a *Args) Bool(key string) (bool, error) {
	a.used[key] = true
	v, ok := a.m[key]
	if !ok {
		return false, nil
	}
	return strconv.ParseBool(v)
}

// Unused returns an error naming arguments no reader asked for.
func (a *Args) Unused() error {
	var bad []string
	for k := range a.m {
		if !a.used[k] {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fmt.Errorf("unknown policy arguments: %s", strings.Join(bad, ", "))
}
