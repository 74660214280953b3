//go:build !linux

package store

// residentShared is -1 here: the mapping's pages are left to the kernel
// (releasePages does nothing either).
func residentShared() int64 { return -1 }
