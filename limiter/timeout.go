package limiter

import (
	"math"
	"time"
)

// Timeouts as congestion. A quota refuses with a 429, an overloaded
// server with a 503; a server that simply has more calls than it can
// serve (a self-hosted endpoint, a starved one, a model slowed by load)
// says nothing and answers later and later as the calls in flight grow.
// With no refusal the law would climb to its ceiling, thousands of calls,
// until answers come after the client's timeout: each such call was
// served and may be billed, and its retry is a second call for the item
// (a run of 3,000 items made 8,353 calls so, against a simulator starved
// of CPU). So a wave of calls that ran out their own deadline is read as
// a cap on calls in flight at half the calls then in flight, as a cap's
// refusal is (see onEvent), and the cap grows back as after one (see
// onSuccess): once 1/lookShare calls answered since pay for a look, a
// call per capGrowRoundTrips round trips.
// A lone timeout (a heavy tail's outlier, a dropped connection) is not a
// wave: a timeout counts only beside others within one timeout's span,
// and only as a share of the calls that ended in it (a thinking model's
// tail times out a few percent of its calls however few are in flight,
// and a cut would only halve the throughput, again and again).
// TimeoutWaves holds that rule for this law and for each worker of a
// PostgreSQL fleet (store/postgres.FleetLimiter), one copy of it.
const (
	// timeoutWaveMin is the fewest timeouts within a span that make a
	// wave; timeoutWaveShare, the least share of the calls that ended
	// within it (see endedWithin). At 5% a heavy tail that timed out
	// 2 to 4% of the calls still made waves at random; a server that
	// slows with load times out most calls once it does.
	timeoutWaveMin   = 3
	timeoutWaveShare = 0.1
)

// TimeoutWaves tells a wave of timeouts (a server that answers later as
// the calls in flight grow, and will answer later still if they grow
// more) from a tail's lone ones. A wave is at least 3 calls that ran out
// their own deadline within one deadline's span of each other, and at
// least 10% of the calls that ended within that span, counting only
// calls started after the last cut (those started before it belong to
// the wave the cut answered: one cut per wave). The caller answers a
// wave by capping its calls in flight at the level TimedOut returns.
//
// It is pure: no clock, no lock; every time is passed in, and a caller
// that shares it between goroutines guards it. The zero value is ready.
type TimeoutWaves struct {
	recent []time.Time // when the timeouts of the current span came back
}

// TimedOut folds in the call started at started that ran out its own
// deadline at now, with inFlight calls (this one included) holding
// slots; since is the caller's last cut (zero: none), roundTrip the
// calls' usual round trip (0: none measured yet). It reports whether
// this timeout completes a wave, and then the calls in flight to cap at:
// half of inFlight, which the caller bounds by its floor. After a wave
// the count starts afresh; the caller moves since past the calls already
// started.
func (d *TimeoutWaves) TimedOut(now, started, since time.Time, inFlight int, roundTrip time.Duration) (wave bool, level int) {
	if !started.After(since) {
		// Sent before the last cut: of the wave already answered (one
		// cut per wave, as one decrease per congestion event).
		return false, 0
	}
	span := now.Sub(started)
	recent := d.recent[:0]
	for _, at := range d.recent {
		if now.Sub(at) < span {
			recent = append(recent, at)
		}
	}
	d.recent = append(recent, now)
	if len(d.recent) < max(timeoutWaveMin, int(math.Ceil(timeoutWaveShare*endedWithin(span, inFlight, roundTrip)))) {
		return false, 0 // not a wave (yet)
	}
	d.recent = d.recent[:0]
	return true, inFlight / 2
}

// endedWithin is about how many calls ended within span with inFlight
// calls holding slots (Little's law): inFlight once a round trip, as
// many times as answers came back within span. A server that slows as
// the calls grow answers near the deadline, and the share of the calls
// in flight is the share of those that ended; a heavy tail (thinking
// models) times out its slowest calls while the rest come back many
// times a span, and their timeouts count against all of those.
func endedWithin(span time.Duration, inFlight int, roundTrip time.Duration) float64 {
	if roundTrip <= 0 || span <= 0 {
		return float64(inFlight)
	}
	return float64(inFlight) * max(1, float64(span)/float64(roundTrip))
}

// onTimedOut folds in, at t, the call started at started that ran out its
// own deadline, with inFlight calls (this one included) holding slots.
func (w *law) onTimedOut(t, started time.Time, inFlight int) {
	w.onFailed(started)
	if w.cfg.Fixed {
		return
	}
	var roundTrip time.Duration
	if w.hasLatency {
		roundTrip = w.limitLatency()
	}
	wave, level := w.timeouts.TimedOut(t, started, w.decrease, inFlight, roundTrip)
	if !wave {
		return
	}
	w.decreases++
	w.decrease = t
	if w.lastStart.After(t) {
		w.decrease = w.lastStart
	}
	w.admittedSince = 0
	w.slowStart = false
	capLevel := float64(max(w.cfg.Floor, level))
	if w.capLevel == 0 || capLevel < w.capLevel {
		w.capLevel = capLevel
	}
	w.capEdge = w.capLevel
	w.setLimit(min(w.limit, int(w.capLevel)))
	w.fitLimit()
}
