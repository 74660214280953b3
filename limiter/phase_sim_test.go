package limiter

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A fixed window's boundaries fall where they fall: a run's first call
// may come at any point of a window, and a real server's windows are not
// aligned with the client's start. The fixed windows whose 429s leave the
// wait unknown (rounded delays, none), with and without a budget named,
// hold the bar's 429 share and calls per item at every phase, and their
// goodput does not fall below the floor: the reading of slow start's
// burst at the first reopening (reopenedAfterSlowStart) overshoots when
// the first call came late in a window, and the next 429 corrects it.
func TestLaw_fixedWindowPhases(t *testing.T) {
	shapes := map[string]float64{ // goodput floor, at every phase
		"fixed window, coarse":       0.87,
		"fixed window, no RetryInfo": 0.85,
		"fixed-noretry":              0.91,
	}
	phases := []float64{0, 0.2, 0.5, 0.7, 0.9}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-28s %5s %8s %8s %10s\n", "fixed window (median of 5)", "phase", "goodput", "429s", "calls/item")
	entry := 0
	for _, sh := range append(matrixShapes(), quotaShapes()...) {
		floor, ok := shapes[sh.name]
		if !ok {
			continue
		}
		for _, unnamed := range []bool{false, true} {
			for _, phase := range phases {
				sh := sh
				quota := sh.quota
				sh.quota = func() quotaModel {
					f := quota().(*fixedWindow)
					f.phase = time.Duration(phase * float64(f.window))
					return f
				}
				if unnamed {
					sh.namedRPM, sh.namedTPM = 0, 0
				}
				name := fmt.Sprintf("%s/phase %.1f/unnamed %v", sh.name, phase, unnamed)
				entry++
				i := entry
				t.Run(name, func(t *testing.T) {
					raceSkip(t, i)
					goodput, share, perItem := medianRun(sh, Config{})
					fmt.Fprintf(&table, "%-28s %5.1f %8.3f %7.2f%% %10.3f %s\n", sh.name, phase, goodput, 100*share, perItem, map[bool]string{true: "unnamed"}[unnamed])
					if share > bar429 || perItem > barCallsPerItem {
						t.Errorf("%.2f%% of calls refused, %.3f calls per item; want at most %.0f%% and %.2f", 100*share, perItem, 100*bar429, barCallsPerItem)
					}
					if goodput < floor {
						t.Errorf("goodput %.3f of the perfect client's; want at least %.2f", goodput, floor)
					}
				})
			}
		}
	}
	t.Log(table.String())
}
