package limiter

import (
	"math"
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

// TestLaw_climbTowardSlowStartTop: slow start's 429 reads the mean of a
// ramp that doubled each round trip, and, when slow start outlasted
// twice the window a retry delay showed, the rate its last round trip
// was admitted at. The stairs then climb from the mean toward half of
// that (the round trip before) in geometric steps, each proven, not in
// stairs of 5%. With a window as long as slow start, nothing is read.
func TestLaw_climbTowardSlowStartTop(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retryAfter time.Duration
		top        float64 // the rate slow start's last round trip is read at
	}{
		{"window of a tenth of a round trip", rtt / 10, 64 / rtt.Seconds()},
		{"window as long as slow start", 6 * rtt, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestLaw(Config{})
			at, _ := drive(w, simEpoch, 6*rtt) // drive holds 64 in flight
			s := w.start(at, 0)
			w.onRateLimited(at, s, tc.retryAfter, 1)
			if !near(w.slowTop, tc.top) {
				t.Fatalf("slow start's last round trip read at %.1f/s; want %.1f/s", w.slowTop, tc.top)
			}
			if tc.top == 0 {
				return
			}
			// A ramp that outran the brake: its top is far above its mean.
			mean := w.rate
			w.slowTop = 8 * mean
			at = w.gate
			for i := 0; i < 20 && w.rate == mean; i++ {
				at, _ = drive(w, at, 3*rtt) // drive gives up the calls in flight at its end
			}
			if want := math.Sqrt(mean * w.slowTop * topShare); !near(w.rate, want) {
				t.Errorf("first stair %.1f/s from the mean %.1f/s; want %.1f/s, the geometric middle of it and %.1f/s", w.rate, mean, want, w.slowTop*topShare)
			}
		})
	}
}
