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

// TestExportGC: an export collects at exportGCPercent and restores the
// percent after, unless the user set GOGC, which it leaves alone.
func TestExportGC(t *testing.T) {
	for _, tc := range []struct {
		name, gogc string
		during     int
	}{
		{"GOGC unset", "", exportGCPercent},
		{"GOGC set", "150", 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", tc.gogc)
			before := debug.SetGCPercent(150)
			defer debug.SetGCPercent(before)
			restore := exportGC()
			if got := gcPercent(); got != tc.during {
				t.Errorf("during the export: GOGC %d, want %d", got, tc.during)
			}
			restore()
			if got := gcPercent(); got != 150 {
				t.Errorf("after the export: GOGC %d, want 150 as before", got)
			}
		})
	}
}
