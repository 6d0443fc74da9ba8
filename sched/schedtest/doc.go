// Package schedtest runs scheduler scenarios written as data
// (cockroachdb/datadriven scripts) against a sched.Core with a virtual
// clock, and drives a Core with a small virtual device (Exec) for property
// tests. Policy packages use it for their testdata/*.txt scripts.
//
// It must never touch a gpu.Device or real time: everything is scripted.
package schedtest
