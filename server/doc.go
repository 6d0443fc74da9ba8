// Package server is atoll's inference daemon: the KServe / Open Inference
// Protocol v2 REST API, best-effort job management, Prometheus metrics,
// configuration, and graceful shutdown, over an Engine that owns the device
// and the scheduler.
//
// The HTTP layer never touches a device or makes a scheduling decision: it
// parses, validates, maps errors to status codes and observes metrics. The
// engine owns the device and the scheduler core in one goroutine.
package server
