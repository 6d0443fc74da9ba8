// Package bench runs co-location workloads and reports their interference:
// open-loop arrival processes for HP clients (Poisson, uniform, log-normal
// bursts, trace files), the metrics of the design brief §4 (HP latency from
// scheduled arrival, p99 overhead against HP alone on the same arrival
// sequence, BE and system normalized throughput, preemption latency), JSON
// reports that stand on their own, and the comparison table.
//
// This package must never make a scheduling decision: it builds workloads,
// hands them to sched.Run and measures what comes back. It touches a device
// only through gpu.Device, and only in the probe (probe.go), which times
// kernels alone and owns their buffers.
package bench
