package limiter

import (
	"cmp"
	"math"
	"testing"
	"time"
)

// Table tests of the control law alone, driven through explicit instants:
// no clock, no goroutine, no lock.

// rtt is the round trip every law test measures.
const rtt = 100 * time.Millisecond

// newTestLaw returns the law for cfg at simEpoch, as New builds it.
func newTestLaw(cfg Config) *law {
	slowStart := cfg.slowStarts()
	w := newLaw(cfg.withDefaults(), slowStart)
	return &w
}

// pacedLaw returns a law that has measured a round trip of rtt and paces
// rate starts per second, no event yet; and the time it is at.
func pacedLaw(t *testing.T, rate float64) (*law, time.Time) {
	t.Helper()
	w := newTestLaw(Config{Start: 10})
	at := simEpoch
	s := w.start(at, 0)
	at = at.Add(rtt)
	w.onSuccess(at, s, 100, 1)
	if w.rate == 0 {
		t.Fatal("no rate after the first round trip with a start given")
	}
	w.rate = rate
	w.fitLimit()
	return w, at
}

// sendOver starts n calls evenly over the round trip before t (after
// pacedLaw's own start, a round trip before it), as a law sending n
// calls a round trip does; the limit and capLevel stay as they were.
func sendOver(w *law, t time.Time, n int) {
	limit, capLevel := w.limit, w.capLevel
	for i := range n {
		w.start(t.Add(-rtt+time.Duration(i+1)*rtt/time.Duration(n+1)), i)
	}
	w.limit, w.capLevel = limit, capLevel
}

// drive runs calls through w from t for d: a call starts whenever the law
// lets one, up to 64 in flight, and each succeeds after rtt. It returns
// the time reached and the calls started.
func drive(w *law, t time.Time, d time.Duration) (time.Time, int) {
	type call struct{ start, end time.Time }
	var flying []call
	started := 0
	end := t.Add(d)
	for t.Before(end) {
		for len(flying) < 64 && w.mayStart(t, len(flying)) {
			s := w.start(t, len(flying))
			flying = append(flying, call{s, t.Add(rtt)})
			started++
		}
		next := end
		if len(flying) > 0 && flying[0].end.Before(next) {
			next = flying[0].end
		}
		if h := w.hold(t); h.After(t) && h.Before(next) {
			next = h
		}
		t = next
		for len(flying) > 0 && !flying[0].end.After(t) {
			w.onSuccess(t, flying[0].start, 100, len(flying))
			flying = flying[1:]
		}
	}
	for _, c := range flying {
		w.onFailed(c.start)
	}
	return t, started
}

func near(got, want float64) bool { return math.Abs(got-want) <= 1e-6*max(1, math.Abs(want)) }

func TestLaw_slowStart(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		successes int
		filled    bool          // each success's calls fill the limit
		every     time.Duration // between successes; rtt if zero
		want      int
	}{
		{"one more per success", Config{}, 10, false, 0, 18},
		{"up to the brake, not a third of it", Config{}, 100, false, 0, slowStartBrake},
		{"by Increase", Config{Increase: 2}, 5, false, 0, 18},
		{"a given start paces the rate it carries", Config{Start: 8}, 5, false, 0, 8},
		{"a start to climb from climbs", Config{Start: 8, SlowStart: true}, 5, false, 0, 13},
		{"a start to climb from with a rate paces the rate", Config{Start: 8, StartRate: 100, SlowStart: true}, 5, false, 0, 15},
		{"a start to climb from past the brake holds while the calls leave room", Config{Start: 100, SlowStart: true}, 50, false, 0, 100},
		{"up to a given ceiling below the brake", Config{Ceiling: 20}, 100, true, 0, 20},
		{"a given ceiling at the brake is the ceiling", Config{Ceiling: 64}, 1000, true, 0, 64},
		// 56 successes reach the brake; filled, it holds for 128 more
		// (two round trips of its calls) and until 4 s after the first.
		{"held at the brake for two round trips of its calls", Config{}, 56 + 128, true, brakeHold / 100, slowStartBrake},
		{"held at the brake for brakeHold", Config{}, 56 + 130, true, time.Millisecond, slowStartBrake},
		{"past the brake, doubling while filled", Config{}, 56 + 128 + 100, true, brakeHold / 100, slowStartBrake + 100},
		{"past the brake, not while the calls leave room", Config{}, 56 + 1000, false, brakeHold / 100, slowStartBrake},
		{"past the brake, up to the ceiling", Config{}, 56 + 128 + DefaultCeiling, true, brakeHold / 100, DefaultCeiling},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestLaw(tt.cfg)
			at := simEpoch
			every := cmp.Or(tt.every, rtt)
			for range tt.successes {
				s := w.start(at, 0)
				at = at.Add(every)
				inFlight := 1
				if tt.filled {
					inFlight = w.limit
				}
				w.onSuccess(at, s, 100, inFlight)
			}
			if w.limit != tt.want {
				t.Errorf("limit %d after %d successes, want %d", w.limit, tt.successes, tt.want)
			}
			if w.slowStart != tt.cfg.slowStarts() {
				t.Errorf("slowStart = %v", w.slowStart)
			}
		})
	}
}

// The first 429 ends slow start: the law paces just under the rate it
// was sending, or what the quota admitted since the first start, over
// that span or, when an exact retry delay is longer than slow start
// lasted, to when the delay says the quota opens again (a window spent by
// slow start opens a window after it began), whichever is lower; it
// learns no bound from it (slow start sends in bursts).
func TestLaw_onRateLimited_first(t *testing.T) {
	tests := []struct {
		name       string
		retryAfter time.Duration
		// want is the rate wanted from the rate sent over the last round
		// trip and the calls admitted since the first start.
		want func(sent float64, admitted int) float64
	}{
		{"opens at once", 10500 * time.Microsecond, func(_ float64, n int) float64 {
			return float64(n) / (5 * rtt).Seconds()
		}},
		{"opens a longer window after the first start", 2500 * time.Millisecond, func(_ float64, n int) float64 {
			return float64(n) / (5*rtt + 2500*time.Millisecond).Seconds()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestLaw(Config{})
			at, started := drive(w, simEpoch, 5*rtt) // slow start, unpaced
			s := w.start(at, 0)
			sent := w.sentRate(at)
			w.onRateLimited(at, s, tt.retryAfter, 1)
			if w.slowStart || w.decreases != 1 {
				t.Fatalf("slowStart %v, decreases %d after the first 429", w.slowStart, w.decreases)
			}
			// drive gave up the calls still in flight: the rest were admitted.
			admitted := started - w.nSentFailed()
			if want := min(sent*eventBackoff, tt.want(sent, admitted)); !near(w.rate, want) || w.refused != 0 {
				t.Errorf("rate %.1f, refused %.1f; want %.1f and no bound", w.rate, w.refused, want)
			}
			if want := at.Add(tt.retryAfter); !w.gate.Equal(want) {
				t.Errorf("gate %v, want now + the delay", w.gate.Sub(simEpoch))
			}
		})
	}
}

