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

// TestLaw_slowStartTopReadAtReopening: after slow start's bare 429 no
// window is known, and the rate its last round trip was admitted at is
// trusted only once the first probe, a backoff later, is admitted: the
// quota freed room at once (a bucket, a log slow start outlasted). A
// probe refused first says the window slow start spent is still full,
// as long as slow start or longer: nothing is read.
func TestLaw_slowStartTopReadAtReopening(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refused int // probes refused before one is admitted
		read    bool
	}{
		{"first probe admitted", 0, true},
		{"a probe refused first", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestLaw(Config{})
			at, _ := drive(w, simEpoch, 6*rtt) // drive holds 64 in flight
			s := w.start(at, 0)
			w.onRateLimited(at, s, 0, 1)
			seen := w.slowTopSeen
			if w.slowTop != 0 || seen <= 0 {
				t.Fatalf("after a bare 429: top %.1f/s trusted, %.1f/s seen; want none trusted and one seen", w.slowTop, seen)
			}
			for i := 0; i <= tc.refused; i++ {
				at = w.gate
				if !w.mayStart(at, 0) {
					t.Fatalf("probe %d held at the gate", i)
				}
				p := w.start(at, 0)
				at = at.Add(rtt)
				if i < tc.refused {
					w.onRateLimited(at, p, 0, 1)
					continue
				}
				w.onSuccess(at, p, 100, 1)
			}
			if got := w.slowTop > 0; got != tc.read {
				t.Fatalf("top trusted at the reopening: %v (%.1f/s); want %v", got, w.slowTop, tc.read)
			}
			if tc.read && !near(w.slowTop, seen) {
				t.Errorf("top %.1f/s; want the %.1f/s read at the 429", w.slowTop, seen)
			}
		})
	}
}

// TestLaw_cappedAtSlowStartLevel: a cap on calls in progress refuses at
// the level slow start's refusal met, while the rate, climbed toward slow
// start's top, carries a few more calls than that by a smoothed latency
// that swings by a tenth (a cap of 105 calls of 1.2-1.7 s, read as a rate
// when the rate carried 108: paced at 60/s for the rest of the run, 0.84
// -> 0.73). Within a tenth it is the cap; well past it, or at another
// level, a rate. What counts is the rate sent, not paced: a cap refuses
// every call past its level and the ramp restarts at each 429, so the
// starts lag a schedule the limit leaves room for (a cap of 123 calls of
// 240 ms refused at 123 beside, event after event, while the paced rate
// carried 214 calls and the starts 121: read as a rate until 93% of the
// run, 0.621; read at the second event, 0.694).
func TestLaw_cappedAtSlowStartLevel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rate   float64 // × rtt: the calls it carries
		sent   int     // the calls started over the round trip before the refusal
		others int
		want   bool
	}{
		{"slow start's level, the rate carrying a little more", 1080, 108, 105, true},
		{"another level", 1080, 108, 104, false},
		{"slow start's level, the rate carrying far more", 1200, 120, 105, false},
		{"slow start's level, paced far above what was sent", 1200, 104, 105, true},
		{"slow start's level, sent far above it", 1200, 130, 105, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, at := pacedLaw(t, tc.rate)
			w.limit, w.firstOthers = 200, 105
			sendOver(w, at, tc.sent)
			refused := w.start(at, tc.others)
			if got := w.capped(refused, tc.others, false); got != tc.want {
				t.Errorf("capped(%d) at %.0f/s = %v, want %v", tc.others, tc.rate, got, tc.want)
			}
		})
	}
}

// TestLaw_slowStartTopNotReadAfterExactDelay: an exact retry delay on
// slow start's 429 that shows a window slow start did not outlast twice
// reads no top (TestLaw_climbTowardSlowStartTop), and a reopening later
// must not trust one either: a cap on calls in progress refusing bare at
// slow start's level leaves the quota unbounded and sends a probe, and
// its admission says the cap freed a slot, not that the window the
// exact delay showed freed room at once.
func TestLaw_slowStartTopNotReadAfterExactDelay(t *testing.T) {
	w := newTestLaw(Config{})
	at, _ := drive(w, simEpoch, 6*rtt) // drive holds 64 in flight
	s := w.start(at, 63)
	w.onRateLimited(at, s, 6*rtt, 64)
	at = w.gate
	for i := range 2 { // the cap refuses, bare, at slow start's level
		c := w.start(at, 63)
		at = at.Add(rtt / 10)
		w.onRateLimited(at, c, 0, 64)
		if w.bounded {
			t.Fatalf("cap refusal %d bounded the quota; want it read as the cap", i)
		}
	}
	if !w.needProbe {
		t.Fatal("no probe after the cap's bare refusals")
	}
	for i := 0; i < 100 && !w.mayStart(at, 0); i++ {
		at = at.Add(rtt / 10)
	}
	p := w.start(at, 0)
	if !p.Equal(w.probe) {
		t.Fatal("the call after the backoff is not the probe")
	}
	w.onSuccess(at.Add(rtt), p, 100, 1)
	if w.slowTop != 0 {
		t.Errorf("slow start's top trusted at %.1f/s after an exact delay showed a window slow start did not outlast twice; want none", w.slowTop)
	}
}
