package limiter

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/quotasim"
)

// TestLaw_randomFamilies measures the law on quota shapes drawn at random
// from quotasim's families, in virtual time, and logs the distribution:
// p10, median and worst goodput against the perfect client, the 429 share
// and calls per item, overall and per family, with the worst shapes and
// their seeds so any case replays. It runs only when asked, since it
// measures rather than asserts:
//
//	SAWTOOTH_RANDOM_SHAPES=200 SAWTOOTH_RANDOM_SEED=7 go test -run TestLaw_randomFamilies -v ./limiter
//
// Draw a fresh seed for each measurement: a seed tuned on is no longer a
// measurement.
func TestLaw_randomFamilies(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SAWTOOTH_RANDOM_SHAPES"))
	if n <= 0 {
		t.Skip("set SAWTOOTH_RANDOM_SHAPES=N (and SAWTOOTH_RANDOM_SEED=S) to measure the law on N random quota shapes")
	}
	seed, _ := strconv.ParseUint(os.Getenv("SAWTOOTH_RANDOM_SEED"), 10, 64)
	var rs []quotasim.Result
	for _, sh := range quotasim.Draw(n, seed) {
		rs = append(rs, quotasim.Run(sh, NewVirtual(Config{})))
	}
	var b strings.Builder
	quotasim.WriteTable(&b, rs, 20)
	t.Logf("%d random shapes, seed %d\n%s", n, seed, b.String())
}

// randomBar is what the law reaches on the random families drawn from
// barSeed, held as a regression bar: the targets (median 0.95,
// p10 0.90 of the perfect client, at most 1% of calls refused on every
// shape, 1.01 calls per item) are not reached by today's law, and a bar
// set at them could only fail. Any change that loses ground fails it; a
// change that gains raises it.
type randomBar struct {
	shapes                 int
	p10, median            float64 // goodput at least
	worst429, callsPerItem float64 // at most
}

// barSeed draws the bar's shapes. It is not a seed to report figures on:
// measure with TestLaw_randomFamilies and a fresh seed.
const barSeed = 9000

// The bar over 200 shapes, and over the first 20 under the race detector
// (or -short). The p10 of 20 is one shape's (a token bucket of 825 a
// second, seed 9009), which slow start now reaches past 512 calls in
// flight before its first 429, 1% slower; the 200 shapes' p10 rose from
// 0.31 to 0.45 with it. The worst 429 share fell from 22% to 17% when
// the ramp (ramp.go) and slow start's spacing came: what is left is a
// per-minute window of 92 calls with bare 429s, charged (seed 9158).
// The 200 shapes' median rose from 0.804 to 0.820 when slow start's
// level met again read a cap beside the calls sent, not paced (20 of the
// 49 cap shapes moved, every one up): the bar from 0.77 to 0.79.
var (
	randomBarFull = randomBar{shapes: 200, p10: 0.44, median: 0.79, worst429: 0.17, callsPerItem: 1.20}
	randomBarRace = randomBar{shapes: 20, p10: 0.42, median: 0.83, worst429: 0.016, callsPerItem: 1.016}
)

// TestLaw_randomFamiliesBar drives the default law through random quota
// shapes in virtual time and asserts the bar: p10 and median goodput
// against the perfect client, the worst 429 share and calls per item, no
// item lost (every run finishes), and no shape beating the perfect client
// by more than the latency of the order items happen to go in (a harness
// that lets a law beat it is broken).
func TestLaw_randomFamiliesBar(t *testing.T) {
	bar := randomBarFull
	if raceEnabled || testing.Short() {
		bar = randomBarRace
	}
	var rs []quotasim.Result
	for _, sh := range quotasim.Draw(bar.shapes, barSeed) {
		r := quotasim.Run(sh, NewVirtual(Config{}))
		if r.Stalled != "" || r.Done != sh.Items {
			t.Errorf("%s: %d of %d items done (%s)", sh.Name, r.Done, sh.Items, r.Stalled)
		}
		if r.Goodput() > 1.1 {
			t.Errorf("%s: goodput %.3f beats the perfect client", sh.Name, r.Goodput())
		}
		rs = append(rs, r)
	}
	s := quotasim.Summarize(rs)
	if s.P10 < bar.p10 || s.Median < bar.median {
		t.Errorf("goodput p10 %.3f, median %.3f; want at least %.2f and %.2f", s.P10, s.Median, bar.p10, bar.median)
	}
	if s.Worst429 > bar.worst429 {
		t.Errorf("%.2f%% of calls refused on %s; want at most %.1f%%", 100*s.Worst429, s.Worst429At, 100*bar.worst429)
	}
	if s.WorstCallsPerItem > bar.callsPerItem {
		t.Errorf("%.3f calls per item on the worst shape; want at most %.2f", s.WorstCallsPerItem, bar.callsPerItem)
	}
	var b strings.Builder
	quotasim.WriteTable(&b, rs, 3)
	t.Logf("%d random shapes, seed %d\n%s", bar.shapes, barSeed, b.String())
}