// nSentFailed counts the starts in the ring reported failed.
func (w *law) nSentFailed() int {
	n := 0
	for i := range min(w.nSent, sentRing) {
		if w.sent[i].outcome == failedCall {
			n++
		}
	}
	return n
}

// After an event, a safe rate held bisects toward the refused one; once
// they are close the rate stays safe, then climbs in stairs.
func TestLaw_bisection(t *testing.T) {
	tests := []struct {
		name                string
		safe, refused, rate float64
		held                int // lags held at the safe rate since the 429
		// unbounded: only slow start's burst was refused, so a stair
		// is held firstClimbRoundTrips round trips, not an answer lag.
		unbounded          bool
		wantRate, wantSafe float64
		wantRefused        bool // a refused rate still bounds the quota
	}{
		{"halfway to the refused rate", 80, 100, 90, 0, false, 95, 90, true},
		{"close enough: stay safe", 97.5, 100, 98, 0, false, 98, 98, true},
		{"long safe: look for more", 97.5, 100, 98, reprobeLags, false, 98 * probeStair, 98, false},
		{"no bound: a stair up", 50, 0, 50, 0, false, 50 * probeStair, 50, false},
		{"only slow start refused: a stair in two round trips", 50, 0, 50, 0, true, 50 * probeStair, 50, false},
	}
	// Two stairs held: the quota grew, and the third comes half a lag on.
	t.Run("two stairs held: the next in half a lag", func(t *testing.T) {
		w, at := pacedLaw(t, 60)
		w.safe, w.eventRate, w.bounded, w.stairs = 60, 60, true, 2
		w.probeFrom = at
		drive(w, at, w.answerLag()/2+rtt)
		if want := 60 * (1 + (probeStair-1)*4); !near(w.rate, want) || !near(w.safe, 60) {
			t.Errorf("safe %.2f rate %.2f half a lag on, want 60 and %.2f", w.safe, w.rate, want)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := pacedLaw(t, tt.rate)
			w.safe, w.refused, w.eventRate, w.held = tt.safe, tt.refused, tt.rate, tt.held
			w.bounded = !tt.unbounded
			w.probeFrom = at
			lag := w.answerLag()
			if tt.unbounded {
				lag = firstClimbRoundTrips * w.latency()
			}
			drive(w, at, lag+rtt)
			if !near(w.safe, tt.wantSafe) || !near(w.rate, tt.wantRate) {
				t.Errorf("safe %.2f rate %.2f after a lag, want %.2f and %.2f", w.safe, w.rate, tt.wantSafe, tt.wantRate)
			}
			if (w.refused > 0) != tt.wantRefused {
				t.Errorf("refused %.2f", w.refused)
			}
		})
	}
}

// A 429 at a paced rate bounds the quota: the law goes halfway between
// the safe rate and the refused one, or below the refused one when no
// safe rate is known; a 429 at or below the safe rate means the quota
// fell.
func TestLaw_onRateLimited_rate(t *testing.T) {
	tests := []struct {
		name                  string
		safe, rate            float64
		wantRate, wantRefused float64
		wantSafe              float64
	}{
		{"bisects", 80, 100, 90, 100, 80},
		{"close: back to safe", 98, 100, 98, 100, 98},
		{"no safe rate: 3% off", 0, 100, 97, 100, 0},
		{"refused at the safe rate: the quota fell", 100, 100, 97, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := pacedLaw(t, tt.rate)
			w.safe, w.eventRate = tt.safe, tt.rate
			s := w.start(at, 0)
			at = at.Add(20 * time.Millisecond)
			w.onRateLimited(at, s, 7300*time.Microsecond, 1)
			if !near(w.rate, tt.wantRate) || !near(w.refused, tt.wantRefused) || !near(w.safe, tt.wantSafe) {
				t.Errorf("rate %.2f refused %.2f safe %.2f, want %.2f %.2f %.2f",
					w.rate, w.refused, w.safe, tt.wantRate, tt.wantRefused, tt.wantSafe)
			}
		})
	}
}

// 429s within a round trip of a decrease are the same event; each refused
// call started before it takes one call per round trip off the rate.
func TestLaw_onRateLimited_oncePerRoundTrip(t *testing.T) {
	w, at := pacedLaw(t, 100)
	a, b := w.start(at, 0), w.start(at, 1)
	at = at.Add(20 * time.Millisecond)
	w.onRateLimited(at, a, 5100*time.Microsecond, 2) // 100 -> 97
	w.onRateLimited(at.Add(time.Millisecond), b, 5100*time.Microsecond, 1)
	if w.decreases != 1 {
		t.Fatalf("%d decreases, want 1", w.decreases)
	}
	if want := 97 - 1/rtt.Seconds(); !near(w.rate, want) {
		t.Errorf("rate %.2f, want %.2f (one call per round trip off)", w.rate, want)
	}
	late := w.start(w.gate, 0)
	w.onRateLimited(w.gate.Add(20*time.Millisecond), late, 5100*time.Microsecond, 1)
	if w.decreases != 1 {
		t.Errorf("a call started after the decrease, refused within the round trip, made %d decreases", w.decreases)
	}
}

func TestUncertain(t *testing.T) {
	tests := []struct {
		retryAfter time.Duration
		want       bool
	}{
		{0, true},
		{time.Second, true},
		{26 * time.Second, true},
		{1500 * time.Millisecond, false},
		{7300 * time.Microsecond, false},
	}
	for _, tt := range tests {
		if got := uncertain(tt.retryAfter); got != tt.want {
			t.Errorf("uncertain(%v) = %v, want %v", tt.retryAfter, got, tt.want)
		}
	}
}

