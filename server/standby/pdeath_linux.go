package standby

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd when the supervisor dies, so a
// killed supervisor leaves no worker holding the GPU.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
