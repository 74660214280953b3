package limiter

import (
	"math"
	"time"
)

// law is the AIMD control law on its own: the limit, the retry-after
// gate, the pacing after a decrease and everything the limit is derived
// from (the edge history, the cooldown, the smoothed latency and tokens).
// It is pure in the manner of golang.org/x/time/rate: every event carries
// its time t explicitly, and a method only turns the state and the event
// into the new state. It holds no lock, starts no timer and never reads a
// clock, so a test or a simulation drives it through exact instants. AIMD
// wraps it with the waiter queue, the lock and the clock.
type law struct {
	cfg Config // with defaults applied; cfg.Now is not read

	limit     int
	streak    int       // successes counted toward the next increase
	decrease  time.Time // stamp of the last congestion event; zero before the first
	lastStart time.Time // latest start time handed out
	gate      time.Time // no call starts before this

	minLimit, maxLimit   int
	increases, decreases int64

	slowStart bool      // no Start was given and no 429 has come yet
	lastEdge  bool      // the last decrease answered an edge 429
	edge      int       // limit less one at the last edge 429; 0: none (see probing)
	probes    int       // slow increases from edge up since the last decrease
	cooldown  time.Time // the limit does not grow before this
	paceUntil time.Time // starts are paced until this, after a decrease
	paceNext  time.Time // the next paced start
	paceEvery time.Duration
	history   [historyLen]limitChange // ring of the latest limit changes
	changes   int                     // limit changes recorded, ever

	avgTokens  float64 // EWMA of billed tokens per success; valid if hasTokens
	hasTokens  bool
	avgLatency float64 // EWMA of success latency in nanoseconds; valid if hasLatency
	hasLatency bool
}

// limitChange is one entry of the limit history: at at, the limit changed
// from limit.
type limitChange struct {
	at    time.Time
	limit int
}

// newLaw returns the law's state before any event. cfg must have its
// defaults applied; slowStart says whether the caller gave no Start.
func newLaw(cfg Config, slowStart bool) law {
	return law{
		cfg:       cfg,
		limit:     cfg.Start,
		minLimit:  cfg.Start,
		maxLimit:  cfg.Start,
		slowStart: slowStart && !cfg.Fixed,
	}
}

// mayStart reports whether a call may start at t with inFlight calls
// holding slots: a slot is free and neither the gate nor pacing holds it.
func (w *law) mayStart(t time.Time, inFlight int) bool {
	return inFlight < w.limit && !t.Before(w.hold(t))
}

// hold is the time before which no call starts: the retry-after gate, or
// while pacing after a decrease, the next paced start.
func (w *law) hold(t time.Time) time.Time {
	if t.Before(w.paceUntil) && w.paceNext.After(w.gate) {
		return w.paceNext
	}
	return w.gate
}

// start records a call let through at t and returns its start stamp,
// spacing the next paced start after it.
func (w *law) start(t time.Time) time.Time {
	if t.Before(w.paceUntil) {
		if w.paceNext.Before(t) {
			w.paceNext = t
		}
		w.paceNext = w.paceNext.Add(w.paceEvery)
	}
	return w.stamp(t)
}

// stamp returns the start time for a call starting at t: t, nudged a
// nanosecond past the last decrease if the clock has not moved beyond it
// (coarse or fake clocks), so that a call started after a decrease always
// compares after it.
func (w *law) stamp(t time.Time) time.Time {
	if !t.After(w.decrease) {
		t = w.decrease.Add(time.Nanosecond)
	}
	if t.After(w.lastStart) {
		w.lastStart = t
	}
	return t
}

// onSuccess folds in a success at t of the call started at started,
// billed tokens, and grows the limit if a streak is complete (see AIMD).
func (w *law) onSuccess(t, started time.Time, tokens int64) {
	w.observe(t.Sub(started), tokens)
	if w.cfg.Fixed {
		return
	}
	ceiling := w.ceiling()
	if w.limit > ceiling {
		w.setLimit(t, ceiling)
	}
	switch {
	case w.slowStart:
		top := min(ceiling, max(w.cfg.Start, w.cfg.Ceiling/slowStartShare))
		if w.limit < top {
			w.setLimit(t, min(top, w.limit+w.cfg.Increase))
			w.increases++
		}
		w.slowStart = w.limit < top
	case started.After(w.decrease) && !t.Before(w.cooldown):
		w.streak++
		need := w.limit
		probing := w.probing()
		if probing {
			need *= probeStreaks
		}
		if w.streak >= need {
			w.streak = 0
			if w.limit < ceiling {
				if probing {
					w.probes++
				}
				w.setLimit(t, min(ceiling, w.limit+w.cfg.Increase))
				w.increases++
			}
		}
	}
}

// onRateLimited folds in a 429 at t of the call started at started, with
// the server's retry delay retryAfter (0 if none): it moves the gate and
// decreases the limit if this is a new congestion event. It reports
// whether the gate moved later.
func (w *law) onRateLimited(t, started time.Time, retryAfter time.Duration) (gateMoved bool) {
	if retryAfter > 0 {
		if until := t.Add(retryAfter); until.After(w.gate) {
			w.gate = until
			gateMoved = true
		}
	}
	if !w.cfg.Fixed && started.After(w.decrease) && (!w.sameRoundTrip(t) || w.escalates(retryAfter)) {
		w.decreaseAt(t, retryAfter)
	}
	return gateMoved
}