// A 429 that does not say when to retry, and that no cap on calls in
// progress explains, gates every start for a backoff of about a round trip
// (no longer than the delay given), then lets one probe through and holds
// the rest until it succeeds.
func TestLaw_onRateLimited_uncertain(t *testing.T) {
	tests := []struct {
		name       string
		retryAfter time.Duration
	}{
		{"bare", 0},
		{"whole seconds", 26 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := pacedLaw(t, 100)
			s := w.start(at, 0)
			at = at.Add(20 * time.Millisecond)
			w.onRateLimited(at, s, tt.retryAfter, 1)
			if wait := w.gate.Sub(at); wait < rtt*3/4 || wait > rtt*5/4 {
				t.Fatalf("gate %v after the 429, want a round trip ±25%%", wait)
			}
			if w.mayStart(w.gate.Add(-time.Nanosecond), 0) {
				t.Fatal("a start before the gate")
			}
			at = w.gate
			probe := w.start(at, 0)
			if w.mayStart(at.Add(time.Second), 1) {
				t.Fatal("a second start while the probe is out")
			}
			w.onSuccess(at.Add(rtt), probe, 100, 1)
			if !w.mayStart(at.Add(rtt+time.Second), 0) {
				t.Fatal("no start after the probe succeeded")
			}
		})
	}
}

// The first bare 429 while a learned rate is paced holds the starts for
// two of its round trips and lowers the rate. If no call already sent is
// refused meanwhile, the quota was only just overrun: the starts go on
// with no probe. If one is, the quota is spent: a probe goes first. A
// call started after the gate and refused with no success in between
// means spent as well: a backoff, then a probe.
func TestLaw_onRateLimited_lightGate(t *testing.T) {
	tests := []struct {
		name      string
		refuseOld bool // the call sent 5 ms after the refused one is refused too
		refuseNew bool // the first call after the gate is refused
		wantProbe bool
	}{
		{"the others admitted: no probe", false, false, false},
		{"a call sent before the gate refused: a probe", true, false, true},
		{"a call sent after the gate refused: a backoff and a probe", false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := pacedLaw(t, 100)
			w.eventRate = 100
			s0 := w.start(at, 0)
			s1 := w.start(at.Add(5*time.Millisecond), 1)
			refusedAt := at.Add(20 * time.Millisecond)
			w.onRateLimited(refusedAt, s0, 0, 2)
			if want := refusedAt.Add(40 * time.Millisecond); !w.gate.Equal(want) {
				t.Fatalf("gate %v after the 429, want two of its round trips", w.gate.Sub(refusedAt))
			}
			if w.rate >= 100 {
				t.Errorf("rate %.2f after the 429, want below 100", w.rate)
			}
			if tt.refuseOld {
				w.onRateLimited(refusedAt.Add(5*time.Millisecond), s1, 0, 1)
			}
			at = w.gate
			if !w.mayStart(at, 1) {
				t.Fatal("no start once the gate opened")
			}
			s2 := w.start(at, 1)
			if tt.refuseNew {
				gate := w.gate
				w.onRateLimited(at.Add(20*time.Millisecond), s2, 0, 2)
				if wait := w.gate.Sub(at.Add(20 * time.Millisecond)); !w.gate.After(gate) || wait < rtt*3/4 || wait > rtt*5/4 {
					t.Fatalf("gate %v after the second 429, want a backoff of a round trip ±25%%", wait)
				}
				at = w.gate
				w.start(at, 1)
			}
			if got := w.awaitingProbe(); got != tt.wantProbe {
				t.Errorf("the start after the gate awaited as a probe: %v, want %v", got, tt.wantProbe)
			}
			if got := w.mayStart(at.Add(time.Second), 2); got == tt.wantProbe {
				t.Errorf("another start a second on allowed: %v, want %v", got, !tt.wantProbe)
			}
		})
	}
}

// A cap on calls in progress refuses at the same level event after event,
// or well above what the rate carries; a rate at any level.
func TestLaw_capped(t *testing.T) {
	tests := []struct {
		name     string
		capLevel float64
		limit    int
		last     [2]int // the calls in flight at the last two events
		first    int    // at slow start's refusal; -1 for none
		others   int
		// admitted: the calls in flight beside a call admitted a round
		// trip before the refused one; -1 for none.
		admitted int
		// sent: the calls started, evenly, over the round trip before
		// the refused one, besides it (with none admitted).
		sent int
		want bool
	}{
		// rate 100/s × rtt carries 10 calls in flight on average.
		{"same level thrice, above the average", 0, 15, [2]int{12, 12}, -1, 12, -1, 10, true},
		{"same level, below the average", 0, 15, [2]int{9, 9}, -1, 9, -1, 10, false},
		{"varying levels", 0, 15, [2]int{10, 11}, -1, 11, -1, 10, false},
		{"well above the average", 0, 20, [2]int{0, 0}, -1, 16, -1, 10, true},
		{"a little above the average, as latency's tail puts it", 0, 20, [2]int{0, 0}, -1, 13, -1, 10, false},
		{"at the cap that binds", 12, 12, [2]int{0, 0}, -1, 11, -1, 10, true},
		{"below the cap", 12, 12, [2]int{0, 0}, -1, 9, -1, 10, false},
		{"slow start's level again, above the average", 0, 20, [2]int{11, 0}, 11, 11, -1, 10, true},
		{"slow start's level again, below the average", 0, 20, [2]int{9, 0}, 9, 9, -1, 10, false},
		{"well above the average, below a level admitted", 0, 20, [2]int{0, 0}, -1, 16, 17, 0, false},
		{"at the cap that binds, a level admitted", 12, 12, [2]int{0, 0}, -1, 11, 11, 0, false},
		{"well above the average, above the level admitted", 0, 20, [2]int{0, 0}, -1, 16, 15, 0, true},
		// Sent below the paced rate (a cap refuses every call past its
		// level, and the ramp restarts at each 429): slow start's level
		// again reads a cap when what was sent carries no more than a
		// tenth above it, not what the rate would carry.
		{"slow start's level again, below the average paced, at what was sent", 0, 20, [2]int{8, 0}, 8, 8, -1, 7, true},
		{"slow start's level again, sent well above it", 0, 20, [2]int{8, 0}, 8, 8, -1, 9, false},
		{"slow start's level again, the law's limit holding it, sent below", 0, 9, [2]int{8, 0}, 8, 8, -1, 7, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := pacedLaw(t, 100)
			w.capLevel, w.limit, w.lastOthers, w.firstOthers = tt.capLevel, tt.limit, tt.last, tt.first
			if tt.admitted >= 0 {
				s := w.start(at, tt.admitted)
				at = at.Add(rtt)
				w.onSuccess(at, s, 100, tt.admitted+1)
				w.capLevel, w.limit = tt.capLevel, tt.limit
			}
			if tt.admitted < 0 {
				sendOver(w, at, tt.sent)
			}
			refused := w.start(at, tt.others)
			if got := w.capped(refused, tt.others, false); got != tt.want {
				t.Errorf("capped(%d) = %v, want %v", tt.others, got, tt.want)
			}
		})
	}
}

