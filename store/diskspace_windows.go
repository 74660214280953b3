//go:build windows

package store

import "golang.org/x/sys/windows"

// freeSpace is the bytes the calling user may still use on the disk
// holding dir (quotas included), or -1 when it cannot be read.
func freeSpace(dir string) int64 {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return -1
	}
	var avail, total, free uint64
	if err := windows.GetDiskFreeSpaceEx(p, &avail, &total, &free); err != nil {
		return -1
	}
	return int64(avail)
}
