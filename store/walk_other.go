//go:build !linux

package store

// releasePages does nothing here: the kernel reclaims the mapping's
// pages under memory pressure on its own.
func releasePages(addr, n uintptr) {}

// residentFileBytes is -1 here: not known, so a walk releases on its
// count alone.
func residentFileBytes() int64 { return -1 }
