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
