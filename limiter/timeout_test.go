package limiter

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestLaw_onTimedOut: timeouts cut the calls in flight only as a wave, once
// per wave, and never in a fixed law.
func TestLaw_onTimedOut(t *testing.T) {
	type timeout struct {
		after    time.Duration // from simEpoch
		started  time.Duration // from simEpoch
		inFlight int
	}
	const deadline = 2 * time.Second
	wave := func(n, inFlight int, at time.Duration) []timeout {
		var ts []timeout
		for i := range n {
			d := at + time.Duration(i)*time.Millisecond
			ts = append(ts, timeout{d, d - deadline, inFlight - i})
		}
		return ts
	}
	for _, tc := range []struct {
		name      string
		cfg       Config
		timeouts  []timeout
		wantLimit int // 0: unchanged
		wantCuts  int64
	}{
		{"a lone timeout is a tail's outlier", Config{Start: 200}, wave(1, 200, 5*time.Second), 0, 0},
		{"fewer than 10% of the calls in flight", Config{Start: 200}, wave(18, 200, 5*time.Second), 0, 0},
		{"a wave caps at half the calls in flight", Config{Start: 200}, wave(19, 200, 5*time.Second), 91, 1},
		{"three make a wave among few calls", Config{Start: 20}, wave(3, 20, 5*time.Second), 9, 1},
		{"timeouts a span apart are no wave", Config{Start: 20}, []timeout{{5 * time.Second, 3 * time.Second, 20}, {7500 * time.Millisecond, 5500 * time.Millisecond, 20}, {10 * time.Second, 8 * time.Second, 20}}, 0, 0},
		{"the rest of the wave cuts no further", Config{Start: 200}, append(wave(19, 200, 5*time.Second), wave(100, 181, 5*time.Second+19*time.Millisecond)...), 91, 1},
		{"a call sent after the cut that times out again cuts again", Config{Start: 200},
			append(wave(19, 200, 5*time.Second), wave(10, 95, 5*time.Second+deadline+time.Second)...), 43, 2},
		{"a fixed limit stays", Config{Start: 200, Fixed: true}, wave(50, 200, 5*time.Second), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestLaw(tc.cfg)
			before := w.limit
			for _, to := range tc.timeouts {
				w.onTimedOut(simEpoch.Add(to.after), simEpoch.Add(to.started), to.inFlight)
			}
			want := tc.wantLimit
			if want == 0 {
				want = before
			}
			if w.limit != want || w.decreases != tc.wantCuts {
				t.Errorf("limit %d after %d cuts, want %d after %d (from %d)", w.limit, w.decreases, want, tc.wantCuts, before)
			}
			if tc.wantCuts > 0 && w.slowStart {
				t.Error("still in slow start after a wave of timeouts")
			}
		})
	}
}

// TestLaw_queueingServerTimeouts drives the law in virtual time against a
// server with no quota that serves a fixed number of calls a second, so
// that each call in flight adds to every call's latency, with a client
// timeout after which the call is retried (and, on the real API, paid
// again). Without a refusal a law that reads nothing from timeouts climbs
// until nearly every call times out; this one caps the calls in flight
// after the first wave (blind, it answered 391 items in ten minutes and
// timed out 58,921 calls; reading them, all 3,000 in 65 s).
func TestLaw_queueingServerTimeouts(t *testing.T) {
	const (
		items    = 3000
		base     = 20 * time.Millisecond
		perCall  = 20 * time.Millisecond // the server serves 50 calls a second
		deadline = 2 * time.Second
	)
	// Items answered and calls timed out in the first ten minutes; the
	// perfect client needs one (50 calls a second, each in time).
	run := func(readTimeouts bool) (answered, timeouts int, took time.Duration) {
		latency := func(inFlight int) time.Duration { return base + perCall*time.Duration(inFlight) }
		return driveTimeouts(newTestLaw(Config{Ceiling: 5000}), latency, deadline, items, 10*time.Minute, readTimeouts)
	}
	blindAnswered, blind, _ := run(false)
	answered, reading, readingTook := run(true)
	t.Logf("reading timeouts: %d answered, %d timed out, in %s; blind to them: %d answered, %d timed out in 10 min", answered, reading, readingTook, blindAnswered, blind)
	if blind < items/2 {
		t.Fatalf("the server times out only %d calls of a law blind to timeouts: the scenario tests nothing", blind)
	}
	// The first wave is paid twice: the calls slow start sent before the
	// first timeout came back (328 when this was written).
	if answered < items || reading > items/8 {
		t.Errorf("%d of %d items answered, %d timed-out calls (each paid twice), want all and at most %d", answered, items, reading, items/8)
	}
	// The perfect client sends 50 calls a second, each answered in time.
	if perfect := time.Duration(items) * perCall; readingTook > 2*perfect {
		t.Errorf("took %s, more than twice the %s the server needs", readingTook, perfect)
	}
}

