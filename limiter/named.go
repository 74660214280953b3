package limiter

import "time"

// A budget a 429 names is evidence like any other, and loses to what the
// quota admitted when the two contradict. Over any span s, a quota of B
// a minute admits at most B × (⌊s/1m⌋ + 2): a sliding log B per minute
// the span starts, a fixed minute B per window it overlaps (a span just
// under a minute can end one window and begin the next; one just over can
// end one, hold a second and begin a third), a token bucket of B a minute
// its burst (at most B) more. A quota that admitted more than that over
// some span ending at a 429 does not count B a minute: a server that
// names its count per window as a minute's (quotasim's "named wrong"), or
// a gateway that names another quota's. Believed, such a name held the
// law at 1/60 of a fixed 63 per 2.6 s for 66 s at a time, and each look
// above it was refused with the name again, back to 1/60.
//
// The names are weighed against the highest budget any 429 of the run
// named, so that a live quota that fell and names its new budget is not
// read as contradicted by what it admitted before it fell. nameSlack
// leaves room for a budget named rounded.

// nameSlack: a named budget is contradicted once the quota admitted this
// much more than it can.
const nameSlack = 1.02

// admittedOver walks the ring back from the refusal of the call started
// at started and reports whether over some span ending at t the quota
// admitted more calls than rpm a minute allows, and more input tokens
// than tpm a minute allows (0: not weighed). A call counts as admitted
// once it succeeded; a call still in flight that started before the
// refused one counts as a call (a refusal comes back within its own
// round trip) but not in tokens, which are known only when it answers.
// Only the starts the ring still holds count, which can only make a
// contradiction harder to read, never one read wrongly.
func (w *law) admittedOver(t, started time.Time, rpm, tpm int64) (overRPM, overTPM bool) {
	calls, tokens := 0.0, 0.0
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := &w.sent[(w.nSent-i)%sentRing]
		if c.at.After(started) {
			continue
		}
		switch {
		case c.outcome == admitted:
			calls++
			tokens += float64(c.tokens)
		case c.outcome == pending && c.at.Before(started):
			calls++
		default:
			continue
		}
		windows := float64(t.Sub(c.at)/time.Minute) + 2
		if rpm > 0 && calls > float64(rpm)*windows*nameSlack {
			overRPM = true
		}
		if tpm > 0 && tokens > float64(tpm)*windows*nameSlack {
			overTPM = true
		}
		if (overRPM || rpm <= 0) && (overTPM || tpm <= 0) {
			break
		}
	}
	return overRPM, overTPM
}

// doubtNames folds in a 429 at t of the call started at started, the
// budgets it named already recorded (nameQuota): each name that what the
// quota admitted contradicts is dropped, with every name of the run up to
// the highest, and later 429s that name one of them are read as naming
// nothing. The last names go too, so that requests named wrongly do not
// space token-paced starts (see requestInterval). When a name that set
// the pace went, the event paces at what the quota proved instead (see
// paceProven).
func (w *law) doubtNames(t, started time.Time) {
	rpm, tpm := w.highestRPM, w.highestTPM
	if rpm <= w.doubtedRPM {
		rpm = 0
	}
	if tpm <= w.doubtedTPM {
		tpm = 0
	}
	if rpm <= 0 && tpm <= 0 {
		return
	}
	overRPM, overTPM := w.admittedOver(t, started, rpm, tpm)
	pacing := w.namedRate() > 0
	if overRPM {
		w.doubtedRPM = rpm
		w.namedRPM, w.lastRPM = 0, 0
	}
	if overTPM {
		w.doubtedTPM = tpm
		w.namedTPM, w.lastTPM = 0, 0
	}
	if pacing && (overRPM || overTPM) && w.namedRate() == 0 {
		w.doubtedAt = t // no name left to pace at (one still named binds as ever)
	}
}

// paceProven sets the rate after an event at t, of the call started at
// started, whose 429 named a budget the quota's admissions contradicted
// (see doubtNames): not the name, nor slow start's fast climb as for a
// quota nothing is known of, but what the quota proved it admits, the
// rate it admitted over the answer lag before the refusal (since the
// first start, if that is shorter, and over no less than the window a
// retry delay showed), less the margin every event takes, as safe and
// bounded. From there the law climbs as after any event: held an answer
// lag, then halfway to the rate refused, or a stair up when none bounds
// it. (Dropping the name alone, feat/lawnames' doubtNames, left the
// first event's fast climb: a charged sliding 268 per 5 s with 4.2 s
// calls refused 2.98% of calls; from the proven rate 2.48%, against 0.05%
// paced at the name at a fifth of the goodput: the stairs the law climbs
// on any quota overshoot it, see bench/RESULTS.md.)
func (w *law) paceProven(t, started time.Time) {
	span := min(w.answerLag(), t.Sub(w.firstStart))
	span = max(span, w.window, 2*w.latency())
	n := w.admittedFrom(t.Add(-span), started)
	if n < cycleMinSuccesses {
		return // too few to prove a rate: the law's own reading stands
	}
	w.rate = max(n/span.Seconds()*eventBackoff, w.rateFloor())
	w.safe, w.measured, w.bounded = w.rate, true, true
}
