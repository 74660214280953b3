package limiter

import (
	"math"
	"time"
)

// The limit on calls in flight and the bounds of the paced rate: what the
// law's rate carries by Little's law (calls in flight = rate × latency),
// within Floor and the ceiling, and the range the limit has moved over.

// minRate is Floor calls per round trip; maxRate the rate Ceiling calls in
// flight carry, or a TPM budget's, whichever is lower.
func (w *law) minRate() float64 {
	return float64(w.cfg.Floor) / w.latency().Seconds()
}

func (w *law) maxRate() float64 {
	r := float64(w.cfg.Ceiling) / w.latency().Seconds()
	if w.cfg.TPM > 0 && w.hasTokens {
		r = min(r, float64(w.cfg.TPM)/60/w.callTokens())
	}
	r = max(r, w.minRate())
	if named := w.namedRate(); named > 0 {
		r = max(min(r, named*namedShare), lowestRate)
	}
	return r
}

// rateFloor is the lowest rate the law paces after a congestion event:
// lowestRate, not a call per round trip (minRate). A per-minute budget
// of a few hundred calls admits less than that with quick calls, named
// or not: held to one, the law overran it several times over and lived
// on 429s (a fifth of the calls refused where each refusal is charged
// against the quota, and a probe every backoff where none is).
func (w *law) rateFloor() float64 { return lowestRate }

// fitLimit sets the limit on calls in flight to carry the paced rate, or
// the fastest calls start while the law sends by the window.
func (w *law) fitLimit() {
	if n, ok := w.minuteLimit(); ok {
		w.setLimit(min(max(n, w.cfg.Floor), w.ceiling()))
		return
	}
	if w.rate <= 0 || !w.hasLatency {
		return
	}
	fastest := w.rate
	if w.windowBinds() {
		// Sending by the window, calls start up to catchUpSpeed times
		// as fast as the rate while the window has room.
		fastest *= catchUpSpeed
	}
	// Less a hair before rounding up: a rate set from a limit over the
	// same latency (setLimitTo, a learned start) carries that limit back
	// with a last-bit error, and 5.000000000000001 must not read as 6.
	n := int(math.Ceil(fastest*w.limitLatency().Seconds()*rateHeadroom - 1e-9))
	if w.capLevel > 0 {
		n = min(n, int(w.capLevel))
	}
	w.setLimit(min(max(n, w.cfg.Floor), w.ceiling()))
}

// setLimitTo sets the limit to n clamped to [Floor, ceiling], for a limit
// learned by an earlier run or set by hand (see AIMD.SetLimit).
func (w *law) setLimitTo(t time.Time, n int) {
	ceiling := w.cfg.Ceiling
	if !w.cfg.Fixed {
		ceiling = w.ceiling()
	}
	w.setLimit(min(max(n, w.cfg.Floor), ceiling))
	w.slowStart = false
	if w.hasLatency && !w.cfg.Fixed {
		w.rate = float64(w.limit) / w.latency().Seconds() / rateHeadroom
		w.probeFrom = t
	}
}

// learnedRate is the rate to start the next run from: the safe rate once
// one is known, else the rate paced; 0 before any is, and 0 while the
// quota has never bounded the law. A rate no refusal, named budget or
// window read ever bounded measured the run's own demand and latency (a
// small night, a slow disk), not the quota: paced again, it would hold
// every run to the slowest before it, and it could only fall. A run
// started from a rate an earlier one found, which met no 429 of its own,
// hands that rate on (or the higher one it proved), not 97% of it.
func (w *law) learnedRate() float64 {
	r := w.rate
	if w.safe > 0 {
		r = min(w.safe, w.rate)
	}
	if w.quotaSeen() {
		return r
	}
	if w.startRate > 0 {
		return max(r, w.startRate)
	}
	return 0
}

// quotaSeen reports whether this run met the quota: a 429 (a congestion
// event), a budget a 429 named, or a window read from one.
func (w *law) quotaSeen() bool {
	return w.decreases > 0 || w.lastRPM > 0 || w.lastTPM > 0 || w.knownWindow > 0
}

// setLimit sets the limit, tracking its range.
func (w *law) setLimit(n int) {
	w.limit = n
	w.minLimit = min(w.minLimit, n)
	w.maxLimit = max(w.maxLimit, n)
}
