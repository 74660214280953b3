//go:build !unix

package bench

// peakRSS is 0 where getrusage does not exist (Windows): not measured.
func peakRSS() int64 { return 0 }
