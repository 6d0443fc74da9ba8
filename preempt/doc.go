// Package preempt holds the preemption mechanisms as policy building blocks
// and REEF's policy:
//
//   - reset preemption (REEF): BE kernels run in gpu.Reset form through a
//     small in-flight window; on HP arrival the BE flag is raised, BE
//     kernels not yet launched stay queued on the host (dropped from the
//     device's view), in-flight ones drain (their blocks exit at start),
//     and once HP is idle and the drain is over the flag is lowered and the
//     cut kernel re-runs from its start;
//   - resumable preemption (Tally's persistent thread blocks): a
//     gpu.Resumable launch exits between logical blocks when its flag is
//     raised, its progress kept in the client's counter; the next launch
//     continues it (the sched core does the bookkeeping).
//
// The REEF policy (New) adds dynamic kernel padding (package padding).
// This package must never touch a gpu.Device: it decides through
// sched.State.
package preempt
