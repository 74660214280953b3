package limiter

import (
	"testing"
	"time"
)

// A 429 soon after slow start's first, before any rate was proven,
// answers slow start's burst (a log it filled still draining), not the
// paced rate: it leaves the quota unbounded and bounds no climb, so the
// law climbs toward what slow start's last round trip was admitted at
// rather than in an answer lag's stairs from the early reading. A 429
// later than aftermathRoundTrips round trips, or once a rate was proven
// safe or a peak read, bounds the quota as before.
func TestLaw_slowStartAftermath(t *testing.T) {
	tests := []struct {
		name        string
		after       time.Duration // from slow start's first 429 to this one
		safe, peak  float64       // what the law held before this 429
		wantBounded bool
	}{
		{"two round trips after: slow start's", 2 * rtt, 0, 0, false},
		{"three round trips after: slow start's", 3 * rtt, 0, 0, false},
		{"eight round trips after: the paced rate's", 8 * rtt, 0, 0, true},
		{"a rate proven safe since", 2 * rtt, 150, 0, true},
		{"a peak read (a named budget)", 2 * rtt, 0, 150, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestLaw(Config{})
			at := simEpoch
			var starts []time.Time
			for i := range 400 {
				starts = append(starts, w.start(at.Add(time.Duration(i)*2*time.Millisecond), i%64))
			}
			for _, s := range starts {
				w.onSuccess(s.Add(rtt), s, 100, 64)
			}
			s := w.start(at.Add(800*time.Millisecond), 64)
			first := s.Add(rtt / 5)
			w.onRateLimited(first, s, time.Second, 64)
			if w.bounded || w.rate <= 0 {
				t.Fatalf("after slow start's 429: bounded %v, rate %.1f; want unbounded, a rate", w.bounded, w.rate)
			}
			w.gate, w.needProbe, w.probe, w.ramp = time.Time{}, false, time.Time{}, ramp{}
			w.safe, w.peak = tt.safe, tt.peak
			refusedAt := first.Add(tt.after)
			s = w.start(refusedAt.Add(-rtt/5), 1)
			if !s.Before(refusedAt) {
				t.Fatalf("the call started at %v, not before its refusal at %v", s.Sub(simEpoch), refusedAt.Sub(simEpoch))
			}
			rate := w.rate
			w.onRateLimited(refusedAt, s, time.Second, 1)
			if w.decrease != refusedAt {
				t.Fatalf("the second 429 began no event (rate %.1f -> %.1f)", rate, w.rate)
			}
			if w.bounded != tt.wantBounded {
				t.Errorf("bounded %v, want %v", w.bounded, tt.wantBounded)
			}
			if !tt.wantBounded && w.refused != 0 {
				t.Errorf("refused %.1f bounds the climb; want none after slow start's aftermath", w.refused)
			}
		})
	}
}
