// Package standby serves the daemon's HTTP API through worker processes so
// that a best-effort kernel's fault never costs an HP request.
//
// On a GPU a kernel that faults (an illegal address, a trap) leaves a
// sticky error in its CUDA context, and every context of the same process
// with it: HP requests in flight fail and no reopen inside the process
// recovers (docs/daemon.md has the measurements). Another process on the
// same GPU keeps running. So the supervisor, which never touches the GPU,
// runs two workers — each a whole `atoll serve` on a Unix socket in a
// private directory — and forwards every request (HTTP, and gRPC calls
// when the configuration serves gRPC) to the serving one while
// the other waits warm (models loaded and bound, nothing launched):
//
//   - an inference request the serving worker answers with a 5xx while it is
//     no longer live (its device failed), or that cannot reach it (it
//     exited), is sent again, same bytes, to the standby, which the failure
//     promoted; inference is idempotent, so the client sees one answer;
//   - the failed worker's jobs are read back from it: a job that asked to
//     resume (JobSpec.Resume) runs its remaining iterations on the new
//     serving worker under the same id; the others end failed with the
//     worker's error;
//   - the failed worker is killed and a new standby started, which loads
//     warm from the kernel cache the first one filled.
//
// The supervisor answers health itself (live while it has, or is starting,
// a worker; ready while the serving worker is ready), applies the
// configured restrictions (server.Guard; workers listen only on their
// sockets), terminates TLS, and adds its own series to /metrics
// (atoll_standby_*). The fault drill of the configuration (fault_drill)
// goes to the first worker only.
package standby
