//go:build !linux && !darwin && !windows

package store

// freeSpace is not read here: a message then leaves it out.
func freeSpace(dir string) int64 { return -1 }
