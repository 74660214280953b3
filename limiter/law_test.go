package limiter

import (
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
	slowStart := cfg.Start == 0
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
		want      int
	}{
		{"one more per success", Config{}, 10, 18},
		{"up to the ceiling, not a third of it", Config{}, 100, DefaultCeiling},
		{"by Increase", Config{Increase: 2}, 5, 18},
		{"a given start paces the rate it carries", Config{Start: 8}, 5, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestLaw(tt.cfg)
			at := simEpoch
			for range tt.successes {
				s := w.start(at, 0)
				at = at.Add(rtt)
				w.onSuccess(at, s, 100, 1)
			}
			if w.limit != tt.want {
				t.Errorf("limit %d after %d successes, want %d", w.limit, tt.successes, tt.want)
			}
			if w.slowStart != (tt.cfg.Start == 0) {
				t.Errorf("slowStart = %v", w.slowStart)
			}
		})
	}
}

// The first 429 ends slow start: the law paces just under the rate it
// was sending, and learns no bound from it (slow start sends in bursts).
func TestLaw_onRateLimited_first(t *testing.T) {
	w := newTestLaw(Config{})
	at, _ := drive(w, simEpoch, 5*rtt) // slow start, unpaced
	s := w.start(at, 0)
	sent := w.sentRate(at)
	w.onRateLimited(at, s, 10500*time.Microsecond, 1)
	if w.slowStart || w.decreases != 1 {
		t.Fatalf("slowStart %v, decreases %d after the first 429", w.slowStart, w.decreases)
	}
	if !near(w.rate, sent*eventBackoff) || w.refused != 0 {
		t.Errorf("rate %.1f, refused %.1f; want %.1f (the rate sent, less 3%%) and no bound", w.rate, w.refused, sent*eventBackoff)
	}
	if want := at.Add(10500 * time.Microsecond); !w.gate.Equal(want) {
		t.Errorf("gate %v, want now + the exact delay", w.gate.Sub(simEpoch))
	}
}

// After an event, a safe rate held bisects toward the refused one; once
// they are close the rate stays safe, then climbs in stairs.
func TestLaw_bisection(t *testing.T) {
	tests := []struct {
		name                string
		safe, refused, rate float64
		held                int // lags held at the safe rate since the 429
		wantRate, wantSafe  float64
		wantRefused         bool // a refused rate still bounds the quota
	}{
		{"halfway to the refused rate", 80, 100, 90, 0, 95, 90, true},
		{"close enough: stay safe", 97.5, 100, 98, 0, 98, 98, true},
		{"long safe: look for more", 97.5, 100, 98, reprobeLags, 98 * probeStair, 98, false},
		{"no bound: a stair up", 50, 0, 50, 0, 50 * probeStair, 50, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := pacedLaw(t, tt.rate)
			w.safe, w.refused, w.eventRate, w.held = tt.safe, tt.refused, tt.rate, tt.held
			w.probeFrom = at
			drive(w, at, w.answerLag()+rtt)
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
			w.lastEvent = at.Add(-time.Hour) // not saturated
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
	w.lastEvent = at.Add(-time.Hour)
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

// A cap on calls in progress refuses at the same level event after event,
// or well above what the rate carries; a rate at any level.
func TestLaw_capped(t *testing.T) {
	tests := []struct {
		name     string
		capLevel float64
		limit    int
		last     [2]int
		others   int
		want     bool
	}{
		// rate 100/s × rtt carries 10 calls in flight on average.
		{"same level thrice, above the average", 0, 15, [2]int{12, 12}, 12, true},
		{"same level, below the average", 0, 15, [2]int{9, 9}, 9, false},
		{"varying levels", 0, 15, [2]int{10, 11}, 11, false},
		{"well above the average", 0, 15, [2]int{0, 0}, 12, true},
		{"at the cap that binds", 12, 12, [2]int{0, 0}, 11, true},
		{"below the cap", 12, 12, [2]int{0, 0}, 9, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := pacedLaw(t, 100)
			w.capLevel, w.limit, w.lastOthers = tt.capLevel, tt.limit, tt.last
			if got := w.capped(tt.others); got != tt.want {
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

func TestLaw_learnedStart(t *testing.T) {
	w := newTestLaw(Config{Start: 30})
	s := w.start(simEpoch, 0)
	w.onSuccess(simEpoch.Add(200*time.Millisecond), s, 100, 1)
	if want := 30 / 0.2 / rateHeadroom; !near(w.rate, want) || w.limit != 30 {
		t.Errorf("rate %.1f limit %d, want %.1f and 30: the start learned is the limit the rate carries", w.rate, w.limit, want)
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
