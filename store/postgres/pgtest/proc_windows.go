package pgtest

import (
	"errors"
	"syscall"
)

func serverProcAttr() *syscall.SysProcAttr { return nil }

// killPid cannot signal a process by id here: the caller signals the
// process it started instead.
func killPid(int, syscall.Signal) error { return errors.New("no signals by pid on windows") }
