package cli

import (
	"runtime/debug"
	"testing"
)

// gcPercent is the collector's percent, left as it was.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestExportGC: an export collects at exportGCPercent under
// exportMemoryLimit and restores both after, unless the user set GOGC or
// GOMEMLIMIT, which it leaves alone.
func TestExportGC(t *testing.T) {
	const userLimit = 300 << 20
	for _, tc := range []struct {
		name, gogc, gomemlimit string
		percent                int
		limit                  int64
	}{
		{"neither set", "", "", exportGCPercent, exportMemoryLimit},
		{"GOGC set", "150", "", 150, exportMemoryLimit},
		{"GOMEMLIMIT set", "", "300MiB", exportGCPercent, userLimit},
		{"both set", "150", "300MiB", 150, userLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", tc.gogc)
			t.Setenv("GOMEMLIMIT", tc.gomemlimit)
			before, beforeLimit := debug.SetGCPercent(150), debug.SetMemoryLimit(userLimit)
			defer func() {
				debug.SetGCPercent(before)
				debug.SetMemoryLimit(beforeLimit)
			}()
			restore := exportGC()
			if got := gcPercent(); got != tc.percent {
				t.Errorf("during the export: GOGC %d, want %d", got, tc.percent)
			}
			if got := debug.SetMemoryLimit(-1); got != tc.limit {
				t.Errorf("during the export: memory limit %d, want %d", got, tc.limit)
			}
			restore()
			if got := gcPercent(); got != 150 {
				t.Errorf("after the export: GOGC %d, want 150 as before", got)
			}
			if got := debug.SetMemoryLimit(-1); got != userLimit {
				t.Errorf("after the export: memory limit %d, want %d as before", got, int64(userLimit))
			}
		})
	}
}
