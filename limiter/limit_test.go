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

// TestLaw_moreRefusalsDoNotRaiseTheRate: the rest of an event's 429s
// (calls already sent when it began) take the rate down a call per
// round trip each, never up: not back to a call per round trip when the
// event's first 429 took it below.
func TestLaw_moreRefusalsDoNotRaiseTheRate(t *testing.T) {
	w, at := pacedLaw(t, 4)
	w.bounded, w.eventRate = true, 4
	at = at.Add(time.Second)
	s1 := w.start(at, 0)
	s2 := w.start(at, 1)
	w.onRateLimited(at.Add(20*time.Millisecond), s1, 0, 2)
	after := w.rate
	if perRTT := 1 / rtt.Seconds(); after >= perRTT {
		t.Fatalf("paced at %.2f calls a second after a 429 at 4; want below a call per round trip (%.0f)", after, perRTT)
	}
	w.onRateLimited(at.Add(25*time.Millisecond), s2, 0, 1)
	if w.rate > after {
		t.Errorf("a second 429 of the same event raised the rate from %.2f to %.2f calls a second", after, w.rate)
	}
}

// TestLaw_slowRateProvenOnlyWhenSent: below a call per round trip, a
// rate is proven only while it is sent: a call every ten seconds does
// not prove two a second, and the law does not climb on it.
func TestLaw_slowRateProvenOnlyWhenSent(t *testing.T) {
	w, at := pacedLaw(t, 2)
	w.bounded = true
	w.probeFrom = at
	for range 60 {
		at = at.Add(10 * time.Second)
		s := w.start(at, 0)
		at = at.Add(rtt)
		w.onSuccess(at, s, 100, 1)
	}
	if w.rate > 2 || w.safe > 0 {
		t.Errorf("sending a call every 10 s climbed a rate of 2 a second to %.2f (safe %.2f)", w.rate, w.safe)
	}
}