// A capped event holds the calls in flight at the level refused, and
// leaves the rate alone.
func TestLaw_onRateLimited_cap(t *testing.T) {
	w, at := pacedLaw(t, 100)
	w.eventRate, w.lastOthers = 100, [2]int{12, 12}
	var s time.Time
	for i := range 13 {
		s = w.start(at, i)
	}
	at = at.Add(20 * time.Millisecond)
	w.onRateLimited(at, s, 0, 13)
	if w.capLevel != 12 || w.limit != 12 || w.rate != 100 {
		t.Errorf("cap %.1f limit %d rate %.1f, want the limit held at 12 and the rate at 100", w.capLevel, w.limit, w.rate)
	}
	if !w.gate.IsZero() {
		t.Errorf("a capped bare 429 gated starts until %v", w.gate.Sub(simEpoch))
	}
}

// A run started from what an earlier one learned paces just under the
// rate learned with the limit from its first start, or else the rate the
// limit carries from its first round trip, or climbs from the limit in
// slow start. It hands on only a rate the quota showed: the rate learned
// whole (not 97% of it) when it met no 429 of its own, none when the
// quota never bounded it.
func TestLaw_learnedStart(t *testing.T) {
	tests := []struct {
		name        string
		cfg         Config
		wantRate    float64
		wantLearned float64
	}{
		{"the rate the limit carries", Config{Start: 30}, 30 / 0.2 / rateHeadroom, 0},
		{"just under the rate learned", Config{Start: 30, StartRate: 120}, 120 * eventBackoff, 120},
		{"no rate without a start", Config{StartRate: 120}, 0, 0},
		{"slow start from the limit", Config{Start: 30, SlowStart: true}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestLaw(tt.cfg)
			s := w.start(simEpoch, 0)
			w.onSuccess(simEpoch.Add(200*time.Millisecond), s, 100, 1)
			if !near(w.rate, tt.wantRate) {
				t.Errorf("rate %.1f, want %.1f", w.rate, tt.wantRate)
			}
			if got := w.learnedRate(); !near(got, tt.wantLearned) {
				t.Errorf("learned rate %.1f, want %.1f", got, tt.wantLearned)
			}
		})
	}
}

// What the quota showed is what a run hands on: a 429 (slow start's
// first or a paced rate's), or a budget one named, makes the paced rate
// learned; a rate paced with no 429 is not.
func TestLaw_learnedRate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		refused bool  // a 429 comes after the first round trip
		named   int64 // the per-minute budget it names, 0 for none
		want    func(w *law) float64
	}{
		{"slow start, no 429", Config{}, false, 0, func(*law) float64 { return 0 }},
		{"paced from a given limit, no 429", Config{Start: 30}, false, 0, func(*law) float64 { return 0 }},
		{"slow start's 429", Config{}, true, 0, func(w *law) float64 { return w.rate }},
		{"a 429 at a paced rate", Config{Start: 30}, true, 0, func(w *law) float64 { return w.rate }},
		{"a 429 naming a budget", Config{Start: 30}, true, 6000, func(w *law) float64 { return 100 * namedShare }},
		{"a 429 below the rate learned", Config{Start: 30, StartRate: 120}, true, 0, func(w *law) float64 { return w.rate }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestLaw(tt.cfg)
			at := simEpoch
			for range 20 {
				s := w.start(at, 0)
				at = at.Add(rtt)
				w.onSuccess(at, s, 100, 1)
			}
			if tt.refused {
				s := w.start(at, 0)
				at = at.Add(rtt)
				w.nameQuota(tt.named, 0)
				w.onRateLimited(at, s, 0, 1)
			}
			want := tt.want(w)
			if tt.refused && want <= 0 {
				t.Fatalf("the law paces no rate after the 429")
			}
			if got := w.learnedRate(); !near(got, want) {
				t.Errorf("learned rate %.2f, want %.2f", got, want)
			}
		})
	}
}

func TestLaw_fixed(t *testing.T) {
	w := newTestLaw(Config{Start: 4, Fixed: true})
	at, _ := drive(w, simEpoch, time.Second)
	s := w.start(at, 0)
	w.onRateLimited(at, s, 2*time.Second, 1)
	if w.limit != 4 || w.rate != 0 || w.decreases != 0 || !w.gate.Equal(at.Add(2*time.Second)) {
		t.Errorf("limit %d rate %.1f decreases %d gate %v: Fixed only gates", w.limit, w.rate, w.decreases, w.gate.Sub(at))
	}
}

// Failed (5xx, timeouts, cancellations) frees the slot and changes
// nothing else; a failed probe is probed again.
func TestLaw_onFailed(t *testing.T) {
	w, at := pacedLaw(t, 100)
	before := *w
	s := w.start(at, 0)
	w.onFailed(s)
	if w.rate != before.rate || w.limit != before.limit || w.decreases != 0 || w.safe != before.safe {
		t.Errorf("rate %.1f limit %d decreases %d after a failure, want all unchanged", w.rate, w.limit, w.decreases)
	}
	w.needProbe = true
	p := w.start(w.tat, 0)
	if w.mayStart(w.tat.Add(time.Second), 1) {
		t.Fatal("a start while the probe is out")
	}
	w.onFailed(p)
	if !w.mayStart(w.tat.Add(time.Second), 0) {
		t.Error("no new probe after the probe failed")
	}
}

