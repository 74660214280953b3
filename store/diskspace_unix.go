//go:build linux || darwin

package store

import "syscall"

// freeSpace is the bytes an unprivileged writer may still use on the
// disk holding dir, or -1 when it cannot be read.
func freeSpace(dir string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
