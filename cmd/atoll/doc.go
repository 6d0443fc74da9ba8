// Command atoll is the command-line interface of atoll, a kernel-level
// preemptive GPU scheduler for inference: demo, bench, compare, probe,
// selftest, devices, models, policies (and the daemon's commands).
//
// It is wiring only: flags, backends and output. It must never make a
// scheduling decision, time anything itself or hold device state beyond
// one command; every decision lives in the library packages.
package main
