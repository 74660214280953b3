package limiter

import (
	"testing"
	"time"
)

// TestLaw_rateFloorBelowARoundTrip: with quick calls, a quota of a few
// calls a second admits less than a call per round trip; the law paces
// below it, named or not (held to a call per round trip, it overran a
// quota of 235 a minute 2.5 times over and lived on 429s).
func TestLaw_rateFloorBelowARoundTrip(t *testing.T) {
	for _, named := range []bool{false, true} {
		w, at := pacedLaw(t, 4)
		w.bounded, w.eventRate = true, 4
		if named {
			w.nameQuota(180, 0)
		}
		at = at.Add(time.Second)
		s := w.start(at, 0)
		w.onRateLimited(at.Add(20*time.Millisecond), s, 0, 1)
		if perRTT := 1 / rtt.Seconds(); w.rate >= perRTT {
			t.Errorf("named %v: paced at %.2f calls a second after a 429 at 4; want below a call per round trip (%.0f)", named, w.rate, perRTT)
		}
	}
}
