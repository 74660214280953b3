package limiter

import (
	"testing"
	"time"
)

// TestLaw_slowStartSpaced: past twice the brake's calls in flight, slow
// start spaces its starts at twice the rate its limit carries, where it
// sent a round trip's doubling as the answers came, in a bunch as tight
// as the latency's spread; below it, the starts go as slots free.
func TestLaw_slowStartSpaced(t *testing.T) {
	for _, tc := range []struct {
		limit  int
		spaced bool
	}{
		{32, false},
		{2 * slowStartBrake, true},
		{1024, true},
	} {
		w := newTestLaw(Config{})
		at := simEpoch
		s := w.start(at, 0)
		at = at.Add(rtt)
		w.onSuccess(at, s, 100, 1)
		if !w.slowStart {
			t.Fatal("slow start over after one success")
		}
		w.setLimit(tc.limit)
		w.start(at, 0)
		gap := rtt / time.Duration(2*tc.limit)
		if got := w.mayStart(at, 1); got == tc.spaced {
			t.Errorf("limit %d: a second start in the same instant allowed %v, want %v", tc.limit, got, !tc.spaced)
		}
		if !w.mayStart(at.Add(gap), 1) {
			t.Errorf("limit %d: no start %v later, at twice the rate the limit carries", tc.limit, gap)
		}
	}
}
