package limiter

import "time"

// slowGrow is slow start's answer at t to a success with inFlight calls
// (this one included) holding slots: the limit doubles each round trip
// up to slowStartBrake (or the ceiling, when lower) and is held there
// until calls that fill it have been answered for brakeRoundTrips round
// trips and brakeHold with none refused; then it doubles again while the
// calls fill it, up to the ceiling. Most quotas refuse within the
// brake's calls in flight, their first 429 a round trip on its way, and
// a window's quota refuses once the window's budget is spent: doubling
// straight on would send bursts of a hundred calls more at a quota
// already spent. A quota that admits the brake's calls that long has
// room (thinking models and paid tiers need hundreds of calls in
// flight), and doubling finds it in a few round trips.
func (w *law) slowGrow(t time.Time, inFlight int) {
	ceiling := w.ceiling()
	switch {
	case w.limit >= ceiling:
	case w.limit < slowStartBrake:
		w.setLimit(min(ceiling, slowStartBrake, w.limit+w.cfg.Increase))
		w.increases++
	case inFlight < w.limit:
		// Calls do not fill the limit: its answers say nothing of more.
	case w.braked == 0 || w.braked < brakeRoundTrips*slowStartBrake || t.Sub(w.brakeFrom) < brakeHold:
		if w.braked == 0 {
			w.brakeFrom = t
		}
		w.braked++
	default:
		w.braked++
		if w.braked%brakeGrowEvery == 0 {
			w.setLimit(min(ceiling, w.limit+w.cfg.Increase))
			w.increases++
		}
	}
}

// slowStartHold is the earliest instant slow start lets the next call
// start once a round trip is measured: its starts are spaced at twice
// the rate its limit carries (the limit doubles each round trip), not
// sent as each answer frees a slot. Answers come in the bunches their
// calls were sent in, so a slot-clocked slow start sends each round
// trip's doubling within the spread of the latency, often a few
// milliseconds: when a window's budget runs out in the middle of it,
// every call after is refused before the first refusal is back (750 of
// a per-minute window's 1,330 with calls of 4.8 s). Spaced, the calls
// sent between the budget's end and the first refusal's return are the
// refusal round trip's share of the round trip's doubling. Not below
// twice the brake's calls in flight: a wave of at most that many costs
// a small share of a run in refusals, and spaced it fills a quota's
// window later (a thinking model's 200 calls in flight, a fixed window
// refused at its edge).
func (w *law) slowStartHold() time.Time {
	if !w.slowStart || !w.hasLatency || w.limit < 2*slowStartBrake {
		return time.Time{}
	}
	return w.slowTat
}

// slowStarted moves slow start's schedule on for a start at t.
func (w *law) slowStarted(t time.Time) {
	if !w.slowStart || !w.hasLatency {
		return
	}
	if w.slowTat.Before(t) {
		w.slowTat = t
	}
	w.slowTat = w.slowTat.Add(w.latency() / time.Duration(2*w.limit))
}
