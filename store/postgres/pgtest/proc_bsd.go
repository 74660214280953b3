//go:build unix && !linux

package pgtest

import "syscall"

// serverProcAttr puts the server in its own process group (no parent
// death signal here: Stop and the test's cleanup stop it).
func serverProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
