package limiter

import (
	"math"
	"math/rand/v2"
	"time"
)

// 503 bursts in the quota simulation: a server that refuses every call
// for a moment now and then ("the model is overloaded"), and the
// runner's stage-wide overload hold (pipeline's overloadHold) that keeps
// the calls back meanwhile and tells the law it does (see law.onHeld).
// The hold here follows the pipeline's rules: it closes after
// simHoldRefusals overloaded answers with no success that outnumber half
// the calls sent since the first of them (one, once an overload has
// ended, until a call sent after a refused one is served), waits a
// backoff of 100 ms growing by half, or until the
// earlier overloads' length says this one may end, then lets one probe
// through, and opens when a call sent after it closed succeeds, or when
// the probe has not been refused within simProbeGrace times the
// overload's slowest refusal.

// bursts is a series of 503 bursts: every call arriving in
// [k×every, k×every+dur) after the run's start, for k ≥ 1, is refused.
type bursts struct {
	every, dur time.Duration
}

// active reports whether t is in a burst, and when that burst ends.
func (b bursts) active(t time.Time) (in bool, end time.Time) {
	e := t.Sub(simEpoch)
	if b.every <= 0 || b.dur <= 0 || e < b.every {
		return false, time.Time{}
	}
	k := e / b.every
	if e-k*b.every < b.dur {
		return true, simEpoch.Add(k*b.every + b.dur)
	}
	return false, time.Time{}
}

// pareto latency: base × a Pareto(alpha) draw (≥ 1), plus perCall for
// each call in progress, capped at most (the simulator's Latency.Tail
// and PerInFlight: a thinking model's heavy tail, slowed by load).
func pareto(base time.Duration, alpha float64, perCall, most time.Duration) latencyModel {
	return func(rng *rand.Rand, active int) time.Duration {
		tail := math.Pow(1-rng.Float64(), -1/alpha)
		d := time.Duration(float64(base)*tail) + perCall*time.Duration(active)
		return min(d, most)
	}
}

// The pipeline's overload hold rules (see the top of the file).
const (
	simHoldRefusals      = 3
	simHoldRefusalsKnown = 1
	simMaxLearnedWait    = 2 * time.Second
	simProbeGrace        = 3
	simMinGrace          = 20 * time.Millisecond
	simHoldFirst         = 100 * time.Millisecond
	simHoldGrowth        = 1.5
	simHoldMost          = 5 * time.Second
)

// simHold is the runner's overload hold in virtual time. Calls are told
// apart by their start stamps: in the simulation a call passes the hold
// and starts at the same instant.
type simHold struct {
	w             *law
	since         time.Time // first overloaded answer with no success since; zero if none
	refused, sent int
	until         time.Time // no call passes before it
	closedAt      time.Time
	needProbe     bool
	probe         time.Time // the probe's start stamp; zero if none in flight
	slowest       time.Duration
	graceOpened   bool
	steps         int // backoff steps of this overload
	// lo and hi bound the length of the overloads ended so far (from
	// since): a probe started lo in was refused, one started hi in was
	// served; hi is 0 before any. lastRefused: the latest refused probe
	// of this overload, from since.
	lo, hi, lastRefused time.Duration
	firstRefused        time.Time // start of this overload's first refused call
}

// grace is how long the probe may be in flight before it counts as
// served.
func (h *simHold) grace() time.Duration {
	return max(simProbeGrace*h.slowest, simMinGrace)
}

// mayPass reports whether a call may pass the hold at t; when not, next
// is when that may change by time alone (zero: only an answer changes
// it).
func (h *simHold) mayPass(t time.Time) (ok bool, next time.Time) {
	switch {
	case t.Before(h.until):
		return false, h.until
	case h.needProbe && !h.probe.IsZero() && t.Before(h.probe.Add(h.grace())):
		return false, h.probe.Add(h.grace())
	case h.needProbe && !h.probe.IsZero():
		// Not refused in the time a refusal takes: served.
		h.served(h.probe)
		h.needProbe, h.until, h.graceOpened = false, time.Time{}, true
		h.opened(t)
	}
	return true, time.Time{}
}

// passed records a call passing the hold, stamped started by the law.
func (h *simHold) passed(started time.Time) {
	if h.needProbe {
		h.probe = started
		return
	}
	if !h.since.IsZero() {
		h.sent++
	}
}

// answered folds in the answer at t to the call started at started:
// a success, or a 503 when overloaded. It reports whether the hold covers
// the call's retry (false: the item waits its own backoff).
func (h *simHold) answered(t, started time.Time, overloaded bool) (held bool) {
	if started.Equal(h.probe) {
		h.probe = time.Time{}
	}
	if !overloaded {
		if h.hi > 0 && !h.since.IsZero() && started.After(h.firstRefused) && started.Before(h.closedAt) {
			h.lo, h.hi = 0, 0 // a shed, not an overload of every call
		}
		if (h.needProbe || h.graceOpened) && !started.Before(h.closedAt) {
			wasHeld := h.needProbe
			if wasHeld {
				h.served(started)
			}
			h.needProbe, h.until, h.steps, h.graceOpened = false, time.Time{}, 0, false
			if wasHeld {
				h.opened(t)
			}
		}
		if !h.since.IsZero() && started.After(h.since) {
			h.since, h.refused, h.sent, h.slowest = time.Time{}, 0, 0, 0
		}
		return false
	}
	if h.since.IsZero() {
		h.since, h.lastRefused, h.firstRefused = t, 0, started
	}
	if started.Before(h.firstRefused) {
		h.firstRefused = started
	}
	h.refused++
	h.slowest = max(h.slowest, t.Sub(started))
	switch {
	case (h.needProbe || h.graceOpened) && !started.Before(h.closedAt):
		h.lastRefused = max(h.lastRefused, started.Sub(h.since))
		h.close(t)
	case !h.needProbe && h.refused >= h.refusalsToHold() && 2*h.refused > h.sent:
		h.close(t)
	}
	return h.needProbe
}

// close holds every call until the backoff's next step from t.
func (h *simHold) close(t time.Time) {
	d := time.Duration(float64(simHoldFirst) * math.Pow(simHoldGrowth, float64(h.steps)))
	if at, ok := h.learnedEnd(h.steps == 0); ok && at.After(t) {
		d = at.Sub(t)
	}
	h.steps++
	wasHeld := h.needProbe
	h.until, h.closedAt, h.needProbe, h.graceOpened = t.Add(min(d, simHoldMost)), t, true, false
	if !wasHeld {
		h.w.onHeld(t)
	}
}

// opened tells the law the hold let the calls go again at t.
func (h *simHold) opened(t time.Time) { h.w.onOpened(t) }

// refusalsToHold is how many overloaded answers in a row close the hold.
func (h *simHold) refusalsToHold() int {
	if h.hi > 0 {
		return simHoldRefusalsKnown
	}
	return simHoldRefusals
}

// learnedEnd is when the earlier overloads' length says the current one
// may have ended: halfway between lo and hi for the first probe, then hi,
// then a grace past the latest refused probe, twice.
func (h *simHold) learnedEnd(first bool) (time.Time, bool) {
	if h.hi <= 0 || h.hi > simMaxLearnedWait || h.since.IsZero() {
		return time.Time{}, false
	}
	target := h.hi
	if first && h.hi-h.lo > simMinGrace {
		target = (h.lo + h.hi) / 2
	}
	if !first && target <= h.lastRefused {
		if h.lastRefused >= h.hi+2*simMinGrace {
			return time.Time{}, false
		}
		target = h.lastRefused + simMinGrace
	}
	return h.since.Add(target), true
}

// served folds in a call started after the hold closed being served.
func (h *simHold) served(started time.Time) {
	if h.since.IsZero() || started.Before(h.since) {
		return
	}
	hi := started.Sub(h.since)
	if lo := max(h.lo, h.lastRefused); h.hi > 0 && hi <= h.hi && lo < hi {
		h.lo, h.hi = lo, hi
	} else {
		h.lo, h.hi = h.lastRefused, hi
	}
}
