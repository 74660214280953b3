//go:build unix

package bench

import (
	"runtime"
	"syscall"
)

// peakRSS is the process's peak resident set in bytes, 0 where getrusage
// does not say.
func peakRSS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	if runtime.GOOS == "darwin" {
		return ru.Maxrss // bytes on macOS
	}
	return ru.Maxrss * 1024 // kilobytes on Linux and the BSDs
}
