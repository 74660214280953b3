//go:build !linux

package footprint

// ReleaseExecutable does nothing outside Linux, where the executable's
// mappings are not read from /proc; it returns 0.
func ReleaseExecutable() uintptr { return 0 }
