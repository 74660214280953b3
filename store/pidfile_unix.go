//go:build unix

package store

import "syscall"

// pidOpenFlags keep writePid off a symlink or a FIFO planted at the pid
// file's path.
const pidOpenFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK
