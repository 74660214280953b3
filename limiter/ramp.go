package limiter

import "time"

// The ramp: how starts resume while a 429 shows the quota still spent.
// A refusal comes back in a fraction of a success's round trip (the
// server answers it before any generation), so a call not refused within
// the refusal round trip was admitted: the law can learn on the refusal
// clock. A quota spent by a burst (a sliding log freeing its slots at the
// pace the burst filled it, a window whose retry delays say when one
// call fits, not how many) refuses every call the pace sends before the
// first refusal is back, and the law, answering each such refusal with a
// gate of its retry delay, sent that many into it again at each gate's
// end: a fifth of the calls refused, in bursts, with quick calls on a
// quota of hundreds a second. So once a call started after the law
// answered an event is refused within the event's round trip, starts
// resume one call at first, then twice as many each refusal round trip
// that passes with none refused, until the step is what the pace sends
// in that time. A refusal of a call the ramp let through starts it over:
// a quota still spent costs one refusal per refusal round trip, not the
// pace's worth. The ramp is for a pace of several calls per refusal
// round trip (rampMinCalls): below that, a spent quota costs a call or
// two per gate, and holding the starts costs the rate's proof more.

// rampMinCalls: the ramp holds the starts only when the pace sends at
// least this many calls within a refusal's round trip.
const rampMinCalls = 4

// ramp is the resumption after a refusal that showed the quota spent:
// began is when it restarted; the current step let allowed starts
// through from step on, sent of them so far. allowed is 0 when no ramp
// holds the starts.
type ramp struct {
	began, step   time.Time
	sent, allowed int
}

// rampSilence is how long a start goes unrefused before it counts as
// admitted: the longest refusal round trip seen, and half as much again,
// but no longer than a success's round trip: a refusal slower than that
// (a flex call shed after a wait, a 429 queued behind a busy server) is
// not the refusal clock, and, kept as the longest, held every step of
// every ramp after it for as long. Zero before any 429.
func (w *law) rampSilence() time.Duration { return min(w.refusalRT*3/2, w.latency()) }

// restartRamp folds in a 429 at t of the call started at started, before
// the event it may begin is recorded. A call started after the last
// event began, and refused within its round trip, found the quota still
// spent: the ramp starts over from one call. So does a refusal of a call
// the ramp let through. (An event's first 429 alone does not: a rate
// only just over the quota goes on at the lowered rate, see gateAfter.)
func (w *law) restartRamp(t, started time.Time) {
	w.refusalRT = max(w.refusalRT, t.Sub(started))
	if w.rate*w.rampSilence().Seconds() < rampMinCalls {
		return
	}
	inRamp := w.ramp.allowed > 0 && !started.Before(w.ramp.began)
	spent := !w.decrease.IsZero() && started.After(w.decrease) && w.sameRoundTrip(t)
	if inRamp || spent && w.ramp.allowed == 0 {
		w.ramp = ramp{began: t, allowed: 1}
	}
}

// rampHold is the earliest instant the ramp lets the next call start:
// zero when it does not hold it.
func (w *law) rampHold() time.Time {
	if w.ramp.allowed == 0 || w.ramp.sent < w.ramp.allowed {
		return time.Time{}
	}
	return w.ramp.step.Add(w.rampSilence())
}

// ramped records a start at s: the first of a step opens it, and a step
// as large as what the pace sends in a silence ends the ramp.
func (w *law) ramped(s time.Time) {
	if w.ramp.allowed == 0 {
		return
	}
	if w.ramp.sent >= w.ramp.allowed {
		w.ramp.allowed *= 2
		w.ramp.sent = 0
	}
	if w.ramp.sent == 0 {
		w.ramp.step = s
	}
	w.ramp.sent++
	if w.rate > 0 && float64(w.ramp.allowed) >= w.rate*w.rampSilence().Seconds() {
		w.ramp = ramp{}
	}
}
