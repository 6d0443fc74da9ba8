// Package profiles is atoll's versioned profile format: per model, batch
// size, phase and GPU, one record per kernel launch (launch shape, solo
// duration, FLOPs, bytes, achieved compute and memory throughput, Orion's
// class and SMs needed, and duration at reduced SM shares for padding).
//
// Parse reads a profile strictly (unknown or duplicate fields, missing
// fields, nulls, wrong types, trailing data and out-of-range values are
// refused with the file line, the field and the kernel they concern); Write
// writes one stably, so that Parse(Write(p)) equals p. Profiles committed
// under profiles/<gpu>/<model>-bs<N>.json are embedded in the binary; List
// and Lookup find them. Check refuses a profile that does not describe the
// launches it is about to be used for, naming the first mismatch — a
// mismatched profile must never hang or silently mislead the scheduler.
//
// The format is documented in docs/profiles.md.
//
// This package must never touch a GPU, time anything or depend on the
// model zoo or the scheduler: it is a file format, its validation and the
// committed data.
package profiles
