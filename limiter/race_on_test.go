//go:build race

package limiter

// raceEnabled: the race detector slows the simulations several times
// over, so the random-family bar runs fewer shapes.
const raceEnabled = true
