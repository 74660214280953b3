//go:build race

package limiter

// raceEnabled: the race detector slows the simulations tenfold, so the
// random-family bar runs fewer shapes.
const raceEnabled = true