// A lower limit takes effect on the calls in flight: no call starts until
// they have drained below it.
func TestLaw_mayStart_limit(t *testing.T) {
	w, at := pacedLaw(t, 100)
	w.capLevel = 12
	w.fitLimit()
	later := at.Add(time.Second) // pacing allows
	for _, tt := range []struct {
		inFlight int
		want     bool
	}{{13, false}, {12, false}, {11, true}} {
		if got := w.mayStart(later, tt.inFlight); got != tt.want {
			t.Errorf("mayStart with %d in flight under limit %d = %v, want %v", tt.inFlight, w.limit, got, tt.want)
		}
	}
}

// A 429 that names the per-minute budget sets the rate just under it,
// the tighter of requests and input tokens, and no stair climbs past it
// for namedHoldLags answer lags with no 429, after which the law looks
// above it; a 429 below it leaves the law's own reading in charge.
func TestLaw_namedQuota(t *testing.T) {
	tests := []struct {
		name     string
		rate     float64 // paced when the 429 comes
		rpm, tpm int64
		want     float64 // the rate after the 429
		most     float64 // the most the rate may climb to afterwards
	}{
		{"requests per minute", 200, 6000, 0, 100 * namedShare, 100 * namedShare},
		{"tokens per minute, 100 tokens a call", 200, 0, 600000, 100 * namedShare, 100 * namedShare},
		{"the tighter binds", 200, 6000, 300000, 50 * namedShare, 50 * namedShare},
		{"refused below the budget: the law's reading", 80, 6000, 0, 80 * eventBackoff, 100 * namedShare},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := pacedLaw(t, tt.rate)
			w.eventRate = tt.rate // not the first event
			s := w.start(at, 0)
			at = at.Add(20 * time.Millisecond)
			w.nameQuota(tt.rpm, tt.tpm)
			w.onRateLimited(at, s, 7300*time.Microsecond, 1)
			if !near(w.rate, tt.want) {
				t.Fatalf("rate %.2f after the 429, want %.2f", w.rate, tt.want)
			}
			highest := w.rate
			for i := 0; w.held <= namedHoldLags && i < 1000; i++ {
				at, _ = drive(w, at, w.answerLag())
				if w.held <= namedHoldLags {
					highest = max(highest, w.rate)
				}
			}
			if highest > tt.most*(1+1e-9) || highest < tt.want {
				t.Errorf("the rate climbed to %.2f within %d answer lags; want at most %.2f", highest, namedHoldLags, tt.most)
			}
			// Held at the budget that long with no 429, the law looks
			// above it: the quota may have grown since it was named.
			for range 4 {
				at, _ = drive(w, at, w.answerLag())
			}
			if w.rate <= tt.most*(1+1e-9) {
				t.Errorf("the rate stays at %.2f after %d answer lags with no 429; want a look above %.2f", w.rate, w.held, tt.most)
			}
		})
	}
}

// refuseNamed starts a call at at and has it refused 20 ms later by a 429
// naming rpm requests a minute, with an exact retry delay; it returns the
// time of the refusal.
func refuseNamed(w *law, at time.Time, rpm int64) time.Time {
	s := w.start(at, 0)
	at = at.Add(20 * time.Millisecond)
	w.nameQuota(rpm, 0)
	w.onRateLimited(at, s, 7300*time.Microsecond, 1)
	return at
}

// A quota whose 429s named different budgets is live: held at the last
// one named, the law looks above it after namedMovedHoldLags answer lags,
// not namedHoldLags (a quota named while it was down comes back up).
func TestLaw_namedQuotaMoved(t *testing.T) {
	w, at := pacedLaw(t, 200)
	w.eventRate = 200 // not the first event
	refuse := func(rpm int64) { at = refuseNamed(w, at, rpm) }
	refuse(12000) // 200 a second
	at, _ = drive(w, at, 2*w.answerLag())
	refuse(6000) // the quota halved: 100 a second
	if !near(w.rate, 100*namedShare) {
		t.Fatalf("rate %.2f after the second 429, want %.2f", w.rate, 100*namedShare)
	}
	for range 2 * (namedMovedHoldLags + 2) {
		at, _ = drive(w, at, w.answerLag())
	}
	if w.rate <= 100*namedShare*(1+1e-9) {
		t.Errorf("the rate stays at %.2f after %d answer lags with no 429; want a look above the budget last named", w.rate, w.held)
	}
}

// A live quota (429s named different budgets) that fell keeps the rate
// it admitted before as the peak. The first look above the budget last
// named is a plain stair (refused, it costs one 429 that names the budget
// again); once that stair holds, the quota has come back, and the rate
// goes to the peak at once.
func TestLaw_namedQuotaReturns(t *testing.T) {
	w, at := pacedLaw(t, 200)
	w.eventRate = 200 // not the first event
	refuse := func(rpm int64) { at = refuseNamed(w, at, rpm) }
	refuse(12000) // 200 a second
	at, _ = drive(w, at, 2*w.answerLag())
	refuse(6000) // the quota halved: 100 a second
	low, peak := 100*namedShare, 200*namedShare
	if !near(w.rate, low) || !near(w.peak, peak) {
		t.Fatalf("rate %.2f, peak %.2f after the budget halved; want %.2f and %.2f", w.rate, w.peak, low, peak)
	}
	var rates []float64 // each rate the law moves to, lag after lag
	for range 4 * (namedMovedHoldLags + 2) {
		at, _ = drive(w, at, w.answerLag()/2)
		if r := w.rate; !near(r, low) && (len(rates) == 0 || !near(r, rates[len(rates)-1])) {
			rates = append(rates, r)
		}
	}
	if want := []float64{low * probeStair, peak}; len(rates) < 2 || !near(rates[0], want[0]) || !near(rates[1], want[1]) {
		t.Errorf("rates after the budget halved %.2f; want %.2f first", rates, want)
	}
}