// decreaseAt answers a congestion event at t (see AIMD).
func (w *law) decreaseAt(t time.Time, retryAfter time.Duration) {
	// Stamp the event no earlier than any start handed out so far, so
	// every call already started compares as part of this event even when
	// the clock has not moved since.
	w.decrease = t
	if w.lastStart.After(t) {
		w.decrease = w.lastStart
	}
	w.decreases++
	w.streak = 0
	next := int(math.Floor(float64(w.limit) * w.cfg.DecreaseFactor))
	if w.isEdge(retryAfter) {
		// An edge 429: the quota frees a slot within a round trip, so the
		// limit only just overshot it. Go back to where the limit was
		// before the overshoot began.
		back := w.limitAt(t.Add(-time.Duration(lagRoundTrips * w.avgLatency)))
		next = max(next, min(back, int(math.Floor(float64(w.limit)*edgeBackoff))))
		w.edge = w.limit - w.cfg.Increase
		w.lastEdge = true
	} else {
		w.edge = 0
		w.lastEdge = false
	}
	w.slowStart, w.probes = false, 0
	w.setLimit(t, max(w.cfg.Floor, next))
	resume := w.gate
	if t.After(resume) {
		resume = t
	}
	cooldown := w.cfg.Cooldown
	if w.hasLatency {
		cooldown = min(cooldown, time.Duration(cooldownRoundTrips*w.avgLatency))
		// Spread the first calls after the decrease over a round trip
		// rather than letting them all through when the gate opens.
		w.paceEvery = time.Duration(w.avgLatency / float64(w.limit))
		w.paceNext = resume
		w.paceUntil = resume.Add(cooldown)
	}
	w.cooldown = resume.Add(cooldown)
}

// isEdge reports whether a 429 with retryAfter is an edge 429: the quota
// frees a slot within a measured round trip.
func (w *law) isEdge(retryAfter time.Duration) bool {
	return w.hasLatency && retryAfter > 0 && float64(retryAfter) <= w.avgLatency
}

// escalates reports whether a 429 with retryAfter tells of more than the
// last decrease answered: that was an edge 429, this one is not (the quota
// fell just after the limit overshot it).
func (w *law) escalates(retryAfter time.Duration) bool {
	return w.lastEdge && !w.isEdge(retryAfter)
}

// sameRoundTrip reports whether t is within one measured round trip of the
// last decrease: a 429 then belongs to the event that decrease answered,
// whatever its call's start, because a window-counted quota keeps refusing
// until the window has drained.
func (w *law) sameRoundTrip(t time.Time) bool {
	return w.hasLatency && !w.decrease.IsZero() && float64(t.Sub(w.decrease)) < w.avgLatency
}

// probing reports whether the limit is at or above the level of the last
// edge 429 and still within the probeSteps slow steps from there.
func (w *law) probing() bool {
	return w.edge > 0 && w.limit >= w.edge && w.probes < probeSteps
}

// limitAt returns the limit in force at t, or the oldest limit the history
// remembers when t is older than that.
func (w *law) limitAt(t time.Time) int {
	v := w.limit
	for i := 1; i <= min(w.changes, historyLen); i++ {
		c := w.history[(w.changes-i)%historyLen]
		if !c.at.After(t) {
			return v // the limit c set, in force from c.at until the next change
		}
		v = c.limit // the limit before c
	}
	return v
}

// setLimitTo sets the limit at t to n clamped to [Floor, ceiling], for a
// limit learned by an earlier run or set by hand (see AIMD.SetLimit).
func (w *law) setLimitTo(t time.Time, n int) {
	ceiling := w.cfg.Ceiling
	if !w.cfg.Fixed {
		ceiling = w.ceiling()
	}
	w.setLimit(t, min(max(n, w.cfg.Floor), ceiling))
	w.streak = 0
	w.slowStart = false
}

// setLimit sets the limit at t, recording the change in the history.
func (w *law) setLimit(t time.Time, n int) {
	if n != w.limit {
		w.history[w.changes%historyLen] = limitChange{t, w.limit}
		w.changes++
	}
	w.limit = n
	w.minLimit = min(w.minLimit, n)
	w.maxLimit = max(w.maxLimit, n)
}

// observe folds one success into the smoothed latency and tokens.
func (w *law) observe(latency time.Duration, tokens int64) {
	lat := float64(max(latency, 0))
	if w.hasLatency {
		w.avgLatency += ewmaWeight * (lat - w.avgLatency)
	} else {
		w.avgLatency, w.hasLatency = lat, true
	}
	if tokens <= 0 {
		return
	}
	if w.hasTokens {
		w.avgTokens += ewmaWeight * (float64(tokens) - w.avgTokens)
	} else {
		w.avgTokens, w.hasTokens = float64(tokens), true
	}
}

// ceiling returns the effective ceiling: Config.Ceiling, lowered to the
// Little's-law bound TPM*W/(60s*T) once latency W and tokens T have been
// measured, and never below Floor.
func (w *law) ceiling() int {
	c := w.cfg.Ceiling
	if w.cfg.TPM <= 0 || !w.hasTokens || !w.hasLatency {
		return c
	}
	bound := float64(w.cfg.TPM) * w.avgLatency / (w.avgTokens * float64(time.Minute))
	// The epsilon keeps an exact quotient such as 2 from flooring to 1
	// through rounding in the averages.
	if bound = math.Floor(bound + 1e-9); bound < float64(c) {
		c = max(w.cfg.Floor, int(bound))
	}
	return c
}

// tokensPerCall is the TPM pacing reservation: the measured average tokens
// per call, or Config.EstimatedTokens before any has been measured.
func (w *law) tokensPerCall() int {
	n := w.cfg.EstimatedTokens
	if w.hasTokens {
		n = int64(math.Ceil(w.avgTokens))
	}
	return int(min(max(n, 1), math.MaxInt32))
}
