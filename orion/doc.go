// Package orion is Orion's interference-aware admission rule (EuroSys'24)
// as a sched.Policy: HP kernels launch at once on the greatest-priority
// streams; BE clients are served round-robin on the least-priority streams,
// and a BE kernel launches only if no HP request is in flight, or its SM
// need is at most SMThreshold and its profile class differs from the class
// of the HP kernel running (unknown counts as compatible). The durations
// of BE kernels launched since the last full drain are summed; once the
// sum reaches DurThreshold no BE kernel launches until all BE work in
// flight has completed.
//
// Admit is the rule as a pure function, shared with the atoll policy. This
// package must never touch a gpu.Device or preempt anything.
package orion