// Below the rate a live quota admitted before it fell, a look above the
// budget named that is refused (the 429 names it again) is followed by
// the next a lag later, not after namedMovedHoldLags doubled: while the
// quota is down each look costs one 429, and it often comes back.
func TestLaw_namedQuotaLooksBelowPeak(t *testing.T) {
	w, at := pacedLaw(t, 200)
	w.eventRate = 200 // not the first event
	refuse := func(rpm int64) { at = refuseNamed(w, at, rpm) }
	refuse(12000)
	at, _ = drive(w, at, 2*w.answerLag())
	refuse(6000)
	low := 100 * namedShare
	looks := 0
	lastLook := at
	for range 40 {
		at, _ = drive(w, at, w.answerLag()/4)
		if w.rate > low*(1+1e-9) {
			if looks > 0 && at.Sub(lastLook) > 2*w.answerLag() {
				t.Fatalf("look %d came %v after the last was refused; want within two answer lags (%v)", looks+1, at.Sub(lastLook), 2*w.answerLag())
			}
			looks++
			refuse(6000) // still down
			lastLook = at
		}
	}
	if looks < 3 {
		t.Errorf("%d looks above the budget in %v; want at least 3", looks, 10*w.answerLag())
	}
}

// Instants an exact retry delay says the quota opens at, one per event:
// on one lattice they give a fixed window's length; off it, nothing. Nor
// does a lattice spaced more than four times the longest delay seen: a
// fixed window's delays run up to its length, and a sliding log's
// instants fall on some lattice now and then by chance.
func TestLaw_resetAt(t *testing.T) {
	tests := []struct {
		name    string
		longest time.Duration   // the longest retry delay seen
		resets  []time.Duration // from simEpoch, one per event
		want    time.Duration   // the window read
	}{
		{"a boundary every 2 s", time.Second, []time.Duration{4 * time.Second, 6 * time.Second, 8 * time.Second}, 2 * time.Second},
		{"a window skipped", time.Second, []time.Duration{4 * time.Second, 6 * time.Second, 10 * time.Second}, 2 * time.Second},
		{"delays a quarter of the window", 500 * time.Millisecond, []time.Duration{4 * time.Second, 6 * time.Second, 8 * time.Second}, 2 * time.Second},
		{"two instants say nothing", time.Second, []time.Duration{4 * time.Second, 6 * time.Second}, time.Second},
		{"a sliding log's, off any lattice", time.Second, []time.Duration{4100 * time.Millisecond, 6300 * time.Millisecond, 9700 * time.Millisecond}, time.Second},
		{"a sliding log's, on a lattice by chance", 100 * time.Millisecond, []time.Duration{4 * time.Second, 9300 * time.Millisecond, 19900 * time.Millisecond}, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestLaw(Config{})
			w.window, w.longestDelay = tt.longest, tt.longest
			for _, d := range tt.resets {
				w.resetAt(simEpoch.Add(d))
			}
			if w.window != tt.want {
				t.Errorf("window %v, want %v", w.window, tt.want)
			}
		})
	}
}

// The window a lattice gave does not widen the next lattice's bound: a
// sliding log whose instants fell on a 2 s lattice once (four times its
// 500 ms delays) does not then read an 8 s one.
func TestLaw_resetAt_noRatchet(t *testing.T) {
	w := newTestLaw(Config{})
	w.window, w.longestDelay = 500*time.Millisecond, 500*time.Millisecond
	for _, d := range []time.Duration{4 * time.Second, 6 * time.Second, 8 * time.Second} {
		w.resetAt(simEpoch.Add(d))
	}
	if w.window != 2*time.Second {
		t.Fatalf("window %v after a 2 s lattice, want 2s", w.window)
	}
	for _, d := range []time.Duration{16 * time.Second, 24 * time.Second, 32 * time.Second} {
		w.resetAt(simEpoch.Add(d))
	}
	if w.window != 2*time.Second {
		t.Errorf("window %v after an 8 s lattice, want still 2s: over four times the longest delay seen", w.window)
	}
}

// A probe admitted after a backoff marks a spent quota open again: what
// it admitted since the last reopening is its budget over that span, and
// the rate goes just under it (never up). With no budget named, not over
// a span under half the longest retry delay given: two probes 7 s apart
// across a spent 30 s window read 2 calls a second where the quota
// grants 87.
func TestLaw_reopened(t *testing.T) {
	tests := []struct {
		name     string
		rate     float64
		admitted int           // calls admitted between the reopenings
		span     time.Duration // between them
		longest  time.Duration // the longest retry delay given
		rpm      int64         // the budget a 429 named
		want     float64
	}{
		{"a fixed window's budget", 200, 300, 2 * time.Second, 0, 0, 150 * eventBackoff},
		{"a fixed window's budget, its delays rounded up", 200, 300, 2 * time.Second, 3 * time.Second, 0, 150 * eventBackoff},
		{"already under it", 100, 300, 2 * time.Second, 0, 0, 100},
		{"too few calls to read", 200, 5, 2 * time.Second, 0, 0, 200},
		{"a span under half the longest delay", 87, 14, 7 * time.Second, 30 * time.Second, 0, 87},
		{"a span under half the longest delay, a budget named", 200, 300, 2 * time.Second, 30 * time.Second, 60000, 150 * eventBackoff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := pacedLaw(t, tt.rate)
			if tt.longest > 0 {
				w.window, w.longestDelay = tt.longest, tt.longest
			}
			w.namedRPM = tt.rpm
			w.reopened(at)
			for i := range tt.admitted {
				s := w.start(at.Add(time.Duration(i)*tt.span/time.Duration(tt.admitted)), 0)
				w.find(s).outcome = admitted
			}
			w.reopened(at.Add(tt.span))
			if !near(w.rate, tt.want) {
				t.Errorf("rate %.2f, want %.2f", w.rate, tt.want)
			}
		})
	}
}

