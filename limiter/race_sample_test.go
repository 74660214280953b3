package limiter

import "testing"

// raceKeep: under the race detector the simulation tables run one entry
// in raceKeep. The detector slows the simulations several times over
// (the package: 136 s without it, 487 s with it; the 4,992-a-minute
// mechanism: 4.9 s and 65 s): the package's -race run took eight
// minutes on a quiet machine and 27 beside a CPU hog, three short of the
// suite's timeout. A simulation is one goroutine
// in virtual time, so the detector finds nothing in the entries left out
// that it does not in those kept; .ci/run also runs the package without
// -race, where every entry runs.
const raceKeep = 3

// raceSkip skips entry i of a simulation table under the race detector
// unless it is one raceKeep keeps.
func raceSkip(t *testing.T, i int) {
	t.Helper()
	if raceEnabled && i%raceKeep != 0 {
		t.Skipf("under -race one entry in %d runs (go test ./limiter runs them all)", raceKeep)
	}
}