// TestLaw_heavyTailTimeouts drives the law in virtual time against a
// server with no quota whose answers do not slow as the calls grow but
// have a heavy tail (a thinking model: lognormal, median 10 s), so that a
// few percent of the calls run out the 60 s timeout however few are in
// flight. Cutting the calls in flight does not make those answers come
// sooner: reading their timeouts must cost next to no throughput. (Read
// against the calls in flight, the tail's timeouts made a wave every few
// minutes and halved the limit each time, to 3 calls: a tenth of the
// items in the hour.)
func TestLaw_heavyTailTimeouts(t *testing.T) {
	const (
		median   = 10 * time.Second
		deadline = 60 * time.Second
		hour     = time.Hour
	)
	run := func(ceiling int, sigma float64, readTimeouts bool) (answered int) {
		rng := rand.New(rand.NewPCG(1, 7))
		latency := func(int) time.Duration { return time.Duration(float64(median) * math.Exp(sigma*rng.NormFloat64())) }
		answered, _, _ = driveTimeouts(newTestLaw(Config{Ceiling: ceiling}), latency, deadline, 0, hour, readTimeouts)
		return answered
	}
	for _, tc := range []struct {
		ceiling int
		sigma   float64 // 0.8: 1.3% of the calls time out; 1.0: 3.7%
	}{{200, 0.8}, {64, 1.0}, {200, 1.0}} {
		blind, reading := run(tc.ceiling, tc.sigma, false), run(tc.ceiling, tc.sigma, true)
		if float64(reading) < 0.9*float64(blind) {
			t.Errorf("ceiling %d, sigma %.1f: %d items answered in an hour reading timeouts, %d blind to them", tc.ceiling, tc.sigma, reading, blind)
		}
	}
}

// driveTimeouts runs calls through w in virtual time from simEpoch until
// items are answered (0: no end) or until has passed: a call starts
// whenever the law lets one, its latency drawn by latency from the calls
// then in flight; one that takes deadline or more times out then, told to
// the law as a timeout (readTimeouts) or as any failure, and is tried
// again. It returns the items answered, the calls timed out and the time
// taken.
func driveTimeouts(w *law, latency func(inFlight int) time.Duration, deadline time.Duration, items int, until time.Duration,
	readTimeouts bool) (answered, timeouts int, took time.Duration) {
	type call struct {
		start, end time.Time
		ok         bool
	}
	var flying []call
	at := simEpoch
	for (items == 0 || answered < items) && at.Sub(simEpoch) < until {
		for (items == 0 || items-answered > len(flying)) && w.mayStart(at, len(flying)) {
			s := w.start(at, len(flying))
			lat := latency(len(flying))
			c := call{start: s, end: s.Add(min(lat, deadline)), ok: lat < deadline}
			i, _ := slices.BinarySearchFunc(flying, c, func(a, b call) int { return a.end.Compare(b.end) })
			flying = slices.Insert(flying, i, c)
		}
		next := at.Add(time.Hour)
		if len(flying) > 0 {
			next = flying[0].end
		}
		if h := w.hold(at); h.After(at) && h.Before(next) {
			next = h
		}
		at = next
		for len(flying) > 0 && !flying[0].end.After(at) {
			c := flying[0]
			flying = flying[1:]
			switch {
			case c.ok:
				w.onSuccess(at, c.start, 100, len(flying)+1)
				answered++
			case readTimeouts:
				w.onTimedOut(at, c.start, len(flying)+1)
				timeouts++
			default:
				w.onFailed(c.start)
				timeouts++
			}
		}
	}
	return answered, timeouts, at.Sub(simEpoch)
}

// TestTimeoutWaves_TimedOut: the detector alone, as a fleet worker uses
// it: a wave is 3 timeouts and 10% of the calls that ended within one
// deadline's span (estimated from the round trip given), calls started
// by since are ignored, and a wave says to cap at half the calls then in
// flight and starts the count afresh.
func TestTimeoutWaves_TimedOut(t *testing.T) {
	const deadline = 2 * time.Second
	at := func(d time.Duration) time.Time { return simEpoch.Add(d) }
	type timeout struct {
		after    time.Duration // when it came back, from simEpoch
		inFlight int
	}
	burst := func(n, inFlight int) []timeout {
		var ts []timeout
		for i := range n {
			ts = append(ts, timeout{10*time.Second + time.Duration(i)*time.Millisecond, inFlight - i})
		}
		return ts
	}
	for _, tc := range []struct {
		name      string
		since     time.Duration // from simEpoch; 0: no cut yet
		roundTrip time.Duration
		timeouts  []timeout
		want      []int // the level of each wave, in order
	}{
		{"a lone timeout", 0, 0, burst(1, 20), nil},
		{"three among few calls", 0, 0, burst(3, 20), []int{9}},
		{"fewer than 10% of the calls in flight", 0, 0, burst(18, 200), nil},
		{"10% of the calls in flight", 0, 0, burst(19, 200), []int{91}},
		{"answers ten times a span: 10% of ten times the calls", 0, deadline / 10, burst(19, 200), nil},
		{"a slow round trip counts the calls in flight once", 0, 3 * deadline, burst(19, 200), []int{91}},
		{"counted afresh after a wave", 0, 0, burst(6, 20), []int{9, 7}},
		{"timeouts a span apart", 0, 0, []timeout{{10 * time.Second, 20}, {12500 * time.Millisecond, 20}, {15 * time.Second, 20}}, nil},
		{"calls started by the last cut", 9 * time.Second, 0, burst(10, 20), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d TimeoutWaves
			var since time.Time
			if tc.since > 0 {
				since = at(tc.since)
			}
			var got []int
			for _, to := range tc.timeouts {
				if wave, level := d.TimedOut(at(to.after), at(to.after-deadline), since, to.inFlight, tc.roundTrip); wave {
					got = append(got, level)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("waves at levels %v, want %v", got, tc.want)
			}
		})
	}
}
