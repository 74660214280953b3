package limiter

import (
	"math"
	"time"
)

// The runner's overload hold, as the law sees it. A server that refuses
// every call for a moment (503 "overloaded") says nothing about the
// quota, and the runner keeps the calls back until it serves again
// (pipeline's overload hold). Meanwhile the law sends less than it paces,
// through no doing of the quota: time held must not count against the
// sent rate, or a rate held between holds never counts as held (see
// law.grow), nor as time the quota was offered calls and admitted few
// (see law.admittedRate).

// OverloadHeld reports that the runner's overload hold closed: the
// server refuses every call for a moment, and no call of the stage starts
// until OverloadOpened, which the pacing must not read as the law's own
// slowness. It implements pipeline.OverloadListener.
func (l *AIMD) OverloadHeld() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.law.onHeld(l.cfg.Now())
}

// OverloadOpened reports that the runner's overload hold opened: the
// server serves again. It implements pipeline.OverloadListener.
func (l *AIMD) OverloadOpened() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.law.onOpened(l.cfg.Now())
}

// maxHolds bounds the past holds the law keeps; they are dropped sooner
// once older than the spans the law reads them over (see keptHolds).
const maxHolds = 1024

// heldSpan is one hold, from when it closed to when it opened.
type heldSpan struct{ from, to time.Time }

// overloadHolds is what the law knows of the runner's overload holds.
type overloadHolds struct {
	from time.Time  // when the current hold closed; zero when open
	past []heldSpan // the holds within keptHolds, latest first
}

// onHeld folds in the runner's overload hold closing at t: no call
// starts until onOpened.
func (w *law) onHeld(t time.Time) {
	if w.holds.from.IsZero() {
		w.holds.from = t
	}
}

// onOpened folds in the runner's overload hold opening at t. The paced
// rate was not sent while held, so it has been proven for that much less
// time: the answer lag it is held for (see grow) moves on by the hold.
func (w *law) onOpened(t time.Time) {
	from := w.holds.from
	if from.IsZero() {
		return
	}
	w.holds.from = time.Time{}
	// Drop the holds older than any span the law reads them over, then
	// put this one first.
	keep := w.holds.past[:0]
	horizon := t.Add(-w.keptHolds())
	for _, h := range w.holds.past {
		if h.to.After(horizon) && len(keep) < maxHolds-1 {
			keep = append(keep, h)
		}
	}
	w.holds.past = append([]heldSpan{{from, t}}, keep...)
	switch {
	case w.probeFrom.Before(from):
		w.probeFrom = w.probeFrom.Add(t.Sub(from))
	case w.probeFrom.Before(t):
		w.probeFrom = t
	}
}

// keptHolds is how far back the law keeps past holds: twice the longest
// span it reads them over (a round trip for the sent rate, an answer lag
// or the quota's window for the rate admitted; a per-minute window holds
// dozens of holds a second or two apart), and minKeptHolds at least.
func (w *law) keptHolds() time.Duration {
	return max(2*max(w.answerLag(), w.window, w.latency()), minKeptHolds)
}

// minKeptHolds is the least time past holds are kept: before a round
// trip is measured, and for quotas answered within a few seconds.
const minKeptHolds = 10 * time.Second

// heldWithin is how long the overload hold kept the calls back within
// [from, to].
func (w *law) heldWithin(from, to time.Time) time.Duration {
	overlap := func(a, b time.Time) time.Duration {
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		return max(b.Sub(a), 0)
	}
	d := time.Duration(0)
	if !w.holds.from.IsZero() {
		d += overlap(w.holds.from, to)
	}
	for _, h := range w.holds.past {
		if h.to.IsZero() || !h.to.After(from) {
			break
		}
		d += overlap(h.from, h.to)
	}
	return d
}

// sendingAtRate reports whether the calls started over the last round
// trip, time held for an overload left out, came at 0.9 of the paced
// rate or more, or as many as a steady schedule at the rate puts in it
// (atRate); judged is false when too little of that round
// trip was free of holds to tell either way.
func (w *law) sendingAtRate(t time.Time) (judged, atRate bool) {
	if w.windowBinds() {
		// Sending by the window, the calls come in its bursts and gaps,
		// a window's worth a window: at the rate when the window is
		// about full.
		return true, w.windowStarts(t) >= 0.9*w.rate*w.knownWindow.Seconds()
	}
	span := w.sentSpan()
	free := span - w.heldWithin(t.Add(-span), t)
	if free < span/2 {
		return false, false
	}
	// Below a call per round trip the sent rate's floor of one proves
	// any rate: there the calls sent must come at half of it at least
	// (the few a span holds swing too far to ask for 0.9), so that a
	// rate sent a call now and then is not proven.
	if w.rate < w.minRate() && w.sentCalls(t) < 0.5*w.rate {
		return true, false
	}
	// The calls a span holds are whole: a schedule of four and a half a
	// round trip puts four or five in one by where it falls, and four,
	// read as under 0.9 of the rate, reset the rate's proof at every
	// other answer (a bucket of 229 a second paced at 25 for a minute).
	// A span that holds as many calls as a steady schedule at the rate
	// always puts in it sends at the rate.
	n := w.sentRate(t) * free.Seconds()
	return true, n >= 0.9*w.rate*free.Seconds() || n >= math.Floor(w.rate*free.Seconds())-1e-9
}
