//go:build !linux

package standby

import "os/exec"

// dieWithParent: only Linux has a parent-death signal; elsewhere a killed
// supervisor leaves its workers to their own shutdown.
func dieWithParent(*exec.Cmd) {}