// Slow start's burst spends a sliding window of 400 calls in 0.8 s, and
// its 429 rounds the delay to whole seconds: the window is read as long as
// that delay (3 s), the rate as 400 over it. A probe refused, then the
// next admitted 2.1 s after the first start, say the window is no longer
// than that: the window comes down to it and the rate up to just under
// what the burst was admitted at over it. Not when the delay read no
// longer a window, when the first probe was admitted (a token bucket's
// refill), on a later reopening, nor once a later 429 has bounded the
// rate; too few calls admitted lower only the window.
func TestLaw_reopenedAfterSlowStart(t *testing.T) {
	reopen := 2100 * time.Millisecond
	tests := []struct {
		name          string
		burst         int
		retryAfter    time.Duration
		backoffs      int  // 2: a probe was refused before this one
		bounded       bool // a 429 after slow start's
		reopenedEarly bool // the quota reopened once before
		wantWindow    time.Duration
		wantRaised    bool
	}{
		{"a rounded delay read the window long", 400, 3 * time.Second, 2, false, false, reopen, true},
		{"the delay read it no longer than the reopening", 400, 2 * time.Second, 2, false, false, 2 * time.Second, false},
		{"the first probe admitted", 400, 3 * time.Second, 1, false, false, 3 * time.Second, false},
		{"a later 429 bounded the rate", 400, 3 * time.Second, 2, true, false, 3 * time.Second, false},
		{"a later reopening", 400, 3 * time.Second, 2, false, true, 3 * time.Second, false},
		{"too few calls to read a rate", 8, 3 * time.Second, 2, false, false, reopen, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestLaw(Config{})
			at := simEpoch
			var starts []time.Time
			for i := range tt.burst {
				starts = append(starts, w.start(at.Add(time.Duration(i)*2*time.Millisecond), i%64))
			}
			for _, s := range starts {
				w.onSuccess(s.Add(rtt), s, 100, 64)
			}
			refusedAt := at.Add(800 * time.Millisecond)
			s := w.start(refusedAt, 64)
			w.onRateLimited(refusedAt.Add(rtt/5), s, tt.retryAfter, 64)
			before := w.rate
			if before <= 0 || w.window != tt.retryAfter {
				t.Fatalf("after slow start's 429: rate %.1f, window %v; want a rate, window %v", before, w.window, tt.retryAfter)
			}
			w.bounded = tt.bounded
			if tt.reopenedEarly {
				w.reopenedAt = refusedAt
			}
			w.gate, w.needProbe, w.probe, w.backoffs = time.Time{}, true, time.Time{}, tt.backoffs
			probe := w.start(at.Add(reopen), 0)
			w.onSuccess(probe.Add(rtt), probe, 100, 1)
			if w.window != tt.wantWindow {
				t.Errorf("window %v, want %v", w.window, tt.wantWindow)
			}
			want := before
			if tt.wantRaised {
				want = float64(tt.burst) / reopen.Seconds() * eventBackoff
			}
			if !near(w.rate, want) {
				t.Errorf("rate %.1f, want %.1f (%.1f before)", w.rate, want, before)
			}
		})
	}
}

// A 429 at the safe rate: if the quota admitted about that rate over the
// answer lag, the safe rate was a hair above the quota's and the law goes
// just under it; if it admitted far less, the quota fell.
func TestLaw_onRateLimited_atSafe(t *testing.T) {
	tests := []struct {
		name     string
		admitted bool // the calls driven over the lag were admitted
		wantSafe float64
	}{
		{"admitted about the safe rate: a hair above the quota", true, 100 * eventBackoff},
		{"admitted far less: the quota fell", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := pacedLaw(t, 100)
			w.bounded, w.eventRate = true, 100
			at, _ = drive(w, at, 2*w.answerLag())
			w.safe, w.rate, w.refused = 100, 100, 0
			outcome := refusedCall
			if tt.admitted {
				outcome = admitted // drive gave up the calls it left in flight
			}
			for i := range min(w.nSent, sentRing) {
				w.sent[i].outcome = outcome
			}
			s := w.start(at, 0)
			w.onRateLimited(at.Add(20*time.Millisecond), s, 7300*time.Microsecond, 1)
			if !near(w.safe, tt.wantSafe) {
				t.Errorf("safe %.2f after the 429, want %.2f", w.safe, tt.wantSafe)
			}
		})
	}
}

// The wait after uncertain 429s: a round trip, growing by half per one
// more since the last success, ±25% jitter, capped at 64 round trips.
func TestLaw_backoff(t *testing.T) {
	tests := []struct {
		name     string
		backoffs int
		want     time.Duration // before jitter
	}{
		{"the first: a round trip", 0, rtt},
		{"the second: half more", 1, rtt * 3 / 2},
		{"the fourth", 3, rtt * 27 / 8},
		{"capped", 40, backoffMaxRoundTrips * rtt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := pacedLaw(t, 100)
			for range 20 {
				w.backoffs = tt.backoffs
				d := w.backoff()
				if lo, hi := time.Duration(0.75*float64(tt.want)), time.Duration(1.25*float64(tt.want)); d < lo || d > hi {
					t.Fatalf("backoff %v, want within [%v, %v]", d, lo, hi)
				}
			}
		})
	}
}

