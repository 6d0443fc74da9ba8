package profiles

import (
	"errors"
	"fmt"
	"strings"
)

// Errors. Every error of this package wraps one of these.
var (
	// ErrInvalid: the profile is malformed or has a value out of range.
	ErrInvalid = errors.New("profiles: invalid profile")
	// ErrVersion: the profile's apiVersion is not APIVersion.
	ErrVersion = errors.New("profiles: unsupported profile apiVersion")
	// ErrNotFound: no embedded profile for the GPU, model, batch and phase.
	ErrNotFound = errors.New("profiles: no such profile")
	// ErrMismatch: the profile does not describe the launches it is used for.
	ErrMismatch = errors.New("profiles: profile does not match the model")
)

// Error is a problem at one place of a profile.
type Error struct {
	File   string // file name, when known
	Line   int    // 1-based line; 0 when the profile did not come from text
	Column int    // 1-based column of syntax errors; 0 otherwise
	// Path is the JSON path of the field, e.g. "kernels[7].durationUs"
	// ("" for the document as a whole).
	Path string
	// Kernel is the index of the kernel the field belongs to, -1 if none;
	// KernelName its name where known.
	Kernel     int
	KernelName string
	Msg        string
	Err        error // ErrInvalid or ErrVersion
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("profiles: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
		b.WriteString(": ")
	}
	if p := e.displayPath(); p != "" {
		b.WriteString(p)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// displayPath inserts the kernel's name after its index:
// kernels[7] ("layer2.0.conv1").durationUs.
func (e *Error) displayPath() string {
	if e.Kernel < 0 || e.KernelName == "" {
		return e.Path
	}
	prefix := fmt.Sprintf("kernels[%d]", e.Kernel)
	if !strings.HasPrefix(e.Path, prefix) {
		return e.Path
	}
	return fmt.Sprintf("%s (%q)%s", prefix, e.KernelName, e.Path[len(prefix):])
}

// MismatchError is Check's report of the first difference between a
// profile and the launches of the model it is used with.
type MismatchError struct {
	Model, GPU string // the profile's
	Batch      int
	Kernel     int    // index of the first kernel that differs; -1 for the profile as a whole
	Name       string // the profile kernel's name
	Field      string // "gpu", "kernels" (count), "kernel", "grid", "block", "shape"
	Want       string // what the model launches (or the device)
	Got        string // what the profile says
}

func (e *MismatchError) Error() string {
	where := e.Field
	if e.Kernel >= 0 {
		where = fmt.Sprintf("kernels[%d] (%q).%s", e.Kernel, e.Name, e.Field)
	}
	return fmt.Sprintf("profiles: profile %s bs%d on %s does not match: %s: the model has %s, the profile %s (re-profile the model on that GPU: atoll profile --model %s --batch %d; or use the profile made for it)",
		e.Model, e.Batch, e.GPU, where, e.Want, e.Got, e.Model, e.Batch)
}

func (e *MismatchError) Unwrap() error { return ErrMismatch }
