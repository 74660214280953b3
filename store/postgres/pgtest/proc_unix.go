//go:build unix

package pgtest

import "syscall"

// killPid sends sig to the process pid.
func killPid(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }
