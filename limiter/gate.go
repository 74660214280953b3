package limiter

import (
	"math"
	"time"
)

// The gate: after a 429, when calls may start again. An exact retry
// delay closes it until the quota opens; a rounded one or none leaves
// the wait unknown, and the law backs off and probes, or only holds the
// starts for a moment when a paced rate just overran the quota (see
// gateAfter); once it opens, a congestion event's rate is held from
// then (resumeAfter). The law's other answers to a 429 (the rate, the
// window, the budget named) are onRateLimited's and onEvent's.

// gateAfter closes the gate for a 429 at t of the call started at
// started, with the server's retry delay retryAfter (0 if none);
// newEvent says it begins a congestion event, others is the calls that
// were in flight beside it. It reports whether the gate moved later.
func (w *law) gateAfter(t, started time.Time, retryAfter time.Duration, newEvent bool, others int) (gateMoved bool) {
	if !uncertain(retryAfter) {
		w.holdGated(t, t.Add(retryAfter))
		return w.closeGate(t.Add(retryAfter))
	}
	// Unless a cap on calls in progress refused it (it frees a slot
	// as soon as a call ends), the quota is spent: wait a backoff,
	// then probe. So too when a call started after a decrease is
	// refused with no success in between.
	capped := w.eventRate > 0 && w.capped(started, others, w.windowBinds())
	// While a learned rate is paced, the first such 429 of an event
	// only lowers it: the rate spaces the calls out, and a gate for
	// everyone would idle a quota that is only just overrun. A 429
	// of a call started after that decrease, with no success in
	// between, says the quota is spent: then back off and probe.
	paced := w.eventRate > 0 && w.rate > 0 && !w.refusedSince
	if started.After(w.decrease) && newEvent && !capped && paced {
		// Hold the starts for twice this refusal's round trip: the
		// calls already sent answer meanwhile. A quota only just
		// overrun (a bucket's tokens, a window's edge) admits them,
		// and the starts go on at the lowered rate with no probe
		// (a probe idles every slot for a round trip, event after
		// event); a quota spent refuses them too, and then a probe
		// goes first.
		gateMoved = w.closeGate(t.Add(2 * max(t.Sub(started), 0)))
		w.lightGate = true
	} else if w.lightGate && !w.needProbe && !started.After(w.decrease) {
		w.needProbe = true
	} else if started.After(w.decrease) && (newEvent && !capped || w.refusedSince && (newEvent || !w.needProbe)) {
		d := w.backoff()
		if retryAfter > 0 {
			d = min(d, retryAfter)
		}
		gateMoved = w.closeGate(t.Add(d))
		w.needProbe = true
		w.backoffs++
	}
	w.refusedSince = true
	return gateMoved
}

// idledSince is when the gate last opened, if it held the starts for a
// round trip or more; zero if it held them for less, as the calls did
// not idle for it then. What the quota admitted is read from no earlier
// than that (see admittedRate): idle time says nothing of its rate.
func (w *law) idledSince() time.Time {
	if w.gate.Sub(w.gateFrom) < w.latency() {
		return time.Time{}
	}
	return w.gate
}

// resumeAfter sets, for a congestion event at t, the instant starts
// resume (the gate, or t if it is open): the rate is held from then, the
// limit held under a cap does not grow for a cooldown after it, and the
// pace sends no call before the window's floor allows (see paceFloor).
// Time the gate held the starts does not count toward proving the rate.
func (w *law) resumeAfter(t time.Time) {
	resume := later(w.gate, t)
	w.cooldown = resume.Add(min(w.cfg.Cooldown, time.Duration(cooldownRoundTrips*w.avgLatency)))
	w.probeFrom = resume
	if floor := w.paceFloor(resume); w.tat.Before(floor) {
		w.tat = floor
	}
}

// backoff is the wait after an uncertain 429: a round trip, grown by
// backoffGrowth per uncertain event since the last success, with jitter,
// capped.
func (w *law) backoff() time.Duration {
	base := time.Second
	if w.hasLatency {
		base = w.latency()
	}
	d := time.Duration(float64(base) * math.Pow(backoffGrowth, float64(min(w.backoffs, 12))))
	d = min(d, backoffMaxRoundTrips*base)
	// xorshift64: deterministic jitter, ±25%.
	w.seed ^= w.seed << 13
	w.seed ^= w.seed >> 7
	w.seed ^= w.seed << 17
	return time.Duration(float64(d) * (0.75 + 0.5*float64(w.seed>>11)/float64(1<<53)))
}

// closeGate moves the gate to until if later, and reports whether it did.
func (w *law) closeGate(until time.Time) bool {
	if until.After(w.gate) {
		if w.gate.Before(w.lastStart) {
			w.gateFrom = w.lastStart // closed anew: it holds starts from here
		}
		w.gate = until
		return true
	}
	return false
}

// holdGated records that an exact retry delay, given at t, holds the
// starts until until: the span it holds them over, or the current one
// lengthened (see gatedWithin).
func (w *law) holdGated(t, until time.Time) {
	if len(w.gated) > 0 && w.gated[0].to.After(t) {
		w.gated[0].to = later(w.gated[0].to, until) // held on: the same span
		return
	}
	keep := w.gated[:0]
	horizon := t.Add(-w.keptHolds())
	for _, h := range w.gated {
		if h.to.After(horizon) && len(keep) < maxHolds-1 {
			keep = append(keep, h)
		}
	}
	w.gated = append([]heldSpan{{t, until}}, keep...)
}

// gatedWithin is how long exact retry delays held the starts within
// [from, to]: the law held the calls back itself, as the quota was spent
// by calls before, so what it admitted then says nothing of its rate
// (see admittedRate).
func (w *law) gatedWithin(from, to time.Time) time.Duration {
	d := time.Duration(0)
	for _, h := range w.gated {
		if !h.to.After(from) {
			break
		}
		a, b := later(h.from, from), h.to
		if b.After(to) {
			b = to
		}
		d += max(b.Sub(a), 0)
	}
	return d
}
