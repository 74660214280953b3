package limiter

import (
	"fmt"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/quotasim"
)

// TestLaw_randomCases replays random-family shapes (quotasim.FromSeed)
// whose diagnosis changed the law, each held to the goodput it reaches
// since, well above what it reached before: a shape is a test the law
// was once far from the perfect client on, and why is in each case's
// name.
func TestLaw_randomCases(t *testing.T) {
	for _, c := range []struct {
		why   string
		seed  uint64
		floor float64 // goodput at least
	}{
		// Paced at four and a half calls a round trip, a round trip
		// read at an answer held four or five by where it fell, and
		// four, under 0.9 of the rate, reset the rate's proof: the law
		// stayed at a ninth of the bucket's rate for a minute (0.107
		// and 0.160 of the perfect client).
		{"bucket 229/s burst 5, paced at a few calls a round trip", 3029704089, 0.22},
		{"bucket 325/s burst 4, paced at a few calls a round trip", 3029703989, 0.40},
	} {
		t.Run(fmt.Sprint(c.seed), func(t *testing.T) {
			sh := quotasim.FromSeed(c.seed)
			r := quotasim.Run(sh, NewVirtual(Config{}))
			if r.Done != sh.Items || r.Goodput() < c.floor || r.Share() > 0.01 {
				t.Errorf("%s: goodput %.3f, %.2f%% 429s, %d of %d items; want at least %.2f, at most 1%%, all (%s)", c.why, r.Goodput(), 100*r.Share(), r.Done, sh.Items, c.floor, sh.Name)
			}
		})
	}
}
