//go:build !linux

package store

// releasePages does nothing here: the kernel reclaims the mapping's
// pages under memory pressure on its own.
func releasePages(addr, n uintptr) {}
