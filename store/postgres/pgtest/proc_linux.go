package pgtest

import "syscall"

// serverProcAttr puts the server in its own process group, so a test
// binary killed by a signal does not leave it holding the terminal's
// group, and has it told (SIGQUIT) when the test binary dies.
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGQUIT}
}
