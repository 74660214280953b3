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
const (
	// timeoutWaveMin is the fewest timeouts within a span that make a
	// wave; timeoutWaveShare, the least share of the calls that ended
	// within it (see endedWithin). At 5% a heavy tail that timed out
	// 2 to 4% of the calls still made waves at random; a server that
	// slows with load times out most calls once it does.
	timeoutWaveMin   = 3
	timeoutWaveShare = 0.1
)

// onTimedOut folds in, at t, the call started at started that ran out its
// own deadline, with inFlight calls (this one included) holding slots.
func (w *law) onTimedOut(t, started time.Time, inFlight int) {
	w.onFailed(started)
	if w.cfg.Fixed {
		return
	}
	if !started.After(w.decrease) {
		// Sent before the last cut: of the wave already answered (one
		// cut per wave, as one decrease per congestion event).
		return
	}
	span := t.Sub(started)
	recent := w.timedOut[:0]
	for _, at := range w.timedOut {
		if t.Sub(at) < span {
			recent = append(recent, at)
		}
	}
	w.timedOut = append(recent, t)
	if len(w.timedOut) < max(timeoutWaveMin, int(math.Ceil(timeoutWaveShare*w.endedWithin(span, inFlight)))) {
		return // not a wave (yet)
	}
	w.timedOut = w.timedOut[:0]
	w.decreases++
	w.decrease = t
	if w.lastStart.After(t) {
		w.decrease = w.lastStart
	}
	w.admittedSince = 0
	w.slowStart = false
	level := float64(max(w.cfg.Floor, inFlight/2))
	if w.capLevel == 0 || level < w.capLevel {
		w.capLevel = level
	}
	w.capEdge = w.capLevel
	w.setLimit(min(w.limit, int(w.capLevel)))
	w.fitLimit()
}

// endedWithin is about how many calls ended within span with inFlight
// calls holding slots (Little's law): inFlight once a round trip, as
// many times as answers came back within span. A server that slows as
// the calls grow answers near the deadline, and the share of the calls
// in flight is the share of those that ended; a heavy tail (thinking
// models) times out its slowest calls while the rest come back many
// times a span, and their timeouts count against all of those.
func (w *law) endedWithin(span time.Duration, inFlight int) float64 {
	if !w.hasLatency || span <= 0 {
		return float64(inFlight)
	}
	return float64(inFlight) * max(1, float64(span)/float64(w.limitLatency()))
}