// After the quota fell, the law remembers the safe rate it had (peak): a
// quota that fell often comes back, so the first look above the new safe
// rate comes after one answer lag, not two, and climbs in stairs of 20%,
// never past the peak. A look refused there (calm) waits as usual.
func TestLaw_climbBackToPeak(t *testing.T) {
	tests := []struct {
		name     string
		peak     float64
		calm     int
		bare     bool // the last 429 gave no exact retry delay
		lags     int  // answer lags driven
		wantRate float64
	}{
		{"no fall: the safe rate is held two lags", 0, 0, false, 1, 50},
		{"below the peak: a 20% stair after one lag", 100, 0, false, 1, 50 * (1 + (probeStair-1)*4)},
		{"the stair stops at the peak", 55, 0, false, 1, 55},
		{"a look refused below the peak: the usual hold", 100, 1, false, 2, 50},
		{"a look refused below the peak, bare 429s: one lag more", 100, 1, true, 2, 50 * (1 + (probeStair-1)*4)},
		{"looks refused below the peak, bare 429s: no longer than that", 100, 3, true, 2, 50 * (1 + (probeStair-1)*4)},
		{"bare 429s with no fall: the usual hold", 0, 1, true, 2, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := pacedLaw(t, 50)
			w.safe, w.refused, w.eventRate, w.bounded = 50, 51, 50, true
			w.peak, w.calm, w.bareEvent = tt.peak, tt.calm, tt.bare
			w.probeFrom = at
			drive(w, at, time.Duration(tt.lags)*w.answerLag()+rtt)
			if !near(w.rate, tt.wantRate) {
				t.Errorf("rate %.2f %d lags on, want %.2f", w.rate, tt.lags, tt.wantRate)
			}
		})
	}
	t.Run("a fall remembers the safe rate", func(t *testing.T) {
		w, at := pacedLaw(t, 100)
		w.safe, w.eventRate = 100, 100
		s := w.start(at, 0)
		w.onRateLimited(at.Add(20*time.Millisecond), s, 7300*time.Microsecond, 1)
		if w.safe != 0 || !near(w.peak, 100) {
			t.Errorf("safe %.2f peak %.2f after a 429 at the safe rate, want 0 and 100", w.safe, w.peak)
		}
	})
	t.Run("a fall remembers the rate refused above the safe one", func(t *testing.T) {
		w, at := pacedLaw(t, 100)
		w.safe, w.refused, w.eventRate, w.bounded = 100, 110, 100, true
		s := w.start(at, 0)
		w.onRateLimited(at.Add(20*time.Millisecond), s, 7300*time.Microsecond, 1)
		if !near(w.peak, 100) || !near(w.peakBound, 110) {
			t.Errorf("peak %.2f, bound %.2f after a 429 at the safe rate, want 100 and 110", w.peak, w.peakBound)
		}
	})
	t.Run("back at the peak, the rate bisects below the bound", func(t *testing.T) {
		w, at := pacedLaw(t, 50)
		w.safe, w.refused, w.eventRate, w.bounded = 50, 0, 50, true
		w.peak, w.peakBound, w.stairs = 55, 60, 3 // three stairs climbed back
		w.probeFrom = at
		at, _ = drive(w, at, w.answerLag()+rtt)
		if !near(w.rate, 55) || !near(w.refused, 60) || w.peak != 0 {
			t.Fatalf("rate %.2f, refused %.2f, peak %.2f a lag on; want 55, 60 and none", w.rate, w.refused, w.peak)
		}
		drive(w, at, w.answerLag()+rtt)
		if !near(w.rate, 57.5) || !near(w.refused, 60) {
			t.Errorf("rate %.2f, refused %.2f a lag at the peak; want 57.5, halfway to the bound of 60, not a stair (57.75, or 77 in the climb's stairs)", w.rate, w.refused)
		}
	})
}

// Input tokens are averaged over every call so far, then slowly (they
// vary call to call), and a TPM budget is paced with room for their
// spread: one standard deviation of the mean of an answer lag's calls.
func TestLaw_namedTokens(t *testing.T) {
	tests := []struct {
		name     string
		tokens   []int64 // billed by the successes, in turn
		wantMean float64
		wantRate float64 // for a named 600,000 tokens a minute
	}{
		{"all alike: no room needed", []int64{100, 100, 100, 100}, 100, 100},
		{"the plain mean while few", []int64{50, 150, 50, 150}, 100, 0},
		{"one large call moves the mean by its share", []int64{100, 100, 100, 500}, 200, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestLaw(Config{Start: 10})
			at := simEpoch
			for _, n := range tt.tokens {
				s := w.start(at, 0)
				at = at.Add(rtt)
				w.onSuccess(at, s, n, 1)
			}
			if !near(w.avgTokens, tt.wantMean) {
				t.Errorf("mean tokens %.2f, want %.2f", w.avgTokens, tt.wantMean)
			}
			w.nameQuota(0, 600000)
			got := w.namedRate()
			switch {
			case tt.wantRate > 0 && !near(got, tt.wantRate):
				t.Errorf("named rate %.2f, want %.2f", got, tt.wantRate)
			case tt.wantRate == 0 && got >= 600000/60/tt.wantMean:
				t.Errorf("named rate %.2f, want below %.2f (room for the spread)", got, 600000/60/tt.wantMean)
			}
		})
	}
}

// Slow start's first 429, whose exact delay says the window its calls
// spent opens again a window after the first start, replays that window:
// the k-th call after it reopens waits for the window to pass over the
// k-th call the quota admitted; a refused call took no slot and is
// skipped; the replay ends with the window's calls.
func TestLaw_replaysASpentWindow(t *testing.T) {
	w := newTestLaw(Config{})
	at := func(d time.Duration) time.Time { return simEpoch.Add(d) }
	var starts []time.Time
	for i := range 4 {
		starts = append(starts, w.start(at(time.Duration(i)*time.Second), i))
	}
	for i, s := range starts[:3] {
		w.onSuccess(s.Add(500*time.Millisecond), s, 100, 4-i)
	}
	refusedAt := at(3100 * time.Millisecond)
	w.onRateLimited(refusedAt, starts[3], at(time.Minute).Sub(refusedAt), 1)

	want := []time.Duration{time.Minute, time.Minute + time.Second, time.Minute + 2*time.Second}
	for i, d := range want {
		if got := w.replayHold(); !got.Equal(at(d)) {
			t.Fatalf("call %d after the window reopens: replay holds it until %v, want %v", i, got.Sub(simEpoch), d)
		}
		if h := w.hold(at(d)); h.Before(at(d)) {
			t.Fatalf("call %d: hold %v, before the replay's %v", i, h.Sub(simEpoch), d)
		}
		s := w.start(at(d), 0)
		w.onSuccess(s.Add(500*time.Millisecond), s, 100, 1)
	}
	if got := w.replayHold(); !got.IsZero() {
		t.Errorf("after the window's admitted calls: replay holds until %v, want no replay (the refused call took no slot)", got.Sub(simEpoch))
	}
}

// A first 429 whose delay is shorter than slow start lasted (a quota
// spent partway through its window, a token bucket) starts no replay.
func TestLaw_noReplayForAShortDelay(t *testing.T) {
	w := newTestLaw(Config{})
	s1 := w.start(simEpoch, 0)
	w.onSuccess(simEpoch.Add(500*time.Millisecond), s1, 100, 1)
	s2 := w.start(simEpoch.Add(2*time.Second), 0)
	w.onRateLimited(simEpoch.Add(2100*time.Millisecond), s2, time.Second, 1)
	if got := w.replayHold(); !got.IsZero() {
		t.Errorf("replay holds until %v, want none", got.Sub(simEpoch))
	}
}
