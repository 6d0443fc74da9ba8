// Package sched is atoll's scheduler: a pure state machine (Core) that
// policies plug into, and one loop that feeds it from a gpu.Device, over a
// timeline (Run) or over submissions (Online).
//
// # Core
//
// Core works like etcd raft's RawNode: Step feeds one Event (an HP request
// arrived, a BE client is ready — optionally for a budget of N iterations —
// or paused, a launch completed — finished, preempted with progress saved,
// or cut — the device saw a flag, time passed, the run stops); the core updates its books and runs the Policy, whose decisions
// queue up; Decisions hands them out (launch L on a stream in a form,
// raise or lower a BE client's flag, reset a BE client's progress counter,
// and records: request done, iteration done, preemption done). NextWake says
// when the policy wants an EvTick. The core has no goroutines, clocks or
// I/O, so every policy is testable to the nanosecond with scripts
// (package sched/schedtest, testdata/*.txt in each policy package).
//
// Clients are HP (open loop: each request runs the client's profile kernel
// sequence once; requests of one client run in order) or BE (closed loop:
// iterations of its kernel sequence back to back). State keeps, per BE
// client, the head kernel (first unfinished), the next kernel to launch,
// the instance of the head's body (for resumable progress and pads) and a
// generation number (a cut voids every later launch of the client, which
// then re-runs from the cut kernel). Its decision methods refuse what the
// forms make illegal: a Reset or Resumable launch under a raised flag, two
// bodies sharing one progress counter, a kernel with saved progress in a
// form that would restart it.
//
// # The loop
//
// One loop (loop.go) drives a Core on a gpu.Device, for Run and for
// Online alike. Each round polls the device for completions, feeds the
// core the completions and the due inputs in time order, hands each HP
// client with room in the core its next waiting request and each idle BE
// client its next run, ticks the policy when its wake is due, and then
// waits for the device until the next input, wake or quantum. The driver
// (driver.go) is its device side: one stream per client with the
// policy's StreamPlan (priorities clamped to the device's range; a
// separate gpu.Context or SM partition per class when the plan asks), a
// flag HostWord and a progress counter per BE client, a done HostWord per
// resumable or padded launch; it binds each launch decision to a
// gpu.Launch through a Binder (ProfileBinder for gpu/sim), records an
// event after it (or submits a whole HP request as one graph: graphs.go)
// and turns completed events into EvComplete. A Reset launch counts as
// cut when its flag was raised before it completed; a Resumable or
// padded launch as finished when its done word is 1.
//
// Run gives the loop a timeline known in advance: every HP arrival
// enters the core at its time, each BE client starts one run without an
// iteration budget, the stop comes at Options.Duration, and Run returns
// the Trace once the stop has drained. Online is the long-lived form for
// the daemon: requests are submitted while it runs (from any goroutine,
// through bounded per-client queues), each HP client has one request in
// the core at a time (a model instance's buffers are in use until it
// ends), BE runs of N iterations start and stop on demand, and hooks run
// in the owner goroutine around each request (upload inputs, read
// outputs). On the simulator it can pace virtual time to the wall clock.
//
// One goroutine owns a Core and the Device under Run or Online.Run. This
// package must never start goroutines or touch hardware except through the
// gpu.Device it is given, and reads the wall clock only to pace the
// simulator in Online (OnlineConfig.Pace).
package sched
