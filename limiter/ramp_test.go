package limiter

import (
	"testing"
	"time"
)

// refusalRTT is how long every 429 takes to come back in the ramp tests.
const refusalRTT = 20 * time.Millisecond

// spentTwice drives a law pacing rate through an event's first 429 and
// then the refusal of a call started after it, within the event's round
// trip: the quota is still spent. Each 429 comes refusalRTT after its
// start with an exact delay of delay. It returns the law and when the
// second 429's gate opens.
func spentTwice(t *testing.T, rate float64, delay time.Duration) (*law, time.Time) {
	t.Helper()
	w, at := pacedLaw(t, rate)
	s := w.start(at, 0)
	at = at.Add(refusalRTT)
	w.onRateLimited(at, s, delay, 1)
	at = w.hold(at)
	s = w.start(at, 0)
	at = at.Add(refusalRTT)
	w.onRateLimited(at, s, delay, 1)
	if !w.sameRoundTrip(at) {
		t.Fatal("the second 429 came after the event's round trip")
	}
	return w, at.Add(delay)
}

func TestLaw_rampAfterASpentQuota(t *testing.T) {
	silence := refusalRTT * 3 / 2
	for _, tc := range []struct {
		name  string
		rate  float64
		ramps bool
	}{
		// A thousand calls a second sends 30 within a refusal's round
		// trip and its half: into a quota still spent, all refused.
		{"fast pace: one call, then two a silence later", 1000, true},
		// Fifty a second sends one or two: the pace alone holds them.
		{"slow pace: no ramp", 50, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, open := spentTwice(t, tc.rate, 5*time.Millisecond)
			at := w.hold(open)
			if !w.mayStart(at, 0) {
				t.Fatalf("no start when the gate opens at %v", at.Sub(simEpoch))
			}
			w.start(at, 0)
			next := w.hold(at)
			if tc.ramps {
				if want := at.Add(silence); !next.Equal(want) {
					t.Fatalf("second start held to %v after the first, want a refusal round trip and a half, %v", next.Sub(at), silence)
				}
				w.start(next, 0)
				if w.ramp.allowed != 2 || !w.rampHold().IsZero() {
					t.Errorf("after a silence the step is %d calls, held to %v; want two, not held", w.ramp.allowed, w.rampHold())
				}
				return
			}
			if next.Sub(at) >= silence {
				t.Errorf("second start held %v at %.0f calls a second; want the pace's interval, %v", next.Sub(at), w.rate, w.interval())
			}
		})
	}
}

// TestLaw_rampRestartsOnItsOwnRefusal: a call the ramp let through that
// the quota refuses starts the ramp over from one call; a refusal of a
// call sent before the ramp began does not.
func TestLaw_rampRestartsOnItsOwnRefusal(t *testing.T) {
	w, open := spentTwice(t, 1000, 5*time.Millisecond)
	at := w.hold(open)
	s := w.start(at, 0)
	at = at.Add(refusalRTT * 3 / 2)
	w.start(at, 0)
	w.start(at, 0) // the second step: two calls
	if w.ramp.allowed != 2 {
		t.Fatalf("step of %d calls after a silence, want 2", w.ramp.allowed)
	}
	w.onRateLimited(at.Add(time.Millisecond), w.ramp.began.Add(-time.Millisecond), 5*time.Millisecond, 3)
	if w.ramp.allowed != 2 {
		t.Fatalf("a refusal of a call sent before the ramp began restarted it (step %d)", w.ramp.allowed)
	}
	w.onRateLimited(at.Add(2*time.Millisecond), s, 5*time.Millisecond, 2)
	if w.ramp.allowed != 1 || w.ramp.sent != 0 {
		t.Errorf("the ramp's own call refused: step %d with %d sent, want 1 with 0", w.ramp.allowed, w.ramp.sent)
	}
}

// TestLaw_rampSilenceOfASlowRefusal: a refusal that took long to come
// back (a flex call shed after a wait, a 429 queued behind a busy
// server) does not set the ramp's silence for the rest of the run: a
// step waits no longer than a success's round trip, the premise of the
// ramp being that a refusal comes back within a fraction of it.
func TestLaw_rampSilenceOfASlowRefusal(t *testing.T) {
	w, at := pacedLaw(t, 1000)
	s := w.start(at, 0)
	at = at.Add(30 * time.Second)
	w.onRateLimited(at, s, 5*time.Millisecond, 1)
	w.rate = 1000
	w.fitLimit()
	at = w.hold(at.Add(2 * rtt))
	// The quota is spent again: an event's first 429, then the refusal
	// of a call started after it, each back quickly.
	s = w.start(at, 0)
	at = at.Add(refusalRTT)
	w.onRateLimited(at, s, 5*time.Millisecond, 1)
	at = w.hold(at)
	s = w.start(at, 0)
	at = at.Add(refusalRTT)
	w.onRateLimited(at, s, 5*time.Millisecond, 1)
	at = w.hold(at.Add(5 * time.Millisecond))
	if !w.mayStart(at, 0) {
		t.Fatalf("no start when the gate opens")
	}
	w.start(at, 0)
	if held := w.hold(at).Sub(at); held > rtt {
		t.Errorf("the ramp's next step held %v after one slow refusal; want at most a round trip (%v)", held, rtt)
	}
}
